import assert from "node:assert/strict";
import { Code } from "@connectrpc/connect";
import { MetricsRegistry, parseExposition, renderExposition } from "../../../sdk/ops/metrics.ts";
import { mergeFamilies } from "../../../sdk/ops/monitor.ts";
import { grpcCodeName } from "../../../sdk/ops/rpc.ts";
import { liveProcesses, ShimMetrics } from "../../../sdk/ops/shim_metrics.ts";
import { opsSettings } from "../../../sdk/ops/extension.ts";
import { opsSocketPath } from "../../../sdk/shim/contract/socket_address.ts";
import {
  countServerStart,
  readSpareStatsSync,
  spareStatsPath,
} from "../../../sdk/shim/spare/mod.ts";
import type { OpsContainerView, OpsProcessView } from "../../../sdk/ops/hooks.ts";

Deno.test("MetricsRegistry.render() writes HELP, TYPE and samples in registration order", () => {
  const r = new MetricsRegistry();
  const c = r.counter({ name: "jobs_total", help: "Jobs run.", labelNames: ["result"] });
  const g = r.gauge({ name: "queue_depth", help: "Items waiting." });
  c.inc({ result: "ok" });
  c.inc({ result: "ok" }, 2);
  c.inc({ result: "error" });
  g.set(undefined, 7);
  assert.equal(
    r.render(),
    [
      "# HELP jobs_total Jobs run.",
      "# TYPE jobs_total counter",
      'jobs_total{result="ok"} 3',
      'jobs_total{result="error"} 1',
      "# HELP queue_depth Items waiting.",
      "# TYPE queue_depth gauge",
      "queue_depth 7",
      "",
    ].join("\n"),
  );
});

Deno.test("Histogram renders cumulative buckets, +Inf, _sum and _count", () => {
  const r = new MetricsRegistry();
  const h = r.histogram({
    name: "op_duration_seconds",
    help: "Op time.",
    labelNames: ["op"],
    buckets: [0.1, 1],
  });
  for (const v of [0.05, 0.1, 0.5, 3]) h.observe({ op: "a" }, v);
  assert.equal(h.count({ op: "a" }), 4);
  assert.equal(
    r.render(),
    [
      "# HELP op_duration_seconds Op time.",
      "# TYPE op_duration_seconds histogram",
      'op_duration_seconds_bucket{op="a",le="0.1"} 2',
      'op_duration_seconds_bucket{op="a",le="1"} 3',
      'op_duration_seconds_bucket{op="a",le="+Inf"} 4',
      'op_duration_seconds_sum{op="a"} 3.65',
      'op_duration_seconds_count{op="a"} 4',
      "",
    ].join("\n"),
  );
});

Deno.test("label values and HELP text are escaped, and parse back unchanged", () => {
  const r = new MetricsRegistry();
  r.counter({ name: "odd_total", help: "Back\\slash and\nnewline.", labelNames: ["v"] })
    .inc({ v: 'quote " back \\ nl \n end' });
  const text = r.render();
  assert.ok(text.includes('odd_total{v="quote \\" back \\\\ nl \\n end"} 1\n'), text);
  assert.ok(text.includes("# HELP odd_total Back\\\\slash and\\nnewline.\n"), text);
  const [f] = parseExposition(text);
  assert.equal(f!.help, "Back\\slash and\nnewline.");
  assert.deepEqual(f!.samples[0]!.labels, [["v", 'quote " back \\ nl \n end']]);
  assert.equal(renderExposition(parseExposition(text)), text);
});

