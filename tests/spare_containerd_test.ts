/**
 * The warm spare server (sdk/shim/spare/spare.ts, sdk/shim/spare/handoff.ts) under real
 * containerd 1.6 and 2.x with real runc and the skiff runc example shim installed by
 * `installShims` (spares on, as by default):
 *
 * - adoption: the first start is cold, a later one is served by the spare that waited;
 * - an adopted spare is indistinguishable from a cold server: working directory, cgroups,
 *   OOM score, the environment containerd gave, log lines through the log FIFO, `-debug`, and
 *   runc options' `shim_cgroup`;
 * - a spare of reinstalled code is never adopted and exits by itself; a killed spare means a
 *   cold start; parallel starts are all counted; idle expiry; `SKIFF_SPARE=0`; two containerds
 *   on one node; nothing left behind.
 *
 * The spare a `start` adopts is recognised by pid: the pid that waited in `c.spares()` is the
 * one the bundle's `shim.pid` names afterwards. Everything waits by polling with generous
 * bounds; nothing asserts a duration.
 */
import assert from "node:assert/strict";
import { create, type MessageInitShape, toBinary } from "@bufbuild/protobuf";
import { type Any, AnySchema } from "@bufbuild/protobuf/wkt";
import { integrationTest } from "./_integration.ts";
import { makeCgroup, procsOf } from "./_cgroups.ts";
import {
  containerdVersions,
  type CtrResult,
  type PrivateContainerd,
  startContainerd,
  type StartContainerdOptions,
} from "../sdk/testing/containerd.ts";
import { ctrRun, type CtrRunOptions } from "../sdk/testing/ctr.ts";
import { installShims } from "../sdk/install/install.ts";
import { containerdClient } from "../sdk/testing/containerd_client.ts";
import { createBusyboxBundle, createOciSpec } from "../sdk/testing/bundle.ts";
import { OptionsSchema as RuncOptionsSchema } from "../proto/gen/containerd/runc/v1/oci_pb.ts";
import { processAlive } from "../sdk/linux/proc_stat.ts";
import { spareDir } from "../sdk/shim/spare/mod.ts";

const RUNTIME = "io.containerd.skiff-runc.v2";
const LAUNCHER = "containerd-shim-skiff-runc-v2";
const NEEDS = { root: true, binaries: ["runc", "busybox", "sh"] };
const SPEC_TYPE = "types.containerd.io/opencontainers/runtime-spec/1/Spec";
/** Generous bound for what must happen eventually (never a timing assertion). */
const EVENTUALLY_MS = 90_000;
const enc = new TextEncoder();

function uid(tag: string): string {
  return `${tag}-${crypto.randomUUID().slice(0, 8)}`;
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Polls `probe` until it returns a value other than undefined; fails after a long bound. */
async function eventually<V>(
  what: string,
  probe: () => V | undefined | Promise<V | undefined>,
  ms = EVENTUALLY_MS,
): Promise<V> {
  const until = Date.now() + ms;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > until) throw new Error(`gave up waiting for ${what}`);
    await sleep(50);
  }
}

function exists(path: string): boolean {
  try {
    Deno.lstatSync(path);
    return true;
  } catch {
    return false;
  }
}

/** Running (a zombie waiting for init to reap it counts as gone). */
function alive(pid: number): boolean {
  return processAlive(pid);
}

function describe(r: CtrResult): string {
  return `code ${r.code}${
    r.timedOut ? " (timed out)" : ""
  }\nstdout: ${r.stdout}\nstderr: ${r.stderr}`;
}

function bundleOf(c: PrivateContainerd, ns: string, id: string): string {
  return `${c.state}/io.containerd.runtime.v2.task/${ns}/${id}`;
}

/** The counters of the (one) installed launcher; zeros when none was written. */
async function stats(c: PrivateContainerd): Promise<{ adopted: number; cold: number }> {
  const dir = spareDir(c.address);
  const files: string[] = [];
  try {
    for (const e of Deno.readDirSync(dir)) {
      if (/^stats-.*\.json$/.test(e.name)) files.push(e.name);
    }
  } catch { /* no dir: nothing counted */ }
  assert.ok(files.length <= 1, `one launcher, one counters file: ${files}`);
  if (files.length === 0) return { adopted: 0, cold: 0 };
  const v = JSON.parse(await Deno.readTextFile(`${dir}/${files[0]}`));
  return { adopted: v.adopted, cold: v.cold };
}

