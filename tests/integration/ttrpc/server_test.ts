import { takeAccepted } from "../../../sdk/shim/server/fd_conn.ts";
import assert from "node:assert/strict";
import { create, toBinary } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createClient,
  createServiceImplSpec,
  type HandlerContext,
  type Interceptor,
} from "@connectrpc/connect";
import {
  StateRequestSchema,
  StateResponseSchema,
  Task,
} from "../../../proto/gen/containerd/task/v2/shim_pb.ts";
import { Task as TaskV3 } from "../../../proto/gen/containerd/task/v3/shim_pb.ts";
import { fromBinary } from "@bufbuild/protobuf";
import { encodeFrame, FrameType } from "../../../sdk/ttrpc/frame.ts";
import { TtrpcServer } from "../../../sdk/ttrpc/server.ts";
import { createTtrpcTransport } from "../../../sdk/ttrpc/transport.ts";
import { integrationTest } from "../../_integration.ts";
import {
  RawClient,
  requestBytes,
  startTaskServer,
  tempSocket,
} from "../../fixtures/ttrpc/helpers.ts";

const NS_KEY = "containerd-namespace-ttrpc";

/** Leaves a socket file nobody listens on, as a killed server does (Deno unlinks on close). */
async function leaveStaleSocket(path: string): Promise<void> {
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "eval",
      `Deno.listen({ transport: "unix", path: ${
        JSON.stringify(path)
      } }); console.log("up"); setInterval(() => {}, 1000);`,
    ],
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const reader = child.stdout.getReader();
  await reader.read();
  reader.releaseLock();
  child.kill("SIGKILL");
  await child.status;
  await child.stdout.cancel();
}

Deno.test("TtrpcServer serves a Task ServiceImpl to a ttrpc transport client", async () => {
  await using srv = await startTaskServer({
    state: (req) => ({ id: req.id, bundle: `/bundles/${req.id}`, pid: 4242, stdout: "/out" }),
  });
  await using transport = createTtrpcTransport({ path: srv.path });
  const task = createClient(Task, transport);
  const res = await task.state({ id: "c1" });
  assert.equal(res.id, "c1");
  assert.equal(res.bundle, "/bundles/c1");
  assert.equal(res.pid, 4242);
  assert.equal(res.stdout, "/out");
});

Deno.test("register() serves one implementation under containerd.task.v2.Task and v3.Task", async () => {
  await using srv = await startTaskServer({
    state: (req, ctx) => ({ id: req.id, bundle: ctx.url }),
  });
  await using transport = createTtrpcTransport({ path: srv.path });
  const v2 = await createClient(Task, transport).state({ id: "a" });
  const v3 = await createClient(TaskV3, transport).state({ id: "b" });
  assert.equal(v2.bundle, "/containerd.task.v2.Task/State");
  assert.equal(v3.bundle, "/containerd.task.v3.Task/State");
  assert.deepEqual(srv.server.serviceNames, ["containerd.task.v2.Task", "containerd.task.v3.Task"]);
});

Deno.test("register() without names uses the service's full name and refuses duplicates", async () => {
  const server = new TtrpcServer();
  server.register(createServiceImplSpec<typeof Task>(Task, {}));
  assert.deepEqual(server.serviceNames, ["containerd.task.v2.Task"]);
  assert.throws(
    () => server.register(createServiceImplSpec<typeof Task>(Task, {}), "containerd.task.v2.Task"),
    (e: unknown) =>
      e instanceof ConnectError && e.code === Code.AlreadyExists &&
      /containerd\.task\.v2\.Task/.test(e.message),
  );
  await server.close();
});

Deno.test("TtrpcServer answers concurrent calls out of order, matched by stream id", async () => {
  const release = new Map<string, () => void>();
  const started = new Map<string, PromiseWithResolvers<void>>();
  for (const id of ["a", "b", "c"]) started.set(id, Promise.withResolvers());
  await using srv = await startTaskServer({
    async state(req) {
      const gate = Promise.withResolvers<void>();
      release.set(req.id, gate.resolve);
      started.get(req.id)!.resolve();
      await gate.promise;
      return { id: req.id, pid: req.id.charCodeAt(0) };
    },
  });
  // On the wire: three requests on one connection, answered in the order we release them.
  const raw = await RawClient.connect(srv.path);
  try {
    for (const [i, id] of ["a", "b", "c"].entries()) {
      await raw.request(
        1 + 2 * i,
        "containerd.task.v2.Task",
        "State",
        toBinary(StateRequestSchema, create(StateRequestSchema, { id })),
      );
    }
    for (const s of started.values()) await s.promise;
    const order: Array<[number, string]> = [];
    for (const id of ["c", "a", "b"]) {
      release.get(id)!();
      const { id: streamId, res } = await raw.response();
      assert.equal(res.status, undefined);
      order.push([streamId, fromBinary(StateResponseSchema, res.payload).id]);
    }
    assert.deepEqual(order, [[5, "c"], [1, "a"], [3, "b"]]);
  } finally {
    raw.close();
  }
});