Deno.test("metrics reject bad names, unknown or missing labels and negative increments", () => {
  const r = new MetricsRegistry();
  assert.throws(() => r.counter({ name: "bad-name", help: "x" }), /invalid metric name "bad-name"/);
  assert.throws(
    () => r.gauge({ name: "g", help: "x", labelNames: ["__reserved"] }),
    /invalid label name "__reserved"/,
  );
  assert.throws(
    () => r.histogram({ name: "h", help: "x", labelNames: ["le"] }),
    /cannot have a label named "le"/,
  );
  assert.throws(
    () => r.histogram({ name: "h2", help: "x", buckets: [1, 1] }),
    /buckets must be finite and increasing/,
  );
  const c = r.counter({ name: "c_total", help: "x", labelNames: ["a"] });
  assert.throws(() => c.inc({}), /needs label "a"/);
  assert.throws(() => c.inc({ a: "1", b: "2" }), /has no label "b"/);
  assert.throws(() => c.inc({ a: "1" }, -1), /cannot change by -1/);
  assert.throws(() => r.counter({ name: "c_total", help: "x" }), /already registered/);
  assert.throws(
    () => r.gauge({ name: "rg", help: "x", labelNames: ["a"], read: () => 1 }),
    /unlabelled metrics only/,
  );
});

Deno.test("parseExposition() attaches histogram samples to their family and rejects junk", () => {
  const fams = parseExposition(
    [
      "# HELP d_seconds D.",
      "# TYPE d_seconds histogram",
      'd_seconds_bucket{le="+Inf"} 2',
      "d_seconds_sum 0.5",
      "d_seconds_count 2",
      "# a free comment",
      "loose_metric 1 1700000000000",
      "",
    ].join("\n"),
  );
  assert.deepEqual(fams.map((f) => [f.name, f.type, f.samples.length]), [
    ["d_seconds", "histogram", 3],
    ["loose_metric", "untyped", 1],
  ]);
  assert.equal(fams[1]!.samples[0]!.timestamp, "1700000000000");
  assert.throws(() => parseExposition('x{a="1} 1\n'), /unterminated label value/);
  assert.throws(() => parseExposition("x one\n"), /invalid sample value/);
  assert.throws(() => parseExposition("# TYPE x kind\n"), /unknown metric type "kind"/);
  assert.throws(() => parseExposition("{} 1\n"), /invalid exposition line/);
});

Deno.test("mergeFamilies() keeps one HELP/TYPE per name and drops a conflicting type", () => {
  const a = parseExposition('# HELP up Up.\n# TYPE up gauge\nup{s="a"} 1\n');
  const b = parseExposition('# HELP up Other.\n# TYPE up gauge\nup{s="b"} 0\n');
  const c = parseExposition('# TYPE up counter\nup{s="c"} 5\n');
  assert.equal(
    renderExposition(mergeFamilies([a, b, c])),
    '# HELP up Up.\n# TYPE up gauge\nup{s="a"} 1\nup{s="b"} 0\n',
  );
});

Deno.test("grpcCodeName() spells codes as Go's codes.Code does", () => {
  assert.equal(grpcCodeName(0), "OK");
  assert.equal(grpcCodeName(Code.FailedPrecondition), "FailedPrecondition");
  assert.equal(grpcCodeName(Code.Unauthenticated), "Unauthenticated");
  assert.equal(grpcCodeName(99 as Code), "Code(99)");
});

function proc(execId: string, pid: number, state: string): OpsProcessView {
  return {
    execId,
    pid,
    state,
    exit: state === "stopped" ? { status: 0, exitedAt: new Date(0) } : undefined,
    stdio: { stdin: "", stdout: "", stderr: "", terminal: false },
  };
}

