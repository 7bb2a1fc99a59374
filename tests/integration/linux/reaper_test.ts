import assert from "node:assert/strict";
import { integrationTest } from "../../_integration.ts";
import { decodeWaitStatus, kill, preloadLibc } from "../../../sdk/linux/libc.ts";
import { type ProcessExit, Reaper } from "../../../sdk/linux/reaper.ts";
import { bootTicks, processStartTime, processState } from "../../../sdk/linux/proc_stat.ts";
import { deadline } from "../../_linux_support.ts";

const sanitize = { sanitizeOps: true, sanitizeResources: true };
preloadLibc(); // bound once for the whole file, so the resource sanitizer sees no new library

/** Starts `script` in a background sh that the outer sh abandons; returns the orphan's pid. */
async function orphan(reaper: Reaper, script: string): Promise<number> {
  const out = await reaper.spawn(
    new Deno.Command("sh", {
      args: ["-c", `sh -c '${script}' >/dev/null 2>&1 </dev/null & echo $!`],
      stdout: "piped",
    }),
  ).output();
  assert.equal(out.code, 0);
  return Number(new TextDecoder().decode(out.stdout).trim());
}

/**
 * Records every exit from now on (subscribe before starting a process: the reaper keeps no
 * history); `of(pid)` resolves with the exit of `pid`, whether it came already or comes later.
 */
function recordExits(reaper: Reaper): { of(pid: number): Promise<ProcessExit> } {
  const seen = new Map<number, ProcessExit>();
  const waiting = new Map<number, (e: ProcessExit) => void>();
  reaper.onExit((e) => {
    seen.set(e.pid, e);
    waiting.get(e.pid)?.(e);
  });
  return {
    of: (pid) =>
      new Promise((resolve) => {
        const early = seen.get(pid);
        if (early) resolve(early);
        else waiting.set(pid, resolve);
      }),
  };
}

Deno.test("decodeWaitStatus() maps exit codes and signals to containerd's status", () => {
  assert.equal(decodeWaitStatus(0), 0);
  assert.equal(decodeWaitStatus(7 << 8), 7);
  assert.equal(decodeWaitStatus(255 << 8), 255);
  assert.equal(decodeWaitStatus(9), 137);
  assert.equal(decodeWaitStatus(15 | 0x80), 143); // core dumped flag
});

integrationTest(
  "Reaper reaps a double-forked orphan with its exit code",
  { binaries: ["sh", "sleep"] },
  async () => {
    const reaper = Reaper.start();
    try {
      const exits = recordExits(reaper);
      const pid = await orphan(reaper, "sleep 0.5; exit 7");
      const startTime = processStartTime(pid);
      const exit = await deadline(exits.of(pid), 20_000, `exit of orphan ${pid}`);
      assert.equal(exit.pid, pid);
      assert.equal(exit.status, 7);
      assert.ok(exit.exitedAt instanceof Date);
      // The start time read from the zombie is the process's own: with the pid, its identity.
      assert.ok(startTime !== undefined && startTime <= bootTicks());
      assert.equal(exit.startTime, startTime);
    } finally {
      reaper.close();
    }
  },
  sanitize,
);

integrationTest(
  "Reaper reports 128+9 for an orphan killed by SIGKILL",
  { binaries: ["sh", "sleep"] },
  async () => {
    const reaper = Reaper.start();
    try {
      const exits = recordExits(reaper);
      const pid = await orphan(reaper, "exec sleep 30");
      const exit = exits.of(pid);
      kill(pid, 9);
      assert.equal((await deadline(exit, 20_000, `exit of orphan ${pid}`)).status, 137);
    } finally {
      reaper.close();
    }
  },
  sanitize,
);

integrationTest(
  "Reaper.holdSince() keeps an orphan started within the hold a zombie (its pid its own) until released",
  { binaries: ["sh", "sleep"] },
  async () => {
    const reaper = Reaper.start();
    try {
      const exits = recordExits(reaper);
      const before = await orphan(reaper, "exec sleep 30"); // started before the hold
      await new Promise((r) => setTimeout(r, 20)); // at least one clock tick (10 ms) later
      const release = reaper.holdSince(bootTicks());
      const pid = await orphan(reaper, "sleep 0.2; exit 7"); // outlives its parent sh
      const startTime = processStartTime(pid);
      waitZombiesSync([pid]);
      reaper.sweep();
      // Held: still a zombie, so no other process can have its pid, and its start time is read.
      assert.equal(processState(pid), "Z");
      assert.equal(processStartTime(pid), startTime);
      // An orphan that started before the hold is reaped as usual meanwhile.
      const earlier = exits.of(before);
      kill(before, 9);
      assert.equal((await deadline(earlier, 20_000, `exit of orphan ${before}`)).status, 137);
      assert.equal(processState(pid), "Z");
      release();
      const exit = await deadline(exits.of(pid), 20_000, `exit of held orphan ${pid}`);
      assert.equal(exit.status, 7);
      assert.equal(exit.startTime, startTime);
      release(); // a second call does nothing
    } finally {
      reaper.close();
    }
  },
  sanitize,
);