Deno.test("TtrpcServer gives handlers the timeout_nano deadline as timeoutMs and signal", async () => {
  const seen: Array<number | undefined> = [];
  const aborted = Promise.withResolvers<unknown>();
  await using srv = await startTaskServer({
    state(req, ctx) {
      seen.push(ctx.timeoutMs());
      return { id: req.id };
    },
    async wait(_req, ctx) {
      await new Promise<void>((resolve) => ctx.signal.addEventListener("abort", () => resolve()));
      aborted.resolve(ctx.signal.reason);
      return {};
    },
  });
  await using transport = createTtrpcTransport({ path: srv.path });
  const task = createClient(Task, transport);
  await task.state({ id: "x" }, { timeoutMs: 60_000 });
  await task.state({ id: "y" });
  assert.ok(seen[0] !== undefined && seen[0] > 0 && seen[0] <= 60_000, `timeoutMs ${seen[0]}`);
  assert.equal(seen[1], undefined);
  // A short deadline: the client gives up with DeadlineExceeded and the handler's signal aborts
  // with DeadlineExceeded too, because the deadline travelled in timeout_nano.
  await assert.rejects(
    task.wait({ id: "z" }, { timeoutMs: 100 }),
    (e: unknown) => e instanceof ConnectError && e.code === Code.DeadlineExceeded,
  );
  const reason = await aborted.promise;
  assert.ok(
    reason instanceof ConnectError && reason.code === Code.DeadlineExceeded,
    String(reason),
  );
});

Deno.test("TtrpcServer passes ttrpc metadata as requestHeader, including the namespace", async () => {
  let ctxSeen: HandlerContext | undefined;
  await using srv = await startTaskServer({
    state(req, ctx) {
      ctxSeen = ctx;
      return { id: req.id, bundle: ctx.requestHeader.get(NS_KEY) ?? "" };
    },
  });
  await using transport = createTtrpcTransport({ path: srv.path });
  const res = await createClient(Task, transport).state(
    { id: "c" },
    { headers: { [NS_KEY]: "skiff-test", "x-trace": "t1" } },
  );
  assert.equal(res.bundle, "skiff-test");
  assert.equal(ctxSeen?.requestHeader.get("x-trace"), "t1");
  assert.equal(ctxSeen?.protocolName, "ttrpc");
  assert.equal(ctxSeen?.method.name, "State");
  assert.equal(ctxSeen?.service.typeName, "containerd.task.v2.Task");
});

Deno.test("TtrpcServer keeps metadata entries Headers cannot hold out of requestHeader", async () => {
  let header: Headers | undefined;
  await using srv = await startTaskServer({
    state(req, ctx) {
      header = ctx.requestHeader;
      return { id: req.id };
    },
  });
  const raw = await RawClient.connect(srv.path);
  try {
    const payload = requestBytes({
      service: "containerd.task.v2.Task",
      method: "State",
      metadata: [
        { $typeName: "ttrpc.KeyValue", key: "bad key:", value: "x" },
        { $typeName: "ttrpc.KeyValue", key: NS_KEY, value: "ns1" },
        { $typeName: "ttrpc.KeyValue", key: "multi", value: "1" },
        { $typeName: "ttrpc.KeyValue", key: "multi", value: "2" },
      ],
    });
    await raw.write(encodeFrame(1, FrameType.Request, 0, payload));
    const { res } = await raw.response();
    assert.equal(res.status, undefined);
    assert.equal(header?.get(NS_KEY), "ns1");
    assert.equal(header?.get("multi"), "1, 2");
    assert.equal([...header!.keys()].includes("bad key:"), false);
  } finally {
    raw.close();
  }
});

