// What only a cgroup v2 host can show, run INSIDE the cgroup v2 test guest (sdk/testing/guest.ts)
// by tests/external/cgroup2_guest_test.ts: `deno test -A tests/guest/cgroup2_checks.ts` there. Not named
// *_test.ts, so the host's own `deno test tests/` does not pick it up; outside the guest every
// test here fails at once (SKIFF_GUEST unset), so it cannot pass on the wrong host.
//
// - the hierarchy is pure cgroup2;
// - the conformance catalogue (OOM through memory.events, v2 metrics, the freezer, a CRI pod)
//   for containerd's Go runc shim and skiff's runc, runsc and crun examples on containerd 2.1
//   (crun: trixie's 1.21, tests/setup/fetch_crun.sh);
// - checkpoint and restore for real: `ctr task checkpoint` of a counter, then `ctr containers
//   restore --live` into a new container whose counter goes on from where it was, for the Go
//   shim and skiff's runc shim side by side.
import assert from "node:assert/strict";
import {
  containerdVersions,
  skiffCacheDir,
  startContainerd,
} from "../../sdk/testing/containerd.ts";
import { installExampleShims } from "../../sdk/install/examples.ts";
import { runConformance } from "../../sdk/testing/conformance/runner.ts";
import { markdownReport } from "../../sdk/testing/conformance/report.ts";
import { ctrRun, DEFAULT_NAMESPACE, RUNC_RUNTIME } from "../../sdk/testing/ctr.ts";
import { cgroupVersion } from "../../sdk/linux/cgroup_paths.ts";

const inGuest = Deno.env.get("SKIFF_GUEST") === "1";
const v21 = containerdVersions().find((v) => v.version.startsWith("2.1."));
const SKIFF_RUNC = "io.containerd.skiff-runc.v2";

function guard(): void {
  assert.ok(inGuest, "cgroup2_checks.ts runs inside the test guest only (SKIFF_GUEST=1)");
  assert.ok(v21, "containerd 2.1 (tests/setup/prepare.sh)");
}

/**
 * Shim launchers for skiff's examples: those the host installed (SKIFF_GUEST_SHIMS, its bin
 * dir: bundling under emulation takes minutes), else installed here once.
 */
let prefix: Promise<string> | undefined;
function shims(): Promise<string> {
  const host = Deno.env.get("SKIFF_GUEST_SHIMS");
  if (host) return Promise.resolve(host);
  prefix ??= (async () => {
    const dir = await Deno.makeTempDir({ prefix: "skiff-guest-shims-" });
    await installExampleShims({ prefix: dir });
    return `${dir}/bin`;
  })();
  return prefix;
}

/**
 * A shim dir for skiff's crun example with trixie's crun (1.21; bookworm's 1.8 refuses the specs
 * containerd 2.x writes) beside it: the conformance runner puts the dir first on containerd's
 * PATH, which the shim inherits, so the example's default binary name `crun` resolves to it.
 */
async function crunShimDir(): Promise<string> {
  const crun = `${skiffCacheDir()}/crun-trixie/bin/crun`;
  assert.ok(
    (await Deno.stat(crun).catch(() => null))?.isFile,
    `${crun} (tests/setup/fetch_crun.sh, step 9 of tests/setup/prepare.sh)`,
  );
  const dir = await Deno.makeTempDir({ prefix: "skiff-guest-crun-" });
  await Deno.symlink(
    `${await shims()}/containerd-shim-skiff-crun-v2`,
    `${dir}/containerd-shim-skiff-crun-v2`,
  );
  await Deno.symlink(crun, `${dir}/crun`);
  return dir;
}

Deno.test("guest: the hierarchy is pure cgroup2, every controller delegated", () => {
  guard();
  assert.equal(cgroupVersion(), 2);
  const mounts = Deno.readTextFileSync("/proc/self/mountinfo").split("\n");
  assert.deepEqual(mounts.filter((l) => / - cgroup /.test(l)), [], "no cgroup v1 hierarchy");
  const control = Deno.readTextFileSync("/sys/fs/cgroup/cgroup.subtree_control").trim().split(" ");
  for (const c of ["cpu", "memory", "pids", "io"]) assert.ok(control.includes(c), c);
});

/** The catalogue's ids whose result differs between cgroup v1 and v2, plus the whole-path ones. */
const V2_SCENARIOS =
  "^(run-exit-code|kill-signals|pause-resume|pids|metrics|oom|events-order|grouping|cri-pod)$";
/** The same and the live upgrade, which skiff's shims offer (crun's only runs here). */
const V2_SKIFF_SCENARIOS = V2_SCENARIOS.replace(")$", "|live-upgrade)$");

