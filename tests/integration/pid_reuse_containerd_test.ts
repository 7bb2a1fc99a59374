/**
 * Exit codes under pid reuse (issue 11), for skiff's runc shim and containerd's Go runc shim
 * in the same run, under real containerd 1.6 and 2.4: one long-running container, then many
 * execs through containerd's Tasks API (Exec, Start, Wait, Delete), exec `i` running
 * `sh -c 'exit i % 250'`, six at a time, while the host's pid counter is forced to wrap over
 * and over (see bench/soak/pid_wrap.ts), so new execs get pids that earlier execs had.
 *
 * A shim that attributes an exit by pid alone hands a new exec the status of an earlier
 * process with the same pid. Asserted: no wrong and no lost exit code, at least one wrap and
 * one exec on a reused pid observed (else the run did not test anything), no zombie left
 * under the shim.
 *
 * The same in shared mode (skiff's runc installed with `sharedPods`, SKIFF_SHARED_PODS): three
 * long-running containers, each a pod of its own (ctr groups nothing), served by one process
 * with one reaper, and the execs spread over them, concurrently, each pod's with exit codes of
 * its own range: an exit attributed by pid alone, or to another pod of the process, shows as a
 * wrong code. Asserted as well: the three pods share one server.
 */
import assert from "node:assert/strict";
import { integrationTest } from "../_integration.ts";
import { containerdVersions } from "../../sdk/testing/containerd.ts";
import { type Bed, startBed } from "../../bench/soak/bed.ts";
import { runExecBurst, sourceOfWrong, summarizeExecs } from "../../bench/soak/exec_burst.ts";
import { PidWrapper } from "../../bench/soak/pid_wrap.ts";
import { shimOf, zombiesUnder } from "../../bench/soak/procs.ts";
import { serverOf } from "../../bench/soak/shared_pods.ts";

const NEEDS = {
  root: true,
  binaries: ["runc", "busybox", "sh", "mount", "umount"],
  check: () => {
    try {
      Deno.statSync("/proc/sys/kernel/ns_last_pid");
      return undefined;
    } catch {
      return "/proc/sys/kernel/ns_last_pid (a kernel with CONFIG_CHECKPOINT_RESTORE)";
    }
  },
};

/** Bounds of one shim's run: whichever comes first. */
const EXECS = 900;
const MAX_MS = 75_000;
const IN_FLIGHT = 6;

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

async function noZombiesEventually(pid: number): Promise<number[]> {
  const until = Date.now() + 10_000;
  for (;;) {
    const z = zombiesUnder(pid);
    if (z.length === 0 || Date.now() > until) return z;
    await sleep(100);
  }
}

async function scenario(bed: Bed, shimIndex: number): Promise<void> {
  const shim = bed.shims[shimIndex]!;
  const id = `long-${shim.label}`;
  const r = await bed.runDetached(shim, id);
  assert.equal(r.code, 0, `ctr run -d ${id}: ${r.stderr}${r.stdout}`);
  const wrapper = new PidWrapper({ everyMs: 1500 });
  wrapper.start();
  let outcomes;
  try {
    outcomes = await runExecBurst(bed.client, {
      containerId: id,
      count: EXECS,
      inFlight: IN_FLIGHT,
      maxMs: MAX_MS,
      prefix: "e",
    });
  } finally {
    await wrapper.stop();
  }
  const s = summarizeExecs(outcomes);
  const shimPid = shimOf(bed.c, bed.ns, id);
  assert.ok(shimPid, `no shim process for ${id}`);
  const zombies = await noZombiesEventually(shimPid);
  const wrong = s.wrong.map((o) => {
    const from = sourceOfWrong(outcomes, o);
    return `exec ${o.index} (pid ${o.pid}) expected ${o.expected}, Wait ${o.waited}, ` +
      `Delete ${o.deleted}${from ? `: the code of exec ${from.index}` : ""}`;
  });
  console.log(
    `${bed.c.version} ${shim.label}: ${s.total} execs, ${wrapper.wraps} wraps, ` +
      `${s.execsOnReusedPid} execs on a reused pid, ${s.wrong.length} wrong, ${s.lost.length} lost`,
  );
  for (const w of wrong) console.log(`  wrong: ${w}`);
  assert.deepEqual(wrong, [], `${shim.label}: wrong exit codes`);
  assert.deepEqual(
    s.lost.map((o) => `exec ${o.index}: ${o.error}`),
    [],
    `${shim.label}: execs without a status`,
  );
  assert.ok(wrapper.wraps >= 1, `${shim.label}: the pid counter never wrapped`);
  assert.ok(s.execsOnReusedPid >= 1, `${shim.label}: no exec got a reused pid`);
  assert.deepEqual(zombies, [], `${shim.label}: zombies under shim ${shimPid}`);
  const del = await bed.ctr(["tasks", "delete", "--force", id]);
  assert.equal(del.code, 0, `ctr tasks delete --force ${id}: ${del.stderr}`);
  await bed.ctr(["containers", "delete", id]);
}