integrationTest(
  "Reaper: a sweep while no child waits to be reaped lists no children; one with a zombie reaps it",
  { binaries: ["sh", "sleep"] },
  async () => {
    const reaper = Reaper.start();
    const readDirSync = Deno.readDirSync;
    let listed = 0;
    try {
      const exits = recordExits(reaper);
      // A child running (the periodic sweep is on), none exited: a shared server's usual state.
      const pid = await orphan(reaper, "exec sleep 30");
      Deno.readDirSync = ((path: string | URL) => {
        if (String(path).endsWith("/task")) listed++;
        return readDirSync(path);
      }) as typeof Deno.readDirSync;
      reaper.sweep();
      assert.equal(listed, 0, "nothing exited: no thread's children read");
      const exit = exits.of(pid);
      kill(pid, 9);
      waitZombiesSync([pid]);
      reaper.sweep();
      assert.equal(listed, 1, "a zombie: the children listed");
      assert.equal((await deadline(exit, 20_000, `exit of orphan ${pid}`)).status, 137);
    } finally {
      Deno.readDirSync = readDirSync;
      reaper.close();
    }
  },
  sanitize,
);

/** Blocks the event loop (without burning CPU) until every pid in `pids` is a zombie. */
function waitZombiesSync(pids: number[]): void {
  for (let i = 0; i < 500; i++) {
    const states = pids.map((pid) => {
      const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
      return stat[stat.lastIndexOf(")") + 2];
    });
    if (states.every((s) => s === "Z")) return;
    new Deno.Command("sleep", { args: ["0.01"] }).outputSync();
  }
  throw new Error(`pids ${pids.join(",")} did not all exit`);
}

integrationTest(
  "Reaper.sweep() leaves unreaped Deno.Command zombies to Deno",
  { binaries: ["sh", "sleep"] },
  async () => {
    // graceMs 0: only the registry and Deno's pidfds protect these children.
    const reaper = Reaper.start({ graceMs: 0 });
    try {
      const registered = Array.from(
        { length: 4 },
        (_, i) => reaper.spawn(new Deno.Command("sh", { args: ["-c", `exit ${i + 1}`] })),
      );
      const unregistered = Array.from(
        { length: 4 },
        (_, i) => new Deno.Command("sh", { args: ["-c", `exit ${i + 11}`] }).spawn(),
      );
      const all = [...registered, ...unregistered];
      // No await until after the sweep: Deno cannot reap them first.
      waitZombiesSync(all.map((c) => c.pid));
      reaper.sweep();
      reaper.sweep();
      const codes = await Promise.all(all.map(async (c) => (await c.status).code));
      assert.deepEqual(codes, [1, 2, 3, 4, 11, 12, 13, 14]);
    } finally {
      reaper.close();
    }
  },
  sanitize,
);

integrationTest(
  "Reaper never steals the exits of Deno.Command children",
  { binaries: ["sh", "sleep"] },
  async () => {
    const reaper = Reaper.start();
    try {
      const recorded = recordExits(reaper);
      const orphans = await Promise.all(
        Array.from({ length: 6 }, (_, i) => orphan(reaper, `sleep 0.0${i}; exit ${20 + i}`)),
      );
      const orphanExits = Promise.all(orphans.map((pid) => recorded.of(pid)));
      const spawned = Array.from({ length: 16 }, async (_, i) => {
        const child = reaper.spawn(
          new Deno.Command("sh", { args: ["-c", `exit ${i}`], stdout: "null", stderr: "null" }),
        );
        return (await child.status).code;
      });
      const unregistered = Array.from({ length: 16 }, async (_, i) => {
        // Not registered with the reaper: only Deno's pidfd protects these.
        const out = await new Deno.Command("sh", { args: ["-c", `sleep 0.0${i % 3}; exit ${i}`] })
          .output();
        return out.code;
      });
      const codes = Array.from({ length: 16 }, (_, i) => i);
      assert.deepEqual(await Promise.all(spawned), codes);
      assert.deepEqual(await Promise.all(unregistered), codes);
      const exits = await deadline(orphanExits, 20_000, "orphan exits");
      assert.deepEqual(exits.map((e) => e.status), orphans.map((_, i) => 20 + i));
    } finally {
      reaper.close();
    }
  },
  sanitize,
);

integrationTest(
  "Reaper reaps an orphan on the first sweep that sees it a zombie (no grace period)",
  { binaries: ["sh", "sleep"] },
  async () => {
    const reaper = Reaper.start();
    try {
      const exits = recordExits(reaper);
      const pids = await Promise.all(
        Array.from({ length: 4 }, () => orphan(reaper, "exec sleep 30")),
      );
      const all = Promise.all(pids.map((pid) => exits.of(pid)));
      for (const pid of pids) kill(pid, 9);
      // No await until after the sweep: no SIGCHLD handler or timer runs in between.
      waitZombiesSync(pids);
      reaper.sweep();
      assert.deepEqual(pids.map((pid) => processState(pid)), pids.map(() => undefined));
      const statuses = (await deadline(all, 20_000, "orphan exits")).map((e) => e.status);
      assert.deepEqual(statuses, pids.map(() => 137));
    } finally {
      reaper.close();
    }
  },
  sanitize,
);