/** Waits until the counters read `want` (servers count themselves just after listening). */
async function statsReach(c: PrivateContainerd, want: { adopted: number; cold: number }) {
  let last = { adopted: -1, cold: -1 };
  try {
    await eventually(`counters ${JSON.stringify(want)}`, async () => {
      last = await stats(c);
      return last.adopted === want.adopted && last.cold === want.cold ? true : undefined;
    }, 30_000);
  } catch {
    assert.deepEqual(last, want, "spare counters");
  }
}

/**
 * The spare waiting for `c`: a `-spare` process of this containerd that holds the lock (its
 * pid is in the lock file) and whose socket exists.
 */
async function waitingSpare(c: PrivateContainerd): Promise<number> {
  const dir = spareDir(c.address);
  return await eventually(`a waiting spare of ${c.address}`, () => {
    const spares = new Set(c.spares().map((s) => s.pid));
    try {
      for (const e of Deno.readDirSync(dir)) {
        const m = /^spare-(.*)\.lock$/.exec(e.name);
        if (!m) continue;
        const pid = Number(Deno.readTextFileSync(`${dir}/${e.name}`).trim());
        if (spares.has(pid) && exists(`${dir}/spare-${m[1]}.sock`)) return pid;
      }
    } catch { /* not yet */ }
    return undefined;
  });
}

/** The server `start` recorded for a container (the bundle's `shim.pid`). */
function serverOf(c: PrivateContainerd, ns: string, id: string): Promise<number> {
  return eventually(`shim.pid of ${ns}/${id}`, () => {
    try {
      const pid = Number(Deno.readTextFileSync(`${bundleOf(c, ns, id)}/shim.pid`).trim());
      return pid > 0 ? pid : undefined;
    } catch {
      return undefined;
    }
  });
}

/** containerd's log lines that came from a shim's `serving` line for `id`. */
async function servingOrigin(c: PrivateContainerd, id: string): Promise<string> {
  return await eventually(`the serving line of ${id} in containerd's log`, async () => {
    for (const line of (await c.logs()).split("\n")) {
      if (!/msg="?serving/.test(line) || !line.includes(`id=${id} `)) continue;
      const m = /origin=(\w+)/.exec(line);
      if (m) return m[1];
    }
    return undefined;
  });
}

function runcOptions(init: MessageInitShape<typeof RuncOptionsSchema>): Any {
  return create(AnySchema, {
    typeUrl: "containerd.runc.v1.Options",
    value: toBinary(RuncOptionsSchema, create(RuncOptionsSchema, init)),
  });
}

/** The nice value of `pid`'s autogroup, or undefined without autogroups (`/autogroup-N nice 19`). */
function autogroupNice(pid: number): number | undefined {
  try {
    const m = /\snice\s+(-?\d+)/.exec(Deno.readTextFileSync(`/proc/${pid}/autogroup`));
    return m ? Number(m[1]) : undefined;
  } catch {
    return undefined;
  }
}

function readProc(pid: number, file: string): string {
  return Deno.readTextFileSync(`/proc/${pid}/${file}`).trim();
}

/** A `binary://` logger that writes the environment it got from the shim server to a file. */
async function envLogger(dir: string): Promise<string> {
  const path = `${dir}/env-logger.sh`;
  await Deno.writeTextFile(
    path,
    [
      "#!/bin/sh",
      `env > "${dir}/$CONTAINER_ID.env.part" && mv "${dir}/$CONTAINER_ID.env.part" "${dir}/$CONTAINER_ID.env"`,
      "exec 5>&-",
      "cat <&3 >/dev/null &",
      "cat <&4 >/dev/null &",
      "wait",
      "",
    ].join("\n"),
    { mode: 0o755 },
  );
  return path;
}

function parseEnv(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of text.split("\n")) {
    const i = line.indexOf("=");
    if (i > 0) out.set(line.slice(0, i), line.slice(i + 1));
  }
  return out;
}