/** Pods of one shared server in the shared scenario; the install's limit leaves room for them. */
const SHARED_PODS = 3;
/** Exit codes per pod: pod k's execs exit with `k * CODES + i % CODES`. */
const CODES = 80;

async function sharedScenario(bed: Bed): Promise<void> {
  const shim = bed.shims[0]!;
  const ids = Array.from({ length: SHARED_PODS }, (_, k) => `shared-${k}`);
  for (const id of ids) {
    const r = await bed.runDetached(shim, id);
    assert.equal(r.code, 0, `ctr run -d ${id}: ${r.stderr}${r.stdout}`);
  }
  const servers = ids.map((id) => serverOf(bed, id));
  assert.ok(servers[0] !== undefined, `no server recorded for ${ids[0]}`);
  assert.deepEqual(servers, ids.map(() => servers[0]), `one server for the pods: ${servers}`);
  const server = servers[0]!;
  const wrapper = new PidWrapper({ everyMs: 1500 });
  wrapper.start();
  let bursts;
  try {
    bursts = await Promise.all(ids.map((id, k) =>
      runExecBurst(bed.client, {
        containerId: id,
        count: Math.ceil(EXECS / SHARED_PODS),
        inFlight: Math.max(1, Math.round(IN_FLIGHT / SHARED_PODS)),
        maxMs: MAX_MS,
        prefix: `e${k}`,
        codeOf: (i) => k * CODES + (i % CODES),
      })
    ));
  } finally {
    await wrapper.stop();
  }
  const zombies = await noZombiesEventually(server);
  const wrong: string[] = [];
  const lost: string[] = [];
  let total = 0;
  let reused = 0;
  for (const [k, outcomes] of bursts.entries()) {
    const s = summarizeExecs(outcomes);
    total += s.total;
    reused += s.execsOnReusedPid;
    for (const o of s.wrong) {
      const from = sourceOfWrong(outcomes, o);
      const pod = [o.waited, o.deleted].map((c) => c === undefined ? "?" : Math.floor(c / CODES));
      wrong.push(
        `${ids[k]} exec ${o.index} (pid ${o.pid}) expected ${o.expected}, Wait ${o.waited}, ` +
          `Delete ${o.deleted} (codes of pod ${pod.join("/")})` +
          (from ? `: the code of exec ${from.index}` : ""),
      );
    }
    lost.push(...s.lost.map((o) => `${ids[k]} exec ${o.index}: ${o.error}`));
  }
  console.log(
    `${bed.c.version} ${shim.label} shared (${SHARED_PODS} pods, server ${server}): ${total} execs, ` +
      `${wrapper.wraps} wraps, ${reused} execs on a reused pid, ${wrong.length} wrong, ${lost.length} lost`,
  );
  for (const w of wrong) console.log(`  wrong: ${w}`);
  assert.deepEqual(wrong, [], "wrong exit codes");
  assert.deepEqual(lost, [], "execs without a status");
  assert.ok(wrapper.wraps >= 1, "the pid counter never wrapped");
  assert.ok(reused >= 1, "no exec got a reused pid");
  assert.deepEqual(zombies, [], `zombies under shared server ${server}`);
  assert.equal(shimOf(bed.c, bed.ns, ids[1]!), server, "shimOf finds a joined pod's server");
  for (const id of ids) {
    const del = await bed.ctr(["tasks", "delete", "--force", id]);
    assert.equal(del.code, 0, `ctr tasks delete --force ${id}: ${del.stderr}`);
    await bed.ctr(["containers", "delete", id]);
  }
}

for (const v of containerdVersions().filter((v) => /^(1\.6|2\.4)\./.test(v.version))) {
  integrationTest(
    `containerd ${v.version}: exec exit codes stay right while pids wrap and get reused (skiff and Go runc shims)`,
    NEEDS,
    async (t) => {
      const bed = await startBed(v.binDir);
      try {
        for (let i = 0; i < bed.shims.length; i++) {
          await t.step(bed.shims[i]!.label, () => scenario(bed, i));
        }
      } finally {
        await bed.stop();
      }
    },
  );
}

for (const v of containerdVersions().filter((v) => /^(1\.6|2\.4)\./.test(v.version))) {
  integrationTest(
    `containerd ${v.version}: exec exit codes stay right while pids wrap and get reused, ${SHARED_PODS} pods in one shared skiff server`,
    NEEDS,
    async () => {
      const bed = await startBed(v.binDir, { only: "skiff", sharedPods: 4 });
      try {
        await sharedScenario(bed);
      } finally {
        await bed.stop();
      }
    },
  );
}