Deno.test("ShimMetrics reads containers, live processes and event counters at scrape time", () => {
  const containers = new Map<string, OpsContainerView>();
  const events = { published: 0, failed: 0, queued: 0 };
  const m = new ShimMetrics(
    {
      runtime: "io.containerd.skiff-runc.v2",
      namespace: "ns",
      id: "c1",
      version: "9.9.9",
      code: "c0de",
    },
    { containers: () => containers.values(), events: () => events },
  );
  const value = (name: string) =>
    parseExposition(m.render()).find((f) => f.name === name)!.samples[0]!.value;
  assert.equal(value("skiff_containers"), "0");
  containers.set("c1", {
    id: "c1",
    namespace: "ns",
    bundle: "/b",
    options: {},
    rootfsMounted: false,
    init: proc("", 10, "running"),
    // A created exec has no pid yet and a stopped one is gone: neither is live.
    execs: new Map([
      ["e1", proc("e1", 11, "running")],
      ["e2", proc("e2", 0, "created")],
      ["e3", proc("e3", 12, "stopped")],
    ]),
  });
  events.published = 4;
  events.failed = 1;
  events.queued = 2;
  assert.equal(liveProcesses(containers.values()), 2);
  assert.equal(value("skiff_containers"), "1");
  assert.equal(value("skiff_processes"), "2");
  assert.equal(value("skiff_events_published_total"), "4");
  assert.equal(value("skiff_events_failed_total"), "1");
  assert.equal(value("skiff_events_queued"), "2");
  assert.ok(Number(value("process_resident_memory_bytes")) > 0);
  // PSS and USS from smaps_rollup: positive, and never above RSS.
  const rss = Number(value("process_resident_memory_bytes"));
  for (
    const name of ["skiff_process_proportional_memory_bytes", "skiff_process_unique_memory_bytes"]
  ) {
    assert.ok(
      Number(value(name)) > 0 && Number(value(name)) <= rss * 1.5,
      `${name}=${value(name)}`,
    );
  }
  assert.equal(
    parseExposition(m.render()).find((f) => f.name === "skiff_shim_info")!.samples[0]!.labels
      .map(([k, v]) => `${k}=${v}`).join(","),
    "runtime=io.containerd.skiff-runc.v2,namespace=ns,id=c1,version=9.9.9,code=c0de",
  );
});

Deno.test("ShimMetrics counts create outcomes from the interceptor's observations", () => {
  const m = new ShimMetrics({ runtime: "rt", namespace: "ns", id: "x", version: "1" });
  const seen = (service: string, method: string, code: string) =>
    m.observeRpc({ service, method, code, seconds: 0.001 });
  seen("containerd.task.v2.Task", "Create", "OK");
  seen("containerd.task.v3.Task", "Create", "AlreadyExists");
  seen("containerd.task.v3.Task", "State", "NotFound"); // not a create
  seen("containerd.runtime.sandbox.v1.Sandbox", "CreateSandbox", "Internal");
  const text = m.render();
  assert.ok(text.includes('skiff_task_create_requests_total{runtime="rt",result="ok"} 1\n'), text);
  assert.ok(text.includes('skiff_task_create_requests_total{runtime="rt",result="error"} 1\n'));
  assert.ok(text.includes('skiff_sandbox_create_requests_total{runtime="rt",result="error"} 1\n'));
  assert.ok(text.includes('skiff_sandbox_create_requests_total{runtime="rt",result="ok"} 0\n'));
});

Deno.test("ShimMetrics starts both create results at 0 and counts each outcome", () => {
  const m = new ShimMetrics({ runtime: "rt", namespace: "ns", id: "x", version: "1" });
  const creates = () =>
    parseExposition(m.render()).find((f) => f.name === "skiff_task_create_requests_total")!
      .samples.map((s) => `${s.labels[1]![1]}=${s.value}`);
  assert.deepEqual(creates(), ["ok=0", "error=0"]);
  m.taskCreated("ok");
  m.taskCreated("error");
  m.taskCreated("error");
  m.sandboxCreated("ok");
  assert.deepEqual(creates(), ["ok=1", "error=2"]);
  assert.ok(
    m.render().includes('skiff_sandbox_create_requests_total{runtime="rt",result="ok"} 1\n'),
  );
});