Deno.test("TtrpcServer maps handler errors to statuses the client sees as ConnectErrors", async () => {
  await using srv = await startTaskServer({
    state(req) {
      if (req.id === "missing") {
        throw new ConnectError("container missing not found", Code.NotFound);
      }
      if (req.id === "plain") throw new Error("disk on fire");
      throw "a string";
    },
  });
  await using transport = createTtrpcTransport({ path: srv.path });
  const task = createClient(Task, transport);
  const cases: Array<[string, Code, string]> = [
    ["missing", Code.NotFound, "container missing not found"],
    ["plain", Code.Unknown, "disk on fire"],
    ["other", Code.Unknown, "a string"],
  ];
  for (const [id, code, message] of cases) {
    await assert.rejects(task.state({ id }), (e: unknown) => {
      assert.ok(e instanceof ConnectError);
      assert.equal(e.code, code);
      assert.equal(e.rawMessage, message);
      return true;
    });
  }
  // A method the implementation leaves out answers Unimplemented (Connect fills it in).
  await assert.rejects(
    task.pids({ id: "x" }),
    (e: unknown) =>
      e instanceof ConnectError && e.code === Code.Unimplemented &&
      /Pids is not implemented/.test(e.rawMessage),
  );
});

Deno.test("TtrpcServer applies server interceptors around handlers", async () => {
  const calls: string[] = [];
  const interceptor: Interceptor = (next) => async (req) => {
    calls.push(`before ${req.url} ${req.header.get(NS_KEY)}`);
    const res = await next(req);
    calls.push(`after ${req.method.name}`);
    return res;
  };
  await using srv = await startTaskServer({ state: (req) => ({ id: req.id, pid: 7 }) }, {
    interceptors: [interceptor],
  });
  await using transport = createTtrpcTransport({ path: srv.path });
  const res = await createClient(Task, transport).state({ id: "i" }, {
    headers: { [NS_KEY]: "n" },
  });
  assert.equal(res.pid, 7);
  assert.deepEqual(calls, ["before /containerd.task.v2.Task/State n", "after State"]);
});

Deno.test("close() stops accepting, lets running calls answer, then closes and removes the socket", async () => {
  const sock = await tempSocket();
  const gate = Promise.withResolvers<void>();
  const started = Promise.withResolvers<void>();
  const server = new TtrpcServer();
  server.register(createServiceImplSpec<typeof Task>(Task, {
    async state(req) {
      started.resolve();
      await gate.promise;
      return { id: req.id, pid: 1 };
    },
  }));
  await server.listen(sock.path);
  const transport = createTtrpcTransport({ path: sock.path });
  try {
    const call = createClient(Task, transport).state({ id: "slow" });
    await started.promise;
    let closedDone = false;
    const closing = server.close().then(() => closedDone = true);
    // The listener is gone at once: the socket file is removed and new dials fail.
    await new Promise((r) => setTimeout(r, 0));
    assert.throws(() => Deno.lstatSync(sock.path), Deno.errors.NotFound);
    assert.equal(closedDone, false);
    gate.resolve();
    const res = await call;
    assert.equal(res.pid, 1);
    await closing;
    await server.closed;
    assert.equal(closedDone, true);
  } finally {
    await transport.close();
    await sock.remove();
  }
});

Deno.test("close({ timeoutMs }) aborts handlers that do not finish and closes their connections", async () => {
  const reason = Promise.withResolvers<unknown>();
  const started = Promise.withResolvers<void>();
  await using srv = await startTaskServer({
    async wait(_req, ctx) {
      started.resolve();
      await new Promise<void>((resolve) => ctx.signal.addEventListener("abort", () => resolve()));
      reason.resolve(ctx.signal.reason);
      return {};
    },
  });
  await using transport = createTtrpcTransport({ path: srv.path });
  const call = createClient(Task, transport).wait({ id: "w" });
  await started.promise;
  await srv.server.close({ timeoutMs: 20 });
  const r = await reason.promise;
  assert.ok(r instanceof ConnectError && r.code === Code.Unavailable, String(r));
  await assert.rejects(
    call,
    (e: unknown) => e instanceof ConnectError && e.code === Code.Unavailable,
  );
});

