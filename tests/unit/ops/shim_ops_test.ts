import { exists } from "../../_integration.ts";
import assert from "node:assert/strict";
import { Code, ConnectError, createClient, createServiceImplSpec } from "@connectrpc/connect";
import { Task } from "../../../proto/gen/containerd/task/v2/shim_pb.ts";
import { Task as TaskV3 } from "../../../proto/gen/containerd/task/v3/shim_pb.ts";
import { TaskExitSchema, TaskStartSchema } from "../../../proto/gen/containerd/events/task_pb.ts";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { TtrpcServer } from "../../../sdk/ttrpc/server.ts";
import { createTtrpcTransport } from "../../../sdk/ttrpc/transport.ts";
import { packAny } from "../../../proto/any.ts";
import { Logger } from "../../../sdk/shim/logger.ts";
import { parseShimFlags } from "../../../sdk/shim/contract/flags.ts";
import { parseExposition } from "../../../sdk/ops/metrics.ts";
import { opsExtension } from "../../../sdk/ops/extension.ts";
import type { OpsContainerView } from "../../../sdk/ops/hooks.ts";
import { ShimOps } from "../../../sdk/ops/shim_ops.ts";
import { serveUnixHttp, unixGet } from "../../../sdk/ops/unix_http.ts";

const NS = "containerd-namespace-ttrpc";

/** Leaves a socket file nobody accepts on, as a SIGKILLed shim does. */
async function staleSocket(path: string): Promise<void> {
  const out = await new Deno.Command("python3", {
    args: ["-c", "import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])", path],
  }).output();
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
}