Deno.test("ShimMetrics shows the server's origin, and start counters only when a source has them", () => {
  const m = new ShimMetrics({ runtime: "rt", namespace: "ns", id: "x", version: "1" });
  const names = () => parseExposition(m.render()).map((f) => f.name);
  assert.ok(!names().includes("skiff_shim_origin"));
  const starts = { adopted: 0, cold: 1 };
  m.setSource({
    containers: () => [],
    events: () => ({ published: 0, failed: 0, queued: 0 }),
    origin: () => "spare",
    starts: () => starts,
  });
  starts.adopted = 7;
  const text = m.render();
  assert.ok(text.includes('skiff_shim_origin{origin="spare"} 1\n'), text);
  assert.ok(
    text.includes("# TYPE skiff_spares_adopted_total counter\nskiff_spares_adopted_total 7\n"),
  );
  assert.ok(text.includes("# TYPE skiff_cold_starts_total counter\nskiff_cold_starts_total 1\n"));
  // A second source registers nothing twice; without starts the counters read 0, not stale.
  m.setSource({ containers: () => [], events: () => ({ published: 0, failed: 0, queued: 0 }) });
  assert.equal(parseExposition(m.render()).filter((f) => f.name === "skiff_shim_origin").length, 1);
  assert.ok(m.render().includes("skiff_spares_adopted_total 0\n"));

  const off = new ShimMetrics({ runtime: "rt", namespace: "ns", id: "y", version: "1" }, {
    containers: () => [],
    events: () => ({ published: 0, failed: 0, queued: 0 }),
    origin: () => "cold",
  });
  assert.ok(off.render().includes('skiff_shim_origin{origin="cold"} 1\n'));
  assert.ok(!off.render().includes("skiff_cold_starts_total"));
});

Deno.test("start counters: one file per launcher and containerd, parallel counts all kept", async () => {
  const dir = await Deno.makeTempDir({ prefix: "skiff-stats-" });
  try {
    const launcher = `${dir}/containerd-shim-x-v2`;
    await Deno.writeTextFile(launcher, "#!/bin/sh\n");
    const env = new Map([["SKIFF_SHIM_LAUNCHER", launcher], ["SKIFF_SHIM_BUNDLE", "/b.js"]]);
    const a = spareStatsPath("/run/a.sock", `${dir}/s/abc`, env)!;
    const b = spareStatsPath("/run/b.sock", `${dir}/s/def`, env)!;
    assert.match(a, new RegExp(`^${dir}/s/skiff-[0-9a-f]{12}/stats-[0-9a-f]{16}\\.json$`));
    assert.notEqual(a.slice(0, a.lastIndexOf("/")), b.slice(0, b.lastIndexOf("/")));
    // Same containerd, other shim socket in the same directory: the same file.
    assert.equal(spareStatsPath("/run/a.sock", `${dir}/s/zzz`, env), a);
    // Spares off: nothing is counted.
    assert.equal(
      spareStatsPath("/run/a.sock", `${dir}/s/abc`, new Map([...env, ["SKIFF_SPARE", "0"]])),
      undefined,
    );
    assert.deepEqual(readSpareStatsSync(a), { adopted: 0, cold: 0 });
    await Promise.all([
      ...Array.from({ length: 6 }, () => countServerStart(a, "spare")),
      ...Array.from({ length: 4 }, () => countServerStart(a, "cold")),
    ]);
    assert.deepEqual(readSpareStatsSync(a), { adopted: 6, cold: 4 });
    assert.equal((await Deno.stat(a)).mode! & 0o777, 0o600);
    assert.equal((await Deno.stat(a.slice(0, a.lastIndexOf("/")))).mode! & 0o777, 0o700);
    assert.deepEqual(readSpareStatsSync(b), { adopted: 0, cold: 0 });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("opsSettings(): -debug or SKIFF_OPS=1 enable the endpoint, SKIFF_OPS=0 vetoes", () => {
  assert.deepEqual(opsSettings(false, undefined), { endpoint: false, rpcLog: false });
  assert.deepEqual(opsSettings(true, undefined), { endpoint: true, rpcLog: true });
  assert.deepEqual(opsSettings(false, "1"), { endpoint: true, rpcLog: false });
  assert.deepEqual(opsSettings(true, "0"), { endpoint: false, rpcLog: true });
  assert.equal(opsSocketPath("/run/containerd/s/abc"), "/run/containerd/s/abc.ops");
  assert.equal(opsSocketPath("unix:///run/containerd/s/abc"), "/run/containerd/s/abc.ops");
});
