/**
 * Operations metrics of the skiff shims under real containerd (1.6 and 2.4), driven by ctr:
 * every counter, gauge and histogram is scraped from the shim's `.ops` socket between steps
 * and must have moved exactly as the step dictates, including the node-wide start counters
 * (cold starts, spares adopted) and each server's origin. Then the node monitor aggregates a skiff
 * runc shim and a skiff runsc shim into one scrape.
 */
import assert from "node:assert/strict";
import { exists, integrationTest } from "../_integration.ts";
import {
  containerdVersions,
  type PrivateContainerd,
  startContainerd,
} from "../../sdk/testing/containerd.ts";
import { ctrRun } from "../../sdk/testing/ctr.ts";
import { installExampleShims } from "../../sdk/install/examples.ts";
import { type MetricFamily, parseExposition } from "../../sdk/ops/metrics.ts";
import { opsSocketPath } from "../../sdk/shim/contract/socket_address.ts";
import { serveMonitor } from "../../sdk/ops/monitor.ts";
import { unixGet } from "../../sdk/ops/unix_http.ts";

const RUNC = "io.containerd.skiff-runc.v2";
const RUNSC = "io.containerd.skiff-runsc.v2";
const NEEDS = { root: true, binaries: ["runc", "busybox", "mount", "umount", "sh"] };

function uid(tag: string): string {
  return `${tag}-${crypto.randomUUID().slice(0, 8)}`;
}