/** A ShimOps attached to a fake shim: a real ttrpc server, real sockets, fake containers. */
async function fakeShim(
  opts: { debug?: boolean; eventHistory?: number; origin?: "cold" | "spare"; stats?: string } = {},
) {
  const dir = await Deno.makeTempDir({ prefix: "skiff-ops-" });
  const lines: string[] = [];
  const logger = new Logger({
    level: opts.debug ? "debug" : "info",
    fields: { runtime: "io.containerd.skiff-test.v1" },
    sink: (l) => lines.push(l),
  });
  const ops = new ShimOps({
    runtime: "io.containerd.skiff-test.v1",
    version: "1.2.3",
    namespace: "ns1",
    id: "c1",
    containerdAddress: "/run/containerd/containerd.sock",
    debug: opts.debug ?? false,
    logger,
    ...(opts.eventHistory ? { eventHistory: opts.eventHistory } : {}),
  });
  const containers = new Map<string, OpsContainerView>();
  const server = new TtrpcServer({ interceptors: ops.interceptors });
  const impl = {
    state: (r: { id: string }) => {
      if (!containers.has(r.id)) {
        throw new ConnectError(`container "${r.id}" not found`, Code.NotFound);
      }
      return { id: r.id, pid: 42 };
    },
    kill: () => {
      throw new ConnectError("kill refused", Code.FailedPrecondition);
    },
  };
  server.register(createServiceImplSpec<typeof Task>(Task, impl), "containerd.task.v2.Task");
  server.register(createServiceImplSpec<typeof TaskV3>(TaskV3, impl), "containerd.task.v3.Task");
  const socket = `${dir}/shim.sock`;
  await server.listen(socket);
  await Deno.writeTextFile(`${dir}/address`, `unix://${socket}\n`);
  const spareStats = opts.stats === undefined ? undefined : `${dir}/stats.json`;
  if (spareStats) await Deno.writeTextFile(spareStats, opts.stats!);
  await ops.attach({
    origin: opts.origin ?? "cold",
    spareStats,
    socket,
    bundle: dir,
    containers: () => containers,
    sandboxes: () => 0,
    events: () => ({ published: 3, failed: 0, queued: 1 }),
    options: () => ({ binaryName: "runc" }),
  });
  const transport = createTtrpcTransport({
    path: socket,
    interceptors: [(next) => (req) => {
      req.header.set(NS, "ns1");
      return next(req);
    }],
  });
  return {
    dir,
    ops,
    lines,
    containers,
    socket,
    opsSocket: `${socket}.ops`,
    task: createClient(Task, transport),
    taskV3: createClient(TaskV3, transport),
    get: (path: string, method = "GET") =>
      unixGet(`${socket}.ops`, path, { timeoutMs: 10_000, method }),
    async [Symbol.asyncDispose]() {
      await transport.close();
      await ops.close();
      await server.close();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

function sampleValue(text: string, name: string, labels: Record<string, string>): string {
  for (const f of parseExposition(text)) {
    for (const s of f.samples) {
      if (s.name !== name) continue;
      const have = Object.fromEntries(s.labels);
      if (Object.entries(labels).every(([k, v]) => have[k] === v)) return s.value;
    }
  }
  return "absent";
}

Deno.test("ops endpoint: socket beside the ttrpc socket, mode 0600, removed on close", async () => {
  const shim = await fakeShim();
  const st = await Deno.lstat(shim.opsSocket);
  assert.ok(st.isSocket);
  assert.equal(st.mode! & 0o777, 0o600);
  assert.equal(shim.ops.socket, shim.opsSocket);
  const health = await shim.get("/healthz");
  assert.equal(health.status, 200);
  assert.equal(health.body, "ok\n");
  await shim[Symbol.asyncDispose]();
  assert.equal(await exists(shim.opsSocket), false);
});

Deno.test("ops endpoint: unknown paths 404, other methods 405, a bad limit 400", async () => {
  await using shim = await fakeShim();
  const nf = await shim.get("/nope");
  assert.equal(nf.status, 404);
  assert.match(nf.body, /no such path "\/nope": the paths are \/metrics, \/healthz/);
  assert.equal((await shim.get("/metrics/")).status, 404);
  for (const path of ["/metrics", "/healthz", "/debug/state", "/debug/events"]) {
    for (const method of ["POST", "PUT", "DELETE", "PATCH"]) {
      const r = await shim.get(path, method);
      assert.equal(r.status, 405, `${method} ${path}`);
      assert.equal(r.headers.get("allow"), "GET, HEAD");
      assert.match(r.body, new RegExp(`method ${method} is not allowed on ${path}`));
    }
  }
  for (const limit of ["0", "-1", "abc", "1.5", "100000"]) {
    const r = await shim.get(`/debug/events?limit=${limit}`);
    assert.equal(r.status, 400, limit);
    assert.match(r.body, /invalid limit ".*": it must be an integer from 1 to 256/);
  }
  const head = await shim.get("/metrics", "HEAD");
  assert.equal(head.status, 200);
  assert.equal(head.body, "");
});

Deno.test("ops endpoint: a malformed HTTP request gets 400 and the endpoint keeps serving", async () => {
  await using shim = await fakeShim();
  const conn = await Deno.connect({ transport: "unix", path: shim.opsSocket });
  await conn.write(new TextEncoder().encode("THIS IS NOT HTTP\r\n\r\n"));
  const buf = new Uint8Array(1024);
  const n = await conn.read(buf);
  conn.close();
  // hyper answers an unparsable request line with 400 and closes.
  assert.match(new TextDecoder().decode(buf.subarray(0, n ?? 0)), /^HTTP\/1\.1 400 /);
  assert.equal((await shim.get("/healthz")).status, 200);
});

Deno.test("ttrpc interceptor counts calls by wire service, method and code, with durations", async () => {
  await using shim = await fakeShim();
  shim.containers.set("c1", {
    id: "c1",
    namespace: "ns1",
    bundle: shim.dir,
    options: {},
    rootfsMounted: false,
    init: {
      execId: "",
      pid: 42,
      state: "running",
      exit: undefined,
      stdio: { stdin: "", stdout: "", stderr: "", terminal: false },
    },
    execs: new Map(),
  });
  await shim.task.state({ id: "c1" });
  await shim.task.state({ id: "c1" });
  await assert.rejects(shim.task.state({ id: "missing" }), /not found/);
  await shim.taskV3.state({ id: "c1" });
  await assert.rejects(shim.task.kill({ id: "c1", signal: 9 }), /kill refused/);
  const text = (await shim.get("/metrics")).body;
  const req = (service: string, method: string, code: string) =>
    sampleValue(text, "skiff_ttrpc_requests_total", { service, method, code });
  assert.equal(req("containerd.task.v2.Task", "State", "OK"), "2");
  assert.equal(req("containerd.task.v2.Task", "State", "NotFound"), "1");
  assert.equal(req("containerd.task.v3.Task", "State", "OK"), "1");
  assert.equal(req("containerd.task.v2.Task", "Kill", "FailedPrecondition"), "1");
  assert.equal(req("containerd.task.v2.Task", "Kill", "OK"), "absent");
  const count = (service: string, method: string) =>
    sampleValue(text, "skiff_ttrpc_request_duration_seconds_count", { service, method });
  assert.equal(count("containerd.task.v2.Task", "State"), "3");
  assert.equal(count("containerd.task.v3.Task", "State"), "1");
  assert.equal(
    sampleValue(text, "skiff_ttrpc_request_duration_seconds_bucket", {
      service: "containerd.task.v2.Task",
      method: "State",
      le: "+Inf",
    }),
    "3",
  );
  assert.equal(sampleValue(text, "skiff_containers", {}), "1");
  assert.equal(sampleValue(text, "skiff_processes", {}), "1");
  assert.equal(sampleValue(text, "skiff_events_published_total", {}), "3");
  assert.equal(sampleValue(text, "skiff_events_queued", {}), "1");
  const res = await shim.get("/metrics");
  assert.equal(res.headers.get("content-type"), "text/plain; version=0.0.4; charset=utf-8");
});

Deno.test("debug log: one line per RPC with rpc, id, namespace, code and duration; none at info", async () => {
  {
    await using shim = await fakeShim({ debug: true });
    await assert.rejects(shim.task.state({ id: "gone1", execId: "e7" }), /not found/);
    const line = shim.lines.find((l) => l.includes("msg=rpc"));
    assert.ok(line, shim.lines.join(""));
    assert.match(
      line,
      /level=debug msg=rpc runtime=io\.containerd\.skiff-test\.v1 rpc=containerd\.task\.v2\.Task\/State id=gone1 exec_id=e7 namespace=ns1 code=NotFound duration_ms=[0-9.]+ error="container \\"gone1\\" not found"\n$/,
    );
  }
  {
    await using shim = await fakeShim({ debug: false });
    await assert.rejects(shim.task.state({ id: "gone2" }), /not found/);
    assert.deepEqual(shim.lines.filter((l) => l.includes("msg=rpc")), []);
  }
});

Deno.test("ops endpoint: the server's origin, and the node's start counters read at scrape time", async () => {
  await using shim = await fakeShim({ origin: "spare", stats: '{"adopted":4,"cold":2}\n' });
  const metrics = async () => (await shim.get("/metrics")).body;
  let text = await metrics();
  assert.equal(sampleValue(text, "skiff_shim_origin", { origin: "spare" }), "1");
  assert.equal(sampleValue(text, "skiff_shim_origin", { origin: "cold" }), "absent");
  assert.equal(sampleValue(text, "skiff_spares_adopted_total", {}), "4");
  assert.equal(sampleValue(text, "skiff_cold_starts_total", {}), "2");
  // Other servers count into the same file: the next scrape shows their starts.
  await Deno.writeTextFile(`${shim.dir}/stats.json`, '{"adopted":5,"cold":2}\n');
  text = await metrics();
  assert.equal(sampleValue(text, "skiff_spares_adopted_total", {}), "5");
  const s = JSON.parse((await shim.get("/debug/state")).body);
  assert.equal(s.origin, "spare");
  assert.deepEqual(s.starts, { adopted: 5, cold: 2 });
  // A file that went away (or was torn) counts nothing rather than failing the scrape.
  await Deno.writeTextFile(`${shim.dir}/stats.json`, "{not json");
  assert.equal(sampleValue(await metrics(), "skiff_cold_starts_total", {}), "0");
});

Deno.test("ops endpoint: spares off shows the origin but no start counters", async () => {
  await using shim = await fakeShim();
  const text = (await shim.get("/metrics")).body;
  assert.equal(sampleValue(text, "skiff_shim_origin", { origin: "cold" }), "1");
  assert.equal(sampleValue(text, "skiff_spares_adopted_total", {}), "absent");
  assert.equal(sampleValue(text, "skiff_cold_starts_total", {}), "absent");
});

Deno.test("/debug/state shows containers, processes, endpoint and options", async () => {
  await using shim = await fakeShim();
  shim.containers.set("c1", {
    id: "c1",
    namespace: "ns1",
    bundle: shim.dir,
    options: { binaryName: "runc", root: "/run/r" },
    rootfsMounted: true,
    init: {
      execId: "",
      pid: 42,
      state: "running",
      exit: undefined,
      stdio: { stdin: "", stdout: "/fifo/out", stderr: "", terminal: false },
    },
    execs: new Map([["e1", {
      execId: "e1",
      pid: 43,
      state: "stopped",
      exit: { status: 3, exitedAt: new Date("2025-01-02T03:04:05.000Z") },
      stdio: { stdin: "", stdout: "", stderr: "", terminal: true },
    }]]),
  });
  const r = await shim.get("/debug/state");
  assert.equal(r.status, 200);
  assert.match(r.headers.get("content-type")!, /^application\/json/);
  const s = JSON.parse(r.body);
  assert.equal(s.runtime, "io.containerd.skiff-test.v1");
  assert.equal(s.namespace, "ns1");
  assert.equal(s.pid, Deno.pid);
  assert.deepEqual(s.endpoint, {
    address: `unix://${shim.socket}`,
    socket: shim.socket,
    ops: shim.opsSocket,
  });
  assert.deepEqual(s.options, { binaryName: "runc" });
  assert.equal(s.origin, "cold");
  assert.equal(s.starts, null, "spares off: no counters");
  assert.equal(s.processes, 1);
  assert.deepEqual(s.containers, [{
    id: "c1",
    namespace: "ns1",
    bundle: shim.dir,
    rootfsMounted: true,
    options: { binaryName: "runc", root: "/run/r" },
    init: {
      execId: "",
      pid: 42,
      state: "running",
      stdio: { stdin: "", stdout: "/fifo/out", stderr: "", terminal: false },
    },
    execs: [{
      execId: "e1",
      pid: 43,
      state: "stopped",
      exitStatus: 3,
      exitedAt: "2025-01-02T03:04:05.000Z",
      stdio: { stdin: "", stdout: "", stderr: "", terminal: true },
    }],
  }]);
});

Deno.test("/debug/events keeps the most recent events with topics, times and payloads", async () => {
  await using shim = await fakeShim({ eventHistory: 3 });
  const at = new Date("2025-05-06T07:08:09.000Z");
  shim.ops.onQueued({
    topic: "/tasks/start",
    event: packAny(TaskStartSchema, { containerId: "c0", pid: 1 }),
    timestamp: at,
  });
  for (let i = 1; i <= 3; i++) {
    shim.ops.onQueued({
      topic: "/tasks/exit",
      event: packAny(TaskExitSchema, {
        containerId: `c${i}`,
        id: `c${i}`,
        pid: 100 + i,
        exitStatus: i,
        exitedAt: timestampFromDate(at),
      }),
      timestamp: at,
    });
  }
  const all = JSON.parse((await shim.get("/debug/events")).body);
  // Capacity 3: the start event has been pushed out.
  assert.deepEqual(all.map((e: { event: { containerId: string } }) => e.event.containerId), [
    "c1",
    "c2",
    "c3",
  ]);
  assert.deepEqual(all[2], {
    time: "2025-05-06T07:08:09.000Z",
    topic: "/tasks/exit",
    type: "containerd.events.TaskExit",
    event: {
      containerId: "c3",
      id: "c3",
      pid: 103,
      exitStatus: 3,
      exitedAt: "2025-05-06T07:08:09Z",
    },
  });
  const last = JSON.parse((await shim.get("/debug/events?limit=1")).body);
  assert.equal(last.length, 1);
  assert.equal(last[0].event.containerId, "c3");
});

Deno.test("serveUnixHttp() replaces a stale socket but refuses a live one or a regular file", async () => {
  const dir = await Deno.makeTempDir({ prefix: "skiff-ops-" });
  try {
    const path = `${dir}/x.ops`;
    await staleSocket(path);
    const s = await serveUnixHttp(path, () => new Response("fresh"));
    assert.equal((await unixGet(path, "/", { timeoutMs: 10_000 })).body, "fresh");
    await assert.rejects(
      serveUnixHttp(path, () => new Response("second")),
      (e: Error) =>
        e instanceof Deno.errors.AlreadyExists && /a live server listens/.test(e.message),
    );
    assert.equal((await unixGet(path, "/", { timeoutMs: 10_000 })).body, "fresh");
    await s.close();
    assert.equal(await exists(path), false);
    await Deno.writeTextFile(`${dir}/file.ops`, "not a socket");
    await assert.rejects(
      serveUnixHttp(`${dir}/file.ops`, () => new Response("")),
      /exists and is not a socket/,
    );
    assert.equal(await Deno.readTextFile(`${dir}/file.ops`), "not a socket");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("ShimOps.attach() logs and carries on when the socket cannot be served", async () => {
  const lines: string[] = [];
  const ops = new ShimOps({
    runtime: "rt",
    version: "1",
    namespace: "ns",
    id: "x",
    containerdAddress: "",
    debug: false,
    logger: new Logger({ sink: (l) => lines.push(l) }),
  });
  await ops.attach({
    origin: "cold",
    spareStats: undefined,
    socket: "/nonexistent-dir-for-skiff-ops/shim.sock",
    bundle: "/nonexistent",
    containers: () => new Map(),
    sandboxes: () => 0,
    events: () => ({ published: 0, failed: 0, queued: 0 }),
    options: () => undefined,
  });
  assert.equal(ops.socket, undefined);
  assert.match(lines.join(""), /level=warning msg="operations endpoint unavailable"/);
  await ops.close();
});

Deno.test("opsExtension() sets up nothing, the RPC log only, or the endpoint, as configured", async () => {
  const dir = await Deno.makeTempDir({ prefix: "skiff-ops-" });
  const logger = new Logger();
  const flags = parseShimFlags(["-namespace", "n", "-id", "i", "-address", "/a"]);
  const setup = {
    shim: { runtimeName: "rt", version: "1" },
    flags,
    logger,
    origin: "cold" as const,
    socket: `${dir}/shim.sock`,
    bundle: dir,
  };
  try {
    assert.equal(await opsExtension({ env: undefined }).setup(setup), undefined);
    const debug = { ...setup, flags: { ...flags, debug: true } };
    const logOnly = await opsExtension({ env: "0" }).setup(debug);
    assert.equal(logOnly?.interceptors?.length, 1);
    assert.equal(logOnly?.onServing, undefined, "the RPC log alone serves nothing");
    const full = await opsExtension({ env: "1" }).setup(setup);
    assert.ok(full?.onServing && full.onShutdown && full.onEvent);
    assert.equal(full.interceptors?.length, 1);
    await full.onShutdown(); // never attached: nothing to remove, nothing served
    assert.deepEqual([...Deno.readDirSync(dir)], []);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("ShimOps.close() during attach() still removes the socket attach creates", async () => {
  const dir = await Deno.makeTempDir({ prefix: "skiff-ops-" });
  try {
    for (const when of ["at once", "after a tick", "after the socket appears"]) {
      const ops = new ShimOps({
        runtime: "rt",
        version: "1",
        namespace: "ns",
        id: "x",
        containerdAddress: "",
        debug: false,
        logger: new Logger(),
      });
      const socket = `${dir}/shim.sock`;
      const attaching = ops.attach({
        origin: "cold",
        spareStats: undefined,
        socket,
        bundle: dir,
        containers: () => new Map(),
        sandboxes: () => 0,
        events: () => ({ published: 0, failed: 0, queued: 0 }),
        options: () => undefined,
      });
      if (when === "after a tick") await new Promise((r) => setTimeout(r, 0));
      if (when === "after the socket appears") {
        while (!(await exists(`${socket}.ops`))) await new Promise((r) => setTimeout(r, 1));
      }
      await ops.close();
      await attaching;
      assert.equal(await exists(`${socket}.ops`), false, when);
      assert.deepEqual([...Deno.readDirSync(dir)], [], `${when}: no temp dirs left`);
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("ShimOps: /debug/state names the endpoint's socket from its first answer", async () => {
  // The socket accepts as soon as it is renamed into place, before serveUnixHttp() returns:
  // a client polling from the start must never see the endpoint without its own socket.
  const dir = await Deno.makeTempDir({ prefix: "skiff-ops-" });
  const ops = new ShimOps({
    runtime: "rt",
    version: "1",
    namespace: "ns",
    id: "x",
    containerdAddress: "",
    debug: false,
    logger: new Logger(),
  });
  const socket = `${dir}/shim.sock`;
  try {
    const attaching = ops.attach({
      origin: "cold",
      spareStats: undefined,
      socket,
      bundle: dir,
      containers: () => new Map(),
      sandboxes: () => 0,
      events: () => ({ published: 0, failed: 0, queued: 0 }),
      options: () => undefined,
    });
    let first: { endpoint: { ops: string } } | undefined;
    while (!first) {
      try {
        first = JSON.parse(
          (await unixGet(`${socket}.ops`, "/debug/state", { timeoutMs: 10_000 })).body,
        );
      } catch (e) {
        if (!(e instanceof TypeError)) throw e; // not serving yet
      }
    }
    await attaching;
    assert.equal(first.endpoint.ops, `${socket}.ops`);
  } finally {
    await ops.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("serveUnixHttp() closes connections that idle or send half a request, and caps how many it serves at once", async () => {
  const dir = await Deno.makeTempDir({ prefix: "skiff-ops-bounds-" });
  const path = `${dir}/x.ops`;
  const s = await serveUnixHttp(path, () => new Response("ok"), {
    maxConnections: 2,
    connectionTimeoutMs: 300,
  });
  try {
    const ended = async (c: Deno.Conn) => {
      const buf = new Uint8Array(1024);
      while ((await c.read(buf).catch(() => null)) !== null) { /* drain */ }
      c.close();
    };
    const silent = await Deno.connect({ transport: "unix", path });
    const partial = await Deno.connect({ transport: "unix", path });
    await partial.write(new TextEncoder().encode("GET /healthz HTTP/1.1\r\nHost: x\r\n"));
    await new Promise((r) => setTimeout(r, 50));
    // Both slots are taken: a third connection is closed unanswered.
    const third = await Deno.connect({ transport: "unix", path });
    await third.write(new TextEncoder().encode("GET / HTTP/1.1\r\nHost: x\r\n\r\n")).catch(() => 0);
    const answer = await third.read(new Uint8Array(64)).catch(() => null);
    assert.equal(answer, null);
    third.close();
    // The held ones are dropped by the server itself, and it serves again.
    await Promise.all([ended(silent), ended(partial)]);
    assert.equal((await unixGet(path, "/", { timeoutMs: 5000 })).body, "ok");
  } finally {
    await s.close();
    await Deno.remove(dir, { recursive: true });
  }
});
