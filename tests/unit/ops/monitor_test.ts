import assert from "node:assert/strict";
import { Logger } from "../../../sdk/shim/logger.ts";
import { parseExposition } from "../../../sdk/ops/metrics.ts";
import { isLoopback, NodeMonitor, serveMonitor } from "../../../sdk/ops/monitor.ts";
import { parseMonitorArgs } from "../../../sdk/ops/monitor_cli.ts";
import { ShimOps } from "../../../sdk/ops/shim_ops.ts";
import { serveUnixHttp } from "../../../sdk/ops/unix_http.ts";

/** A shim's operations endpoint (the real ShimOps) with no ttrpc server behind it. */
async function endpoint(
  dir: string,
  name: string,
  who: { ns: string; id: string; rt: string },
  origin: "cold" | "spare" = "cold",
) {
  const ops = new ShimOps({
    runtime: who.rt,
    version: "0.0.1",
    namespace: who.ns,
    id: who.id,
    containerdAddress: "/c.sock",
    debug: false,
    logger: new Logger(),
  });
  ops.metrics.taskCreated("ok");
  await ops.attach({
    origin,
    spareStats: undefined,
    socket: `${dir}/${name}`,
    bundle: dir,
    containers: () => new Map(),
    sandboxes: () => 0,
    events: () => ({ published: 0, failed: 0, queued: 0 }),
    options: () => undefined,
  });
  assert.ok(ops.socket, "endpoint did not start");
  return ops;
}

/** A unix socket that accepts connections and never answers (a hung shim). */
function hungSocket(path: string) {
  const listener = Deno.listen({ transport: "unix", path });
  const conns: Deno.Conn[] = [];
  const accepting = (async () => {
    try {
      for await (const c of listener) conns.push(c);
    } catch { /* closed */ }
  })();
  return {
    async close() {
      listener.close();
      for (const c of conns) c.close();
      await accepting;
    },
  };
}

async function staleSocket(path: string): Promise<void> {
  const out = await new Deno.Command("python3", {
    args: ["-c", "import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])", path],
  }).output();
  assert.ok(out.success);
}