Deno.test("listen() replaces a stale socket, refuses a live one or a regular file, and uses mode 0600", async () => {
  const sock = await tempSocket();
  try {
    await leaveStaleSocket(sock.path);
    assert.ok(Deno.lstatSync(sock.path).isSocket);
    const server = new TtrpcServer();
    server.register(createServiceImplSpec<typeof Task>(Task, { state: (r) => ({ id: r.id }) }));
    await server.listen(sock.path);
    assert.equal(Deno.lstatSync(sock.path).mode! & 0o777, 0o600);
    // A second server on the same path refuses to steal it.
    const second = new TtrpcServer();
    await assert.rejects(
      second.listen(sock.path),
      (e: unknown) => e instanceof ConnectError && e.code === Code.AlreadyExists,
    );
    await using transport = createTtrpcTransport({ path: `unix://${sock.path}` });
    assert.equal((await createClient(Task, transport).state({ id: "ok" })).id, "ok");
    await server.close();
    await second.close();
    const file = `${sock.dir}/file`;
    Deno.writeTextFileSync(file, "keep me");
    await assert.rejects(
      new TtrpcServer().listen(file),
      (e: unknown) => e instanceof ConnectError && e.code === Code.AlreadyExists,
    );
    assert.equal(Deno.readTextFileSync(file), "keep me");
  } finally {
    await sock.remove();
  }
});

Deno.test("listen() and serve() refuse to start after close()", async () => {
  const sock = await tempSocket();
  try {
    const server = new TtrpcServer();
    await server.close();
    await assert.rejects(
      server.listen(sock.path),
      (e: unknown) => e instanceof ConnectError && e.code === Code.FailedPrecondition,
    );
  } finally {
    await sock.remove();
  }
});

Deno.test("serve() serves a listener the caller created", async () => {
  const sock = await tempSocket();
  try {
    const listener = Deno.listen({ transport: "unix", path: sock.path });
    const server = new TtrpcServer().register(
      createServiceImplSpec<typeof Task>(Task, { state: (r) => ({ id: r.id, pid: 9 }) }),
    );
    const serving = server.serve(listener);
    await using transport = createTtrpcTransport({ path: sock.path });
    assert.equal((await createClient(Task, transport).state({ id: "s" })).pid, 9);
    await server.close();
    await serving;
  } finally {
    await sock.remove();
  }
});

Deno.test("requireSameUser accepts connections from this process's own user", async () => {
  await using srv = await startTaskServer({ state: (r) => ({ id: r.id }) }, {
    requireSameUser: true,
  });
  await using transport = createTtrpcTransport({ path: srv.path });
  const task = createClient(Task, transport);
  assert.equal((await task.state({ id: "me" })).id, "me");
  // Several connections in a row are each identified.
  for (let i = 0; i < 3; i++) {
    await using t = createTtrpcTransport({ path: srv.path });
    assert.equal((await createClient(Task, t).state({ id: `n${i}` })).id, `n${i}`);
  }
});

Deno.test("requireSameUser with takeConnection: connections served from duplicates are still told apart", async () => {
  const errors: unknown[] = [];
  await using srv = await startTaskServer({ state: (r) => ({ id: r.id }) }, {
    requireSameUser: true,
    takeConnection: takeAccepted,
    onError: (e) => errors.push(e),
  });
  // Each earlier connection stays open (its socket now has a second descriptor, ours) while the
  // next is accepted and identified.
  const open: Disposable[] = [];
  try {
    for (let i = 0; i < 4; i++) {
      const t = createTtrpcTransport({ path: srv.path });
      open.push({ [Symbol.dispose]: () => void t.close() });
      assert.equal((await createClient(Task, t).state({ id: `k${i}` })).id, `k${i}`);
    }
  } finally {
    for (const o of open) o[Symbol.dispose]();
  }
  assert.deepEqual(errors.map(String), []);
});

Deno.test("requireSameUser with takeConnection: the taker gets the accepted socket's descriptor", async () => {
  const seen: string[] = [];
  await using srv = await startTaskServer({ state: (r) => ({ id: r.id }) }, {
    requireSameUser: true,
    takeConnection: (conn, inode, fd) => {
      seen.push(`${Deno.readLinkSync(`/proc/self/fd/${fd}`)} ${inode}`);
      return takeAccepted(conn, inode, fd);
    },
  });
  for (let i = 0; i < 2; i++) {
    const t = createTtrpcTransport({ path: srv.path });
    try {
      assert.equal((await createClient(Task, t).state({ id: `d${i}` })).id, `d${i}`);
    } finally {
      t.close();
    }
  }
  assert.equal(seen.length, 2);
  for (const s of seen) assert.match(s, /^socket:\[(\d+)\] \1$/);
});