/** One version's setup: an installed shim and a way to start containerds with it. */
interface Kit {
  prefix: string;
  binDir: string;
  image: string;
  started: PrivateContainerd[];
  containerd(opts?: Partial<StartContainerdOptions>): Promise<PrivateContainerd>;
  run(
    c: PrivateContainerd,
    o: Omit<CtrRunOptions, "image" | "runtime" | "runtimeConfigPath">,
  ): Promise<CtrResult>;
}

async function kit(binDir: string): Promise<Kit> {
  const prefix = await Deno.makeTempDir({ prefix: "skiff-spare-" });
  await installShims({ prefix, shims: { [LAUNCHER]: "examples/runc/main.ts" } });
  const runtimeConfigs = new Map<PrivateContainerd, string>();
  const imported = new Set<string>();
  const k: Kit = {
    prefix,
    binDir,
    image: "",
    started: [],
    async containerd(opts = {}) {
      const c = await startContainerd({
        binDir,
        runtimes: { skiff: { runtimeType: RUNTIME, binaryDir: `${prefix}/bin` } },
        ...opts,
      });
      k.started.push(c);
      const cfg = `${c.dir}/runc.toml`;
      // runc state in the private containerd's runc root, so stop() cleans it up.
      await Deno.writeTextFile(cfg, `Root = "${c.runcRoot}"\n`);
      runtimeConfigs.set(c, cfg);
      return c;
    },
    async run(c, o) {
      const ns = o.namespace ?? "skiff-test";
      if (!imported.has(`${c.dir}/${ns}`)) {
        k.image = await c.importBusyboxImage(ns);
        imported.add(`${c.dir}/${ns}`);
      }
      return await ctrRun(c, {
        ...o,
        namespace: ns,
        image: k.image,
        runtime: "skiff",
        runtimeConfigPath: runtimeConfigs.get(c)!,
        timeoutMs: o.timeoutMs ?? 120_000,
      });
    },
  };
  return k;
}

async function ok(r: Promise<CtrResult>, what: string): Promise<CtrResult> {
  const res = await r;
  assert.equal(res.code, 0, `${what}: ${describe(res)}`);
  return res;
}

// The spare answers `start` in each of skiff's answer forms: 1.6 (plain address, as for 1.7),
// 2.1 (JSON, as for 2.0-2.2), 2.4 (BootstrapParams in, BootstrapResult out, as for 2.3).
const versions = containerdVersions().filter((v) => /^(1\.6|2\.1|2\.4)\./.test(v.version));

integrationTest("the warm spare is tested under containerd 1.6 and 2.x", {
  ...NEEDS,
  check() {
    const have = versions.map((v) => v.version);
    const lacking = ["1.6", "2."].filter((p) => !have.some((h) => h.startsWith(p)));
    return lacking.length > 0
      ? `containerd ${lacking.join(", ")} (found ${have.join(", ") || "none"}; ` +
        "run tests/setup/prepare.sh as root)"
      : undefined;
  },
}, () => {
  assert.ok(versions.some((v) => v.version.startsWith("1.6")), "containerd 1.6");
  assert.ok(versions.some((v) => v.version.startsWith("2.")), "containerd 2.x");
  return Promise.resolve();
});

// 1.6 (the oldest supported) and the newest 2.x found.
const chosen = [
  versions.find((v) => v.version.startsWith("1.6")),
  versions.filter((v) => v.version.startsWith("2.")).at(-1),
].filter((v) => v !== undefined);