for (
  const [name, runtime, only, opts] of [
    ["containerd's Go runc shim", RUNC_RUNTIME, V2_SCENARIOS, { traits: { sandboxApi: false } }],
    ["skiff's runc example", SKIFF_RUNC, V2_SKIFF_SCENARIOS, {}],
    [
      "skiff's runsc example",
      "io.containerd.skiff-runsc.v2",
      V2_SKIFF_SCENARIOS,
      { runcOptions: false },
    ],
    [
      "skiff's crun example (trixie's crun)",
      "io.containerd.skiff-crun.v2",
      V2_SKIFF_SCENARIOS,
      {},
    ],
  ] as const
) {
  Deno.test(`guest: conformance on cgroup v2, ${name}`, async () => {
    guard();
    const report = await runConformance({
      runtime,
      ...(runtime === RUNC_RUNTIME
        ? {}
        : { shimDir: runtime.includes("crun") ? await crunShimDir() : await shims() }),
      containerd: [v21!.version],
      only,
      // Emulated (TCG) and on a busy host, one live upgrade alone can take over a minute.
      stepMs: 180_000,
      ...opts,
    });
    const md = markdownReport(report);
    console.log(md);
    const bad = report.results.filter((r) => r.status !== "pass");
    assert.deepEqual(bad.map((r) => `${r.scenario}: ${r.status} ${r.reason ?? ""}`), [], md);
    assert.equal(report.results.length, only.split("|").length, md);
  });
}

/**
 * A counter in a container: checkpointed (the task exits), restored into a new container, and
 * the restored process goes on counting from its checkpointed value rather than from 1.
 */
async function checkpointRestore(runtime: string, runtimeDir?: string): Promise<void> {
  const c = await startContainerd({
    binDir: v21!.binDir,
    ...(runtimeDir ? { runtimes: { shim: { runtimeType: runtime, binaryDir: runtimeDir } } } : {}),
  });
  try {
    const ref = await c.importBusyboxImage(DEFAULT_NAMESPACE);
    const ns = { namespace: DEFAULT_NAMESPACE, timeoutMs: 300_000 };
    /** The counter's token (drawn once at its start) and value, read with an exec. */
    const read = async (id: string): Promise<{ token: string; n: number }> => {
      const exec = `cat-${crypto.randomUUID().slice(0, 8)}`;
      const r = await c.ctr(["task", "exec", "--exec-id", exec, id, "cat", "/count"], ns);
      assert.equal(r.code, 0, `cat /count in ${id}: ${r.stderr}`);
      const [token, n] = r.stdout.trim().split(" ");
      return { token: token!, n: Number(n) };
    };
    const until = async (id: string, atLeast: number) => {
      for (let i = 0; i < 600; i++) {
        const now = await read(id).catch(() => ({ token: "", n: 0 }));
        if (now.n >= atLeast) return now;
        await new Promise((r) => setTimeout(r, 500));
      }
      throw new Error(`${id}: the counter never reached ${atLeast}`);
    };
    // The shell's variables carry the state: a token drawn at start and the count. A process
    // started afresh would draw another token and count from 1.
    const script = "t=$(cat /proc/sys/kernel/random/uuid); i=0; " +
      'while :; do i=$((i+1)); echo "$t $i" > /count; sleep 0.2; done';
    const run = await ctrRun(c, {
      image: ref,
      id: "counter",
      runtime: runtimeDir ? "shim" : runtime,
      detach: true,
      args: ["sh", "-c", script],
      timeoutMs: 300_000,
    });
    assert.equal(run.code, 0, run.stderr);
    await until("counter", 5);
    // The task-level checkpoint (what CRI's CheckpointContainer reaches): it stays running.
    const ck = await c.ctr(["task", "checkpoint", "counter"], ns);
    assert.equal(ck.code, 0, `ctr task checkpoint: ${ck.stderr}\n${await c.logs()}`);
    assert.ok(ck.stdout.trim(), `ctr task checkpoint names its image: ${ck.stderr}`);
    // The container-level one carries the image name a restore needs.
    const before = await read("counter");
    const cc = await c.ctr(
      ["containers", "checkpoint", "--task", "--image", "counter", "ckpt"],
      ns,
    );
    assert.equal(cc.code, 0, `ctr containers checkpoint: ${cc.stderr}\n${await c.logs()}`);
    await c.ctr(["task", "kill", "-s", "SIGKILL", "counter"], ns);
    await c.ctr(["task", "delete", "-f", "counter"], ns);
    // A new container from the checkpoint; --live restores its task from the dump.
    const restore = await c.ctr(["containers", "restore", "--live", "restored", "ckpt"], ns);
    assert.equal(restore.code, 0, `ctr containers restore: ${restore.stderr}\n${await c.logs()}`);
    const after = await until("restored", before.n + 3);
    assert.equal(after.token, before.token, "the restored process is the checkpointed one");
    assert.ok(after.n > before.n, `restored at ${after.n}, checkpointed after ${before.n}`);
    await c.ctr(["task", "kill", "-s", "SIGKILL", "restored"], ns);
  } finally {
    await c.stop();
  }
}

Deno.test("guest: checkpoint and restore a counter, containerd's Go runc shim", async () => {
  guard();
  await checkpointRestore(RUNC_RUNTIME);
});

Deno.test("guest: checkpoint and restore a counter, skiff's runc example", async () => {
  guard();
  await checkpointRestore(SKIFF_RUNC, await shims());
});