integrationTest(
  "requireSameUser refuses a peer running as another user",
  { root: true, binaries: ["setpriv"] },
  async () => {
    const errors: unknown[] = [];
    const sock = await tempSocket();
    const denoDir = await Deno.makeTempDir({ prefix: "skiff-ttrpc-denodir-" });
    const server = new TtrpcServer({ requireSameUser: true, onError: (e) => errors.push(e) });
    server.register(createServiceImplSpec<typeof Task>(Task, { state: (r) => ({ id: r.id }) }));
    try {
      Deno.chmodSync(sock.dir, 0o755);
      Deno.chmodSync(denoDir, 0o777);
      await server.listen(sock.path, { mode: 0o666 });
      // The peer, as nobody: sends a State request and reports what came back.
      const request = encodeFrame(
        1,
        FrameType.Request,
        0,
        requestBytes({ service: "containerd.task.v2.Task", method: "State" }),
      );
      const script = `
        const c = await Deno.connect({ transport: "unix", path: ${JSON.stringify(sock.path)} });
        try { await c.write(new Uint8Array(${JSON.stringify([...request])})); } catch { }
        let got = 0;
        try { const b = new Uint8Array(64); const n = await c.read(b); got = n ?? 0; } catch { }
        console.log(got > 0 ? "answered" : "refused");`;
      const out = await new Deno.Command("setpriv", {
        args: ["--reuid=65534", "--regid=65534", "--clear-groups", Deno.execPath(), "eval", script],
        env: { DENO_DIR: denoDir, HOME: denoDir, NO_COLOR: "1" },
        stdout: "piped",
        stderr: "piped",
      }).output();
      const stdout = new TextDecoder().decode(out.stdout).trim();
      assert.equal(stdout, "refused", new TextDecoder().decode(out.stderr));
      assert.ok(
        errors.some((e) =>
          e instanceof ConnectError && e.code === Code.PermissionDenied &&
          /uid 65534/.test(e.message)
        ),
        `errors: ${errors.map(String).join("; ")}`,
      );
      // The same server still serves its own user.
      await using transport = createTtrpcTransport({ path: sock.path });
      assert.equal((await createClient(Task, transport).state({ id: "root" })).id, "root");
    } finally {
      await server.close();
      await sock.remove();
      await Deno.remove(denoDir, { recursive: true });
    }
  },
);

Deno.test("TtrpcServer answers a response too large for one frame with ResourceExhausted", async () => {
  await using srv = await startTaskServer({
    state: (req) => ({ id: req.id, stdout: "x".repeat(5 << 20) }),
    pids: () => ({ processes: [{ pid: 1 }] }),
  });
  await using transport = createTtrpcTransport({ path: srv.path });
  const task = createClient(Task, transport);
  await assert.rejects(task.state({ id: "big" }), (e: unknown) => {
    assert.ok(e instanceof ConnectError);
    assert.equal(e.code, Code.ResourceExhausted);
    assert.match(e.rawMessage, /exceeds maximum message size of 4194304/);
    return true;
  });
  assert.equal((await task.pids({ id: "small" })).processes[0].pid, 1);
});

Deno.test("registerLazy() loads a service on its first request, once; a failed load answers Internal and is retried", async () => {
  const sock = await tempSocket();
  const server = new TtrpcServer();
  let loads = 0;
  server.registerLazy(() => {
    loads++;
    if (loads === 1) return Promise.reject(new Error("not yet"));
    return Promise.resolve(createServiceImplSpec<typeof Task>(Task, {
      state: (req) => ({ id: req.id, pid: 7 }),
    }));
  }, "containerd.task.v2.Task");
  assert.deepEqual(server.serviceNames, ["containerd.task.v2.Task"]);
  assert.equal(loads, 0);
  await server.listen(sock.path);
  const transport = createTtrpcTransport({ path: sock.path });
  try {
    const task = createClient(Task, transport);
    await assert.rejects(
      task.state({ id: "a" }),
      (e: unknown) =>
        e instanceof ConnectError && e.code === Code.Internal && /not yet/.test(e.message),
    );
    const [a, b] = await Promise.all([task.state({ id: "a" }), task.state({ id: "b" })]);
    assert.deepEqual([a.id, a.pid, b.id], ["a", 7, "b"]);
    assert.equal((await task.state({ id: "c" })).id, "c");
    assert.equal(loads, 2);
    assert.throws(
      () => server.registerLazy(() => Promise.reject(new Error("x")), "containerd.task.v2.Task"),
      (e: unknown) => e instanceof ConnectError && e.code === Code.AlreadyExists,
    );
  } finally {
    await transport.close?.();
    await server.close();
    await sock.remove();
  }
});