/** Fails instead of hanging the run when a deadline inside the monitor does not work. */
function guard<T>(p: Promise<T>, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  return Promise.race([
    p,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} never finished`)), 30_000);
    }),
  ]).finally(() => clearTimeout(timer));
}

function labelsOf(text: string, name: string): Record<string, string>[] {
  return parseExposition(text).flatMap((f) =>
    f.samples.filter((s) => s.name === name).map((s) => Object.fromEntries(s.labels))
  );
}

Deno.test("NodeMonitor merges shims' metrics labelled with namespace, id and runtime", async () => {
  const dir = await Deno.makeTempDir({ prefix: "skiff-mon-" });
  const a = await endpoint(dir, "aaa", { ns: "n1", id: "web", rt: "io.containerd.skiff-runc.v2" });
  const b = await endpoint(dir, "bbb", { ns: "n2", id: "db", rt: "io.containerd.skiff-runsc.v2" });
  const hung = hungSocket(`${dir}/ccc.ops`);
  await staleSocket(`${dir}/ddd.ops`);
  // An HTTP server that is not a skiff shim.
  const other = await serveUnixHttp(`${dir}/eee.ops`, () => new Response("up 1\n"));
  await Deno.writeTextFile(`${dir}/fff`, "not an ops socket");
  try {
    // The deadline is what the hung socket costs; the live endpoints must answer within it
    // however busy the machine is (300 ms failed under load).
    const monitor = new NodeMonitor({ socketDirs: [dir, `${dir}/missing`], timeoutMs: 5_000 });
    const { shims, text } = await guard(monitor.scrape(), "scrape");
    assert.deepEqual(
      shims.map((s) => [s.socket.slice(dir.length + 1), s.status]),
      [["aaa.ops", "ok"], ["bbb.ops", "ok"], ["ccc.ops", "error"], ["ddd.ops", "gone"], [
        "eee.ops",
        "error",
      ]],
    );
    assert.equal(shims[2]!.error, "no answer within 5000ms");
    assert.equal(shims[4]!.error, "no skiff_shim_info in the exposition");
    assert.deepEqual(labelsOf(text, "skiff_task_create_requests_total"), [
      { namespace: "n1", id: "web", runtime: "io.containerd.skiff-runc.v2", result: "ok" },
      { namespace: "n1", id: "web", runtime: "io.containerd.skiff-runc.v2", result: "error" },
      { namespace: "n2", id: "db", runtime: "io.containerd.skiff-runsc.v2", result: "ok" },
      { namespace: "n2", id: "db", runtime: "io.containerd.skiff-runsc.v2", result: "error" },
    ]);
    // Every series from a shim carries the three labels, first and once.
    for (const f of parseExposition(text)) {
      if (f.name.startsWith("skiff_monitor_") || f.name.startsWith("skiff_node_")) continue;
      for (const s of f.samples) {
        assert.deepEqual(s.labels.slice(0, 3).map(([k]) => k), ["namespace", "id", "runtime"]);
        assert.equal(s.labels.filter(([k]) => k === "runtime").length, 1);
      }
    }
    // One HELP and TYPE per family in the merged text.
    assert.equal(text.match(/^# TYPE skiff_containers gauge$/gm)?.length, 1);
    assert.equal(labelsOf(text, "process_resident_memory_bytes").length, 2);
    const self = parseExposition(text).find((f) => f.name === "skiff_monitor_shims")!;
    assert.deepEqual(self.samples.map((s) => `${s.labels[0]![1]}=${s.value}`), [
      "ok=2",
      "gone=1",
      "error=2",
    ]);
    assert.equal(
      parseExposition(text).find((f) => f.name === "skiff_monitor_shim_scrape_errors_total")!
        .samples[0]!.value,
      "2",
    );

    // A shim that exits drops out of the next scrape.
    await b.close();
    const again = await guard(monitor.scrape(), "second scrape");
    assert.deepEqual(
      again.shims.filter((s) => s.status === "ok").map((s) => s.shim!.id),
      ["web"],
    );
    assert.deepEqual(labelsOf(again.text, "skiff_shim_info").map((l) => l.id), ["web"]);

    const only = new NodeMonitor({
      socketDirs: [dir],
      timeoutMs: 5_000,
      filter: (s) => s.namespace === "n2",
    });
    assert.deepEqual(
      (await guard(only.scrape(), "filtered scrape")).shims
        .filter((s) => s.status === "ok"),
      [],
    );
  } finally {
    await a.close();
    await b.close();
    await hung.close();
    await other.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("node create totals keep what exited shims counted, once, across scrapes", async () => {
  const dir = await Deno.makeTempDir({ prefix: "skiff-mon-" });
  const a = await endpoint(dir, "a", { ns: "n", id: "a", rt: "io.containerd.skiff-runc.v2" });
  const b = await endpoint(dir, "b", { ns: "n", id: "b", rt: "io.containerd.skiff-runsc.v2" });
  try {
    const monitor = new NodeMonitor({ socketDirs: [dir], timeoutMs: 5_000 });
    const totals = async () =>
      (parseExposition((await monitor.scrape()).text)
        .find((f) => f.name === "skiff_node_task_create_requests_total")?.samples ?? [])
        .map((x) => `${x.labels[0]![1]} ${x.labels[1]![1]} ${x.value}`);
    // endpoint() counted one successful create in each shim before any scrape.
    assert.deepEqual(await totals(), [
      "io.containerd.skiff-runc.v2 ok 1",
      "io.containerd.skiff-runsc.v2 ok 1",
    ]);
    // Scraping again adds nothing; new outcomes are added once.
    a.metrics.taskCreated("error");
    a.metrics.taskCreated("ok");
    assert.deepEqual(await totals(), [
      "io.containerd.skiff-runc.v2 ok 2",
      "io.containerd.skiff-runsc.v2 ok 1",
      "io.containerd.skiff-runc.v2 error 1",
    ]);
    // The runsc shim exits; its create stays in the node total.
    await b.close();
    b.metrics.taskCreated("error");
    assert.deepEqual(await totals(), [
      "io.containerd.skiff-runc.v2 ok 2",
      "io.containerd.skiff-runsc.v2 ok 1",
      "io.containerd.skiff-runc.v2 error 1",
    ]);
  } finally {
    await a.close();
    await b.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("serveMonitor() serves /metrics, /shims and /healthz on loopback; 404 and 405 otherwise", async () => {
  const dir = await Deno.makeTempDir({ prefix: "skiff-mon-" });
  const a = await endpoint(
    dir,
    "s1",
    { ns: "n1", id: "c1", rt: "io.containerd.skiff-runc.v2" },
    "spare",
  );
  const m = await serveMonitor({ hostname: "127.0.0.1", port: 0, socketDirs: [dir] });
  try {
    assert.match(m.url, /^http:\/\/127\.0\.0\.1:\d+$/);
    const metrics = await fetch(`${m.url}/metrics`);
    assert.equal(metrics.status, 200);
    assert.equal(metrics.headers.get("content-type"), "text/plain; version=0.0.4; charset=utf-8");
    assert.deepEqual(labelsOf(await metrics.text(), "skiff_shim_info"), [
      {
        namespace: "n1",
        id: "c1",
        runtime: "io.containerd.skiff-runc.v2",
        version: "0.0.1",
        code: "unknown",
      },
    ]);
    const shims = await (await fetch(`${m.url}/shims`)).json();
    assert.deepEqual(shims, [{
      socket: `${dir}/s1.ops`,
      status: "ok",
      shim: { namespace: "n1", id: "c1", runtime: "io.containerd.skiff-runc.v2" },
      origin: "spare",
    }]);
    assert.equal(await (await fetch(`${m.url}/healthz`)).text(), "ok\n");
    const post = await fetch(`${m.url}/metrics`, { method: "POST", body: "x" });
    assert.equal(post.status, 405);
    assert.equal(post.headers.get("allow"), "GET, HEAD");
    await post.body?.cancel();
    const nf = await fetch(`${m.url}/debug/state`);
    assert.equal(nf.status, 404);
    assert.match(await nf.text(), /the paths are \/metrics, \/shims, \/healthz/);
  } finally {
    await m.close();
    await a.close();
    await Deno.remove(dir, { recursive: true });
  }
  await assert.rejects(
    serveMonitor({ hostname: "0.0.0.0", port: 0 }),
    /refusing to listen on "0\.0\.0\.0": it is not a loopback address/,
  );
  assert.ok(isLoopback("[::1]") && isLoopback("127.3.2.1") && isLoopback("localhost"));
  assert.ok(!isLoopback("10.0.0.1") && !isLoopback("128.0.0.1"));
});

Deno.test("parseMonitorArgs() reads listen, socket dirs, timeout and namespaces; rejects junk", () => {
  const o = parseMonitorArgs([
    "--listen",
    "[::1]:9000",
    "--socket-dir",
    "/a",
    "--socket-dir",
    "/b",
    "--timeout",
    "500",
    "--namespace",
    "k8s.io",
  ]);
  assert.equal(o.hostname, "[::1]");
  assert.equal(o.port, 9000);
  assert.deepEqual(o.socketDirs, ["/a", "/b"]);
  assert.equal(o.timeoutMs, 500);
  assert.equal(o.filter!({ namespace: "k8s.io", id: "x", runtime: "r" }), true);
  assert.equal(o.filter!({ namespace: "default", id: "x", runtime: "r" }), false);
  const d = parseMonitorArgs([]);
  assert.deepEqual([d.hostname, d.port, d.socketDirs, d.timeoutMs, d.filter], [
    "127.0.0.1",
    9464,
    ["/run/containerd/s"],
    2000,
    undefined,
  ]);
  assert.throws(() => parseMonitorArgs(["--listen", "9464"]), /invalid --listen "9464"/);
  assert.throws(() => parseMonitorArgs(["--timeout", "soon"]), /invalid --timeout "soon"/);
  assert.throws(() => parseMonitorArgs(["--bogus"]), /Unknown option '--bogus'/);
});

Deno.test("NodeMonitor orders shims by namespace, id and runtime, whatever their sockets and the failed ones", async () => {
  // Socket names run against the identities, with gone sockets among them:
  // comparing answered shims by identity and the rest by socket in one sort is no order, and
  // gave s1 before r1 (the containerd monitor test's flake).
  const dir = await Deno.makeTempDir({ prefix: "skiff-mon-" });
  const rt = "io.containerd.skiff-runc.v2";
  const s1 = await endpoint(dir, "a", { ns: "n", id: "s1", rt });
  await staleSocket(`${dir}/b.ops`);
  const r1 = await endpoint(dir, "c", { ns: "n", id: "r1", rt });
  await staleSocket(`${dir}/d.ops`);
  const q1 = await endpoint(dir, "e", { ns: "m", id: "q1", rt: "io.containerd.skiff-runsc.v2" });
  // Upper case sorts before lower case in code-unit order, after it in most locales.
  const big = await endpoint(dir, "f", { ns: "n", id: "R2", rt });
  try {
    const monitor = new NodeMonitor({ socketDirs: [dir], timeoutMs: 10_000 });
    for (let i = 0; i < 3; i++) {
      const { shims, text } = await guard(monitor.scrape(), "scrape");
      assert.deepEqual(
        shims.map((s) => [s.socket.slice(dir.length + 1), s.status, s.shim?.id]),
        [
          ["e.ops", "ok", "q1"],
          ["f.ops", "ok", "R2"],
          ["c.ops", "ok", "r1"],
          ["a.ops", "ok", "s1"],
          ["b.ops", "gone", undefined],
          ["d.ops", "gone", undefined],
        ],
      );
      assert.deepEqual(labelsOf(text, "skiff_shim_info").map((l) => `${l.namespace}/${l.id}`), [
        "m/q1",
        "n/R2",
        "n/r1",
        "n/s1",
      ]);
    }
  } finally {
    for (const e of [s1, r1, q1, big]) await e.close();
    await Deno.remove(dir, { recursive: true });
  }
});
