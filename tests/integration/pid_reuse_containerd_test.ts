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
 */
import assert from "node:assert/strict";
import { integrationTest } from "../_integration.ts";
import { containerdVersions } from "../../sdk/testing/containerd.ts";
import { type Bed, startBed } from "../../bench/soak/bed.ts";
import { runExecBurst, sourceOfWrong, summarizeExecs } from "../../bench/soak/exec_burst.ts";
import { PidWrapper } from "../../bench/soak/pid_wrap.ts";
import { shimOf, zombiesUnder } from "../../bench/soak/procs.ts";

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