for (const v of chosen) {
  integrationTest(
    `warm spare under containerd ${v.version}: adoption, same as cold, reinstall, kill, parallel, idle, off, two containerds, cleanup`,
    NEEDS,
    async (t) => {
      const k = await kit(v.binDir);
      try {
        await t.step(
          "adoption: the first run is cold, the next is served by the spare",
          async () => {
            const c = await k.containerd();
            const ns = "adopt";
            const first = uid("first");
            await ok(k.run(c, { id: first, namespace: ns, args: ["true"] }), "first run");
            assert.equal(await servingOrigin(c, first), "cold");
            await statsReach(c, { adopted: 0, cold: 1 });
            const spare = await waitingSpare(c);

            const second = uid("second");
            await ok(
              k.run(c, { id: second, namespace: ns, detach: true, args: ["sleep", "600"] }),
              "second run",
            );
            assert.equal(await serverOf(c, ns, second), spare, "the spare that waited serves it");
            const shims = c.shims();
            const listed = shims.find((s) => s.pid === spare);
            assert.ok(
              listed,
              `c.shims() lists the adopted spare ${spare}: ${JSON.stringify(shims)}`,
            );
            const at = (f: string) => listed.argv[listed.argv.indexOf(f) + 1];
            assert.equal(at("-id"), second);
            assert.equal(at("-namespace"), ns);
            assert.ok(!c.spares().some((s) => s.pid === spare), "no longer listed as waiting");
            assert.equal(await servingOrigin(c, second), "spare");
            await statsReach(c, { adopted: 1, cold: 1 });
            // The task really runs under it: ctr sees it, and a kill reaches it through the server.
            await ok(c.ctr(["tasks", "kill", "-s", "KILL", second], { namespace: ns }), "kill");
            await eventually("the adopted task's exit", async () => {
              const r = await c.ctr(["tasks", "ls"], { namespace: ns });
              return r.stdout.includes("STOPPED") ? true : undefined;
            });
            await ok(c.ctr(["tasks", "delete", second], { namespace: ns }), "task delete");
            await ok(c.ctr(["containers", "delete", second], { namespace: ns }), "delete");
            await eventually("the adopted server's exit", () => alive(spare) ? undefined : true);
            // A new spare waits again for the next one.
            assert.notEqual(await waitingSpare(c), spare);
            await c.stop();
          },
        );

        await t.step("an adopted spare is indistinguishable from a cold server", async () => {
          const marker = uid("marker");
          const c = await k.containerd({ debug: true, env: { SKIFF_SPARE_TEST_MARKER: marker } });
          const envDir = `${c.dir}/envs`;
          await Deno.mkdir(envDir);
          const logUri = `binary://${await envLogger(envDir)}`;
          const cold = { ns: "cold-ns", id: uid("cold") };
          const warm = { ns: "warm-ns", id: uid("warm") };
          const containerdPid = c.pid!;
          await ok(
            k.run(c, { ...cold, namespace: cold.ns, detach: true, logUri, args: ["sleep", "600"] }),
            "cold run",
          );
          const coldPid = await serverOf(c, cold.ns, cold.id);
          assert.equal(await servingOrigin(c, cold.id), "cold");
          const coldCgroup = readProc(coldPid, "cgroup");
          assert.equal(coldCgroup, readProc(containerdPid, "cgroup"), "cold: containerd's cgroups");
          const spare = await waitingSpare(c);
          assert.equal(readProc(spare, "cgroup"), coldCgroup, "the spare starts there too");
          // A spare loads and waits at the lowest priority where it can be raised back (root).
          const nices = (pid: number) =>
            [...Deno.readDirSync(`/proc/${pid}/task`)].map((t) => {
              const st = Deno.readTextFileSync(`/proc/${pid}/task/${t.name}/stat`);
              return Number(st.slice(st.lastIndexOf(")") + 2).split(" ")[16]);
            });
          assert.ok(nices(spare).every((n) => n === 19), `waiting spare: ${nices(spare)}`);
          // Its own session is its own autogroup, which weighs against the container's as a
          // whole: that is lowered too, or the loading spare slows runc down (sched_autogroup).
          const autogroup = autogroupNice;
          const autogroups = autogroup(spare) !== undefined;
          if (autogroups) assert.equal(autogroup(spare), 19, "the waiting spare's autogroup");

          // containerd moves to another cgroup while the spare waits (in the old one): a
          // server spawned now would be in the new one, so the adopted spare must move too.
          const moved = `/${c.cgroupParent}/containerd-moved`;
          for (const d of await makeCgroup(moved)) {
            await Deno.writeTextFile(`${d}/cgroup.procs`, String(containerdPid));
          }
          const containerdCgroup = readProc(containerdPid, "cgroup");
          assert.notEqual(containerdCgroup, coldCgroup, "containerd moved");

          await ok(
            k.run(c, { ...warm, namespace: warm.ns, detach: true, logUri, args: ["sleep", "600"] }),
            "warm run",
          );
          const warmPid = await serverOf(c, warm.ns, warm.id);
          assert.equal(warmPid, spare, "adopted");
          assert.equal(await servingOrigin(c, warm.id), "spare", "its log line reached containerd");

          // Working directory: a server leaves the bundle for "/" once it has opened the bundle's
          // log FIFO (serve.ts), so both are at "/"; that the adopted one started from its bundle
          // is shown by its log line above, which only the bundle's `log` FIFO carries.
          assert.equal(Deno.readLinkSync(`/proc/${coldPid}/cwd`), "/");
          assert.equal(Deno.readLinkSync(`/proc/${warmPid}/cwd`), "/");
          // cgroups: containerd's at the time of start.
          assert.equal(readProc(warmPid, "cgroup"), containerdCgroup, "adopted: containerd's");
          // OOM score: one above containerd's.
          const want = Math.min(1000, Number(readProc(containerdPid, "oom_score_adj")) + 1);
          assert.equal(Number(readProc(coldPid, "oom_score_adj")), want, "cold oom_score_adj");
          assert.equal(Number(readProc(warmPid, "oom_score_adj")), want, "adopted oom_score_adj");
          // Priority: containerd's, on every thread, as a cold server inherits it.
          const containerdNice = nices(containerdPid)[0];
          assert.ok(nices(coldPid).every((n) => n === containerdNice), `cold: ${nices(coldPid)}`);
          assert.ok(
            nices(warmPid).every((n) => n === containerdNice),
            `adopted: ${nices(warmPid)}`,
          );
          // A cold server's new session starts a new autogroup at 0; an adopted spare's is raised
          // back to that.
          if (autogroups) {
            assert.equal(autogroup(coldPid), 0, "cold: a new autogroup");
            assert.equal(autogroup(warmPid), 0, "adopted: its autogroup raised back");
          }

          // Environment: what each server hands its children (the binary logger).
          const envOf = (id: string) =>
            eventually(`the env dump of ${id}`, () => {
              try {
                return parseEnv(Deno.readTextFileSync(`${envDir}/${id}.env`));
              } catch {
                return undefined;
              }
            });
          const coldEnv = await envOf(cold.id);
          const warmEnv = await envOf(warm.id);
          assert.equal(coldEnv.get("SKIFF_SPARE_TEST_MARKER"), marker, "containerd's env (cold)");
          assert.equal(warmEnv.get("SKIFF_SPARE_TEST_MARKER"), marker, "containerd's env (spare)");
          if (c.major >= 2) {
            // 2.x names the namespace (the spare was spawned by a start in cold.ns).
            assert.equal(coldEnv.get("NAMESPACE"), cold.ns);
            assert.equal(warmEnv.get("NAMESPACE"), warm.ns, "start's NAMESPACE, not the spawner's");
            assert.equal(warmEnv.get("GRPC_ADDRESS"), c.address);
          } else {
            // 1.6 adds only GOMAXPROCS and TTRPC_ADDRESS to its own environment.
            assert.equal(warmEnv.get("GOMAXPROCS"), "2");
          }
          assert.equal(warmEnv.get("TTRPC_ADDRESS"), c.ttrpcAddress);
          assert.equal(warmEnv.get("CONTAINER_ID"), warm.id);
          const comparable = (e: Map<string, string>) =>
            Object.fromEntries(
              [...e].filter(([key]) =>
                !["NAMESPACE", "CONTAINER_ID", "CONTAINER_NAMESPACE"].includes(key)
              ).sort(([a], [b]) => a < b ? -1 : 1),
            );
          assert.deepEqual(comparable(warmEnv), comparable(coldEnv), "same environment");

          // -debug: both servers log debug lines (a task's exit) to containerd's log.
          for (const s of [cold, warm]) {
            await ok(c.ctr(["tasks", "kill", "-s", "KILL", s.id], { namespace: s.ns }), "kill");
          }
          for (const s of [cold, warm]) {
            await eventually(
              `a debug line of ${s.id}'s server`,
              async () =>
                (await c.logs()).split("\n").some((l) =>
                    /level=debug/.test(l) && l.includes("process exited") && l.includes(s.id)
                  )
                  ? true
                  : undefined,
            );
          }
          await c.stop();
        });

        await t.step("runc options' shim_cgroup is honoured by an adopted spare", async () => {
          const c = await k.containerd();
          const ns = "shimcg";
          const cl = containerdClient(c.address, ns);
          const rootfs = await createBusyboxBundle({ args: ["true"] });
          try {
            // A first run, so that a spare waits.
            await ok(k.run(c, { id: uid("prime"), namespace: ns, args: ["true"] }), "prime");
            const spare = await waitingSpare(c);
            const path = `/${c.cgroupParent}/shim-spare`;
            const dirs = await makeCgroup(path);
            const id = uid("shimcg");
            const spec = createOciSpec({ args: ["sh", "-c", "exit 0"] });
            (spec as { root: unknown }).root = { path: `${rootfs.bundle}/rootfs`, readonly: false };
            await cl.containers.create({
              container: {
                id,
                runtime: {
                  name: RUNTIME,
                  options: runcOptions({ root: c.runcRoot, shimCgroup: path }),
                },
                spec: { typeUrl: SPEC_TYPE, value: enc.encode(JSON.stringify(spec)) },
                labels: {},
                extensions: {},
              },
            });
            await cl.tasks.create({ containerId: id });
            assert.equal(await serverOf(c, ns, id), spare, "adopted");
            for (const d of dirs) {
              assert.ok(procsOf(d).includes(spare), `adopted server ${spare} in ${d}`);
            }
            await cl.tasks.start({ containerId: id });
            assert.equal((await cl.tasks.wait({ containerId: id })).exitStatus, 0);
            await cl.tasks.delete({ containerId: id });
            await cl.containers.delete({ id });
          } finally {
            await c.stop();
            await rootfs.cleanup();
          }
        });

        await t.step("a spare of reinstalled code is not adopted, and exits", async () => {
          const prefix = await Deno.makeTempDir({ prefix: "skiff-spare-reinstall-" });
          try {
            await installShims({ prefix, shims: { [LAUNCHER]: "examples/runc/main.ts" } });
            const c = await k.containerd({
              runtimes: { skiff: { runtimeType: RUNTIME, binaryDir: `${prefix}/bin` } },
            });
            const ns = "reinstall";
            await ok(k.run(c, { id: uid("before"), namespace: ns, args: ["true"] }), "before");
            const old = await waitingSpare(c);
            await statsReach(c, { adopted: 0, cold: 1 });
            // Other V8 flags: other launcher text, so other code.
            await installShims({
              prefix,
              shims: { [LAUNCHER]: "examples/runc/main.ts" },
              v8Flags: ["--max-semi-space-size=2"],
            });
            const id = uid("after");
            await ok(
              k.run(c, { id, namespace: ns, detach: true, args: ["sleep", "600"] }),
              "after reinstall",
            );
            const server = await serverOf(c, ns, id);
            assert.notEqual(server, old, "the old spare did not serve it");
            assert.equal(await servingOrigin(c, id), "cold");
            await statsReach(c, { adopted: 0, cold: 2 });
            await eventually(`the old spare ${old} exits`, () => alive(old) ? undefined : true);
            // The next spare is of the new code, and is adopted.
            const fresh = await waitingSpare(c);
            assert.notEqual(fresh, old);
            const next = uid("next");
            await ok(
              k.run(c, { id: next, namespace: ns, detach: true, args: ["sleep", "600"] }),
              "next",
            );
            assert.equal(await serverOf(c, ns, next), fresh);
            await c.stop();
          } finally {
            await Deno.remove(prefix, { recursive: true }).catch(() => {});
          }
        });

        await t.step("a SIGKILLed spare: the next run is cold and counted cold", async () => {
          const c = await k.containerd();
          const ns = "killed";
          await ok(k.run(c, { id: uid("one"), namespace: ns, args: ["true"] }), "one");
          const spare = await waitingSpare(c);
          await statsReach(c, { adopted: 0, cold: 1 });
          Deno.kill(spare, "SIGKILL");
          await eventually("the killed spare is gone", () => alive(spare) ? undefined : true);
          const id = uid("two");
          await ok(k.run(c, { id, namespace: ns, detach: true, args: ["sleep", "600"] }), "two");
          assert.notEqual(await serverOf(c, ns, id), spare);
          assert.equal(await servingOrigin(c, id), "cold");
          await statsReach(c, { adopted: 0, cold: 2 });
          await c.stop();
        });

        await t.step(
          "10 parallel runs: all succeed, all counted, one spare waits after",
          async () => {
            const c = await k.containerd();
            const ns = "parallel";
            await ok(k.run(c, { id: uid("warmup"), namespace: ns, args: ["true"] }), "warm-up");
            const before = await waitingSpare(c);
            await statsReach(c, { adopted: 0, cold: 1 });
            const ids = Array.from({ length: 10 }, (_, i) => uid(`p${i}`));
            const results = await Promise.all(
              ids.map((id) => k.run(c, { id, namespace: ns, args: ["true"] })),
            );
            results.forEach((r, i) => assert.equal(r.code, 0, `${ids[i]}: ${describe(r)}`));
            // Every start is counted exactly once, whichever way it went.
            let last = { adopted: 0, cold: 0 };
            await eventually("11 counted starts", async () => {
              last = await stats(c);
              return last.adopted + last.cold >= 11 ? true : undefined;
            }).catch(() => assert.fail(`counted ${JSON.stringify(last)}`));
            await sleep(1_000); // a late extra count would show now
            last = await stats(c);
            assert.equal(last.adopted + last.cold, 11, JSON.stringify(last));
            // The spare that waited before was adopted by one of them (nothing else can take it).
            assert.ok(last.adopted >= 1, JSON.stringify(last));
            const origins = await Promise.all(ids.map((id) => servingOrigin(c, id)));
            assert.equal(origins.filter((o) => o === "spare").length, last.adopted);
            assert.ok(!alive(before) || !c.spares().some((s) => s.pid === before));
            // Afterwards exactly one spare is left waiting, and no server.
            const after = await waitingSpare(c);
            await eventually("only one spare process left", () => {
              const spares = c.spares().map((s) => s.pid);
              return spares.length === 1 && spares[0] === after ? true : undefined;
            });
            await eventually(
              "no shim server left",
              () => c.shims().length === 0 ? true : undefined,
            );
            await c.stop();
          },
        );

        await t.step(
          "idle expiry: SKIFF_SPARE_IDLE_SECONDS=2 ends it, the default does not",
          async () => {
            const short = await k.containerd({ env: { SKIFF_SPARE_IDLE_SECONDS: "2" } });
            const long = await k.containerd();
            await ok(k.run(short, { id: uid("s"), namespace: "idle", args: ["true"] }), "short");
            await ok(k.run(long, { id: uid("l"), namespace: "idle", args: ["true"] }), "long");
            const shortSpare = await waitingSpare(short);
            const longSpare = await waitingSpare(long);
            await eventually(
              "the short-idle spare exits",
              () => alive(shortSpare) ? undefined : true,
            );
            assert.equal(short.spares().length, 0, "no spare left for the short-idle containerd");
            const sock = [...Deno.readDirSync(spareDir(short.address))].filter((e) =>
              e.name.endsWith(".sock")
            );
            assert.deepEqual(sock, [], "the expired spare removed its socket");
            await sleep(3_000); // longer than the short idle time again
            assert.ok(alive(longSpare), "the default-idle spare still waits");
            assert.equal(await waitingSpare(long), longSpare);
            await short.stop();
            await long.stop();
          },
        );

        await t.step("SKIFF_SPARE=0: no spare, no counters", async () => {
          const c = await k.containerd({ env: { SKIFF_SPARE: "0" } });
          const ns = "off";
          await ok(k.run(c, { id: uid("a"), namespace: ns, args: ["true"] }), "a");
          const id = uid("b");
          await ok(k.run(c, { id, namespace: ns, detach: true, args: ["sleep", "600"] }), "b");
          const server = await serverOf(c, ns, id);
          const listed = c.shims().find((s) => s.pid === server);
          assert.ok(listed && !listed.argv.includes("-spare"), "a cold server (its own argv)");
          assert.equal(await servingOrigin(c, id), "cold");
          assert.deepEqual(c.spares(), [], "no spare process");
          assert.ok(!exists(spareDir(c.address)), "no spare directory, so no counters");
          await c.stop();
        });

        await t.step("two containerds on one node: each its own spare", async () => {
          const a = await k.containerd();
          const b = await k.containerd();
          const ns = "two";
          await ok(k.run(a, { id: uid("a0"), namespace: ns, args: ["true"] }), "a0");
          const spareA = await waitingSpare(a);
          assert.deepEqual(b.spares(), [], "b has no spare before its first run");
          // b's first run is cold even though a's spare waits.
          const b0 = uid("b0");
          await ok(k.run(b, { id: b0, namespace: ns, detach: true, args: ["sleep", "600"] }), "b0");
          assert.notEqual(await serverOf(b, ns, b0), spareA);
          assert.equal(await servingOrigin(b, b0), "cold");
          assert.ok(alive(spareA) && a.spares().some((s) => s.pid === spareA), "a's still waits");
          const spareB = await waitingSpare(b);
          assert.notEqual(spareA, spareB);
          assert.notEqual(spareDir(a.address), spareDir(b.address));
          const a1 = uid("a1");
          const b1 = uid("b1");
          await ok(k.run(a, { id: a1, namespace: ns, detach: true, args: ["sleep", "600"] }), "a1");
          await ok(k.run(b, { id: b1, namespace: ns, detach: true, args: ["sleep", "600"] }), "b1");
          assert.equal(await serverOf(a, ns, a1), spareA);
          assert.equal(await serverOf(b, ns, b1), spareB);
          await statsReach(a, { adopted: 1, cold: 1 });
          await statsReach(b, { adopted: 1, cold: 1 });
          await a.stop();
          await b.stop();
        });

        await t.step("nothing left behind: stop(), and containerd stopped alone", async () => {
          const c = await k.containerd();
          await ok(k.run(c, { id: uid("x"), namespace: "left", args: ["true"] }), "x");
          const spare = await waitingSpare(c);
          const dir = spareDir(c.address);
          assert.ok(exists(dir));
          await c.stop();
          assert.ok(!alive(spare), `spare ${spare} killed by stop()`);
          assert.deepEqual(c.spares(), []);
          assert.ok(!exists(dir), `${dir} removed by stop()`);

          // containerd stopped (SIGTERM) without the kit's cleanup: the spare notices.
          const d = await k.containerd();
          await ok(k.run(d, { id: uid("y"), namespace: "left", args: ["true"] }), "y");
          const orphan = await waitingSpare(d);
          Deno.kill(d.pid!, "SIGTERM");
          await eventually("containerd's exit", () => d.pid === undefined ? true : undefined);
          await eventually(
            `spare ${orphan} exits once containerd is gone`,
            () => alive(orphan) ? undefined : true,
          );
          await d.stop();
          assert.ok(!exists(spareDir(d.address)));

          // containerd SIGKILLed: its socket file stays, but the process the spare was spawned
          // under is gone, and the spare notices that too.
          const e = await k.containerd();
          await ok(k.run(e, { id: uid("z"), namespace: "left", args: ["true"] }), "z");
          const orphan2 = await waitingSpare(e);
          const socketFile = e.address;
          Deno.kill(e.pid!, "SIGKILL");
          await eventually("containerd's exit", () => e.pid === undefined ? true : undefined);
          assert.ok(exists(socketFile), "a SIGKILLed containerd leaves its socket file");
          await eventually(
            `spare ${orphan2} exits once its containerd was killed`,
            () => alive(orphan2) ? undefined : true,
          );
          await e.stop();
          assert.ok(!exists(spareDir(e.address)));
        });
      } finally {
        for (const c of k.started) await c.stop();
        await Deno.remove(k.prefix, { recursive: true }).catch(() => {});
      }
    },
  );
}