/** Polls `probe` until it returns true; fails after a generous bound (not a timing assertion). */
async function eventually(probe: () => Promise<boolean>, what: string): Promise<void> {
  const until = Date.now() + 60_000;
  while (!(await probe())) {
    if (Date.now() > until) throw new Error(`${what}: still not so after 60s`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The shim's operations socket, from the address file `start` left in the bundle. */
async function opsOf(c: PrivateContainerd, ns: string, id: string): Promise<string> {
  const address = await Deno.readTextFile(
    `${c.state}/io.containerd.runtime.v2.task/${ns}/${id}/address`,
  );
  const ops = opsSocketPath(address.trim());
  // The endpoint starts right after the shim's ttrpc socket serves (what `start` waits for).
  await eventually(() => exists(ops), `${ops} appears`);
  return ops;
}

async function scrape(ops: string): Promise<MetricFamily[]> {
  const r = await unixGet(ops, "/metrics", { timeoutMs: 10_000 });
  assert.equal(r.status, 200, r.body);
  return parseExposition(r.body);
}

/** Sum of the samples named `name` whose labels include `want` (and, if given, pass `keep`). */
function sum(
  fams: MetricFamily[],
  name: string,
  want: Record<string, string> = {},
  keep: (labels: Record<string, string>) => boolean = () => true,
): number {
  let total = 0;
  for (const f of fams) {
    for (const s of f.samples) {
      if (s.name !== name) continue;
      const l = Object.fromEntries(s.labels);
      if (Object.entries(want).every(([k, v]) => l[k] === v) && keep(l)) total += Number(s.value);
    }
  }
  return total;
}

/** Calls by method and code, whichever Task service name (v2 or v3) containerd used. */
function calls(fams: MetricFamily[], method: string, code = "OK"): number {
  return sum(fams, "skiff_ttrpc_requests_total", { method, code });
}

function assertHistogramConsistent(fams: MetricFamily[], method: string): void {
  const f = fams.find((f) => f.name === "skiff_ttrpc_request_duration_seconds")!;
  for (const service of ["containerd.task.v2.Task", "containerd.task.v3.Task"]) {
    const buckets = f.samples.filter((s) =>
      s.name.endsWith("_bucket") &&
      s.labels.some(([k, v]) => k === "method" && v === method) &&
      s.labels.some(([k, v]) => k === "service" && v === service)
    ).map((s) => Number(s.value));
    for (let i = 1; i < buckets.length; i++) {
      assert.ok(buckets[i]! >= buckets[i - 1]!, `${method} buckets must be cumulative`);
    }
    if (buckets.length > 0) {
      assert.equal(
        buckets.at(-1),
        sum(fams, "skiff_ttrpc_request_duration_seconds_count", { service, method }),
      );
    }
  }
  // Every call is timed once: histogram count == requests over all codes.
  assert.equal(
    sum(fams, "skiff_ttrpc_request_duration_seconds_count", { method }),
    sum(fams, "skiff_ttrpc_requests_total", { method }),
  );
}

async function debugJson(ops: string, path: string): Promise<unknown> {
  const r = await unixGet(ops, path, { timeoutMs: 10_000 });
  assert.equal(r.status, 200, r.body);
  return JSON.parse(r.body);
}

for (const want of ["1.6", "2.4"]) {
  const v = containerdVersions().find((x) => x.version.startsWith(`${want}.`));
  integrationTest(
    `ops metrics follow ctr run, ctr task exec and a failed create on containerd ${
      v?.version ?? want
    }`,
    { ...NEEDS, check: () => v ? undefined : `containerd ${want}.x (tests/setup/prepare.sh)` },
    async () => {
      const prefix = await Deno.makeTempDir({ prefix: "skiff-ops-ctrd-" });
      let c: PrivateContainerd | undefined;
      let ops = "";
      let ops3 = "";
      try {
        await installExampleShims({
          prefix,
          shims: { "containerd-shim-skiff-runc-v2": "examples/runc/main.ts" },
          // Step 6 counts warm spares, which only bundle launchers use.
          mode: "bundle",
        });
        c = await startContainerd({
          binDir: v!.binDir,
          extraPath: [`${prefix}/bin`],
          env: { SKIFF_OPS: "1", SKIFF_SPARE: "1" },
        });
        const ns = uid("ops");
        const ctr = (args: string[]) => c!.ctr(args, { namespace: ns });
        const image = await c.importBusyboxImage(ns);
        // One shim group, so the shim outlives the failed create and can be scraped after it.
        const group = ["--annotation", `io.containerd.runc.v2.group=${uid("grp")}`];

        // 1. ctr run -d: one Create, one Start, one live process.
        const run = await ctrRun(c, {
          image,
          id: "c1",
          namespace: ns,
          runtime: RUNC,
          detach: true,
          flags: group,
          args: ["sleep", "600"],
        });
        assert.equal(run.code, 0, run.stderr);
        ops = await opsOf(c, ns, "c1");
        const st = await Deno.lstat(ops);
        assert.ok(st.isSocket);
        assert.equal(st.mode! & 0o777, 0o600);
        let m = await scrape(ops);
        assert.equal(
          sum(m, "skiff_task_create_requests_total", { runtime: RUNC, result: "ok" }),
          1,
        );
        assert.equal(sum(m, "skiff_task_create_requests_total", { result: "error" }), 0);
        assert.equal(calls(m, "Create"), 1);
        assert.equal(calls(m, "Start"), 1);
        assert.equal(sum(m, "skiff_containers"), 1);
        assert.equal(sum(m, "skiff_processes"), 1);
        assertHistogramConsistent(m, "Create");
        assert.ok(sum(m, "process_resident_memory_bytes") > 0);

        // 2. ctr task exec (waits): Exec, a second Start, the exec's Delete.
        const exec = await ctr([
          "task",
          "exec",
          "--fifo-dir",
          c.fifoDir,
          "--exec-id",
          "e1",
          "c1",
          "sh",
          "-c",
          "exit 3",
        ]);
        assert.equal(exec.code, 3, exec.stderr);
        m = await scrape(ops);
        assert.equal(calls(m, "Exec"), 1);
        assert.equal(calls(m, "Start"), 2);
        assert.equal(calls(m, "Delete"), 1);
        assert.equal(sum(m, "skiff_processes"), 1);
        assertHistogramConsistent(m, "Start");

        // 3. ctr task exec -d: a second live process until it is killed.
        const detached = await ctr([
          "task",
          "exec",
          "-d",
          "--fifo-dir",
          c.fifoDir,
          "--exec-id",
          "e2",
          "c1",
          "sleep",
          "600",
        ]);
        assert.equal(detached.code, 0, detached.stderr);
        m = await scrape(ops);
        assert.equal(calls(m, "Exec"), 2);
        assert.equal(calls(m, "Start"), 3);
        assert.equal(sum(m, "skiff_processes"), 2);
        const state = await debugJson(ops, "/debug/state") as {
          containers: {
            id: string;
            init: { pid: number; state: string };
            execs: { execId: string; pid: number; state: string }[];
          }[];
          endpoint: { address: string; ops: string };
        };
        assert.deepEqual(state.containers.map((x) => x.id), ["c1"]);
        assert.equal(state.containers[0]!.init.state, "running");
        assert.deepEqual(
          state.containers[0]!.execs.map((e) => [e.execId, e.state, e.pid > 0]),
          [["e2", "running", true]],
        );
        assert.equal(opsSocketPath(state.endpoint.address), ops);
        const kill = await ctr(["task", "kill", "--exec-id", "e2", "--signal", "SIGKILL", "c1"]);
        assert.equal(kill.code, 0, kill.stderr);
        await eventually(async () => sum(await scrape(ops), "skiff_processes") === 1, "e2 exits");

        // 4. A create runc refuses (bind mount of a missing source) in the same shim.
        const bad = await ctrRun(c, {
          image,
          id: "c2",
          namespace: ns,
          runtime: RUNC,
          detach: true,
          flags: [
            ...group,
            "--mount",
            `type=bind,src=/nonexistent-${uid("skiff-ops")},dst=/mnt,options=rbind:ro`,
          ],
          args: ["true"],
        });
        assert.notEqual(bad.code, 0, "a create with a missing bind source must fail");
        // containerd removed c2's bundle; the group sent its Create to c1's shim, scraped here.
        m = await scrape(ops);
        assert.equal(
          sum(m, "skiff_task_create_requests_total", { runtime: RUNC, result: "ok" }),
          1,
        );
        assert.equal(
          sum(m, "skiff_task_create_requests_total", { runtime: RUNC, result: "error" }),
          1,
        );
        assert.equal(calls(m, "Create"), 1);
        assert.equal(
          sum(m, "skiff_ttrpc_requests_total", { method: "Create" }, (l) => l.code !== "OK"),
          1,
        );
        assertHistogramConsistent(m, "Create");
        assert.equal(sum(m, "skiff_containers"), 1);

        // 5. The events, in order; all of them reach containerd.
        const events = await debugJson(ops, "/debug/events") as {
          topic: string;
          event: { containerId?: string; id?: string };
        }[];
        assert.deepEqual(
          events.map((e) =>
            `${e.topic} ${e.event.containerId}${e.event.id ? `/${e.event.id}` : ""}`
          ),
          [
            "/tasks/create c1",
            "/tasks/start c1",
            "/tasks/exec-added c1",
            "/tasks/exec-started c1",
            "/tasks/exit c1/e1",
            "/tasks/exec-added c1",
            "/tasks/exec-started c1",
            "/tasks/exit c1/e2",
          ],
        );
        await eventually(async () => {
          const f = await scrape(ops);
          return sum(f, "skiff_events_published_total") === events.length &&
            sum(f, "skiff_events_queued") === 0;
        }, "events forwarded");
        assert.equal(sum(await scrape(ops), "skiff_events_failed_total"), 0);

        // 6. A container outside the group gets a shim of its own: the warm spare that c1's
        // start spawned takes it. Both shims read the same node-wide start counters.
        const c3 = await ctrRun(c, {
          image,
          id: "c3",
          namespace: ns,
          runtime: RUNC,
          detach: true,
          args: ["sleep", "600"],
        });
        assert.equal(c3.code, 0, c3.stderr);
        ops3 = await opsOf(c, ns, "c3");
        assert.notEqual(ops3, ops);
        for (const [socket, origin] of [[ops, "cold"], [ops3, "spare"]] as const) {
          m = await scrape(socket);
          assert.equal(sum(m, "skiff_shim_origin", { origin }), 1, `${socket}: ${origin}`);
          assert.equal(sum(m, "skiff_cold_starts_total"), 1);
          assert.equal(sum(m, "skiff_spares_adopted_total"), 1);
        }
        const pid3 = Number(
          await Deno.readTextFile(`${c.state}/io.containerd.runtime.v2.task/${ns}/c3/shim.pid`),
        );
        assert.equal((await debugJson(ops3, "/debug/state") as { pid: number }).pid, pid3);
        assert.equal((await ctr(["task", "kill", "--signal", "SIGKILL", "c3"])).code, 0);
        await eventually(async () => (await ctr(["task", "delete", "c3"])).code === 0, "c3 goes");

        // 7. The last container goes: containerd shuts the shim down and the socket goes too.
        assert.equal((await ctr(["task", "kill", "--signal", "SIGKILL", "c1"])).code, 0);
        await eventually(async () => {
          const s = await debugJson(ops, "/debug/state") as {
            containers: { init: { state: string } }[];
          };
          return s.containers[0]?.init.state === "stopped";
        }, "c1 stops");
        const del = await ctr(["task", "delete", "c1"]);
        assert.equal(del.code, 0, del.stderr);
        await eventually(async () => !(await exists(ops)), "ops socket removed at shutdown");
      } finally {
        await c?.stop();
        // Only a shim killed by stop() (after a failure above) leaves its socket behind.
        for (const s of [ops, ops3]) if (s) await Deno.remove(s).catch(() => {});
        await Deno.remove(prefix, { recursive: true }).catch(() => {});
      }
    },
  );
}

const latest = containerdVersions().find((x) => x.version.startsWith("2.4."));
integrationTest(
  `node monitor aggregates a skiff runc and a skiff runsc shim on containerd ${
    latest?.version ?? "2.4"
  }`,
  {
    ...NEEDS,
    binaries: [...NEEDS.binaries, "runsc"],
    check: () => latest ? undefined : "containerd 2.4.x (tests/setup/prepare.sh)",
  },
  async () => {
    const prefix = await Deno.makeTempDir({ prefix: "skiff-ops-mon-" });
    let c: PrivateContainerd | undefined;
    const sockets: string[] = [];
    try {
      await installExampleShims({ prefix });
      c = await startContainerd({
        binDir: latest!.binDir,
        extraPath: [`${prefix}/bin`],
        env: { SKIFF_OPS: "1" },
      });
      const ns = uid("mon");
      const image = await c.importBusyboxImage(ns);
      const r = await ctrRun(c, {
        image,
        id: "r1",
        namespace: ns,
        runtime: RUNC,
        detach: true,
        args: ["sleep", "600"],
      });
      assert.equal(r.code, 0, r.stderr);
      // runsc manages its own cgroups inside the sandbox; no parent cgroup is given.
      const s = await ctrRun(c, {
        image,
        id: "s1",
        namespace: ns,
        runtime: RUNSC,
        detach: true,
        cgroup: "",
        args: ["sleep", "600"],
      });
      assert.equal(s.code, 0, s.stderr);
      sockets.push(await opsOf(c, ns, "r1"), await opsOf(c, ns, "s1"));

      // Other shims on this node (other tests, other namespaces) are filtered out.
      const m = await serveMonitor({ port: 0, filter: (x) => x.namespace === ns });
      try {
        const res = await fetch(`${m.url}/metrics`);
        assert.equal(res.status, 200);
        const fams = parseExposition(await res.text());
        const info = fams.find((f) => f.name === "skiff_shim_info")!.samples
          .map((x) => Object.fromEntries(x.labels));
        assert.deepEqual(info.map((l) => [l.namespace, l.id, l.runtime]), [
          [ns, "r1", RUNC],
          [ns, "s1", RUNSC],
        ]);
        for (const [id, runtime] of [["r1", RUNC], ["s1", RUNSC]]) {
          assert.equal(
            sum(fams, "skiff_task_create_requests_total", {
              namespace: ns,
              id,
              runtime,
              result: "ok",
            }),
            1,
          );
          assert.equal(sum(fams, "skiff_containers", { id, runtime }), 1);
          assert.equal(sum(fams, "skiff_processes", { id, runtime }), 1);
          assert.equal(
            sum(fams, "skiff_ttrpc_requests_total", { id, runtime, method: "Create", code: "OK" }),
            1,
          );
        }
        assert.equal(sum(fams, "skiff_monitor_shims", { status: "ok" }), 2);

        // The runsc container goes away: its shim drops out of the next scrape.
        assert.equal(
          (await c.ctr(["task", "kill", "-s", "SIGKILL", "s1"], { namespace: ns })).code,
          0,
        );
        await eventually(async () => {
          const d = await c!.ctr(["task", "delete", "s1"], { namespace: ns });
          return d.code === 0;
        }, "s1 deleted");
        await eventually(async () => !(await exists(sockets[1]!)), "runsc shim exits");
        const after = parseExposition(await (await fetch(`${m.url}/metrics`)).text());
        assert.deepEqual(
          after.find((f) => f.name === "skiff_shim_info")!.samples
            .map((x) => Object.fromEntries(x.labels).id),
          ["r1"],
        );
        // The node-wide create totals still hold what the exited runsc shim counted.
        for (const runtime of [RUNC, RUNSC]) {
          assert.equal(
            sum(after, "skiff_node_task_create_requests_total", { runtime, result: "ok" }),
            1,
          );
        }
      } finally {
        await m.close();
      }
    } finally {
      await c?.stop();
      for (const s of sockets) await Deno.remove(s).catch(() => {});
      await Deno.remove(prefix, { recursive: true }).catch(() => {});
    }
  },
);
