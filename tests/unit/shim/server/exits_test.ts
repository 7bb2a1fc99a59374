// Unit tests of ExitRouter: every start goes through track(), which owns the window, the held
// exits and the hand-over. Fakes stand in for the reaper and the container (the task-service
// tests and the integration tests cover the same paths through the service and real runc).
import assert from "node:assert/strict";
import { ExitRouter, type RoutedContainer } from "../../../../sdk/shim/server/exits.ts";
import { ShimProcess } from "../../../../sdk/shim/server/process.ts";
import type { ReapedExit } from "../../../../sdk/shim/server/platform.ts";
import { Logger } from "../../../../sdk/shim/logger.ts";

const STDIO = { stdin: "", stdout: "", stderr: "", terminal: false };

/** The kernel and the shim's reaper as the router sees them: pids, start times, holds. */
class Reaper {
  ticks = 1000;
  starts = new Map<number, number>();
  /** Open holds (ShimPlatform.holdExitsSince). */
  holds = new Set<{ since: number }>();
  #zombies: ReapedExit[] = [];
  #listeners = new Set<(e: ReapedExit) => void>();
  onExit = (l: (e: ReapedExit) => void) => {
    this.#listeners.add(l);
    return () => this.#listeners.delete(l);
  };
  startTimeOf = (pid: number) => this.starts.get(pid);
  /** Now: a tick after the last process started. */
  bootTicks = () => ++this.ticks;
  holdExitsSince = (since: number) => {
    const hold = { since };
    this.holds.add(hold);
    return () => {
      if (this.holds.delete(hold)) this.#flush();
    };
  };
  /** A process starts with `pid` one tick later than the last. */
  spawn(pid: number): number {
    assert.ok(this.isFree(pid), `pid ${pid} is in use`);
    this.starts.set(pid, ++this.ticks);
    return pid;
  }
  /** Whether the kernel could hand `pid` to a new process: not running, not a zombie. */
  isFree(pid: number): boolean {
    return !this.starts.has(pid);
  }
  /** `pid` exits; reaped at once unless a hold covers its start (a zombie keeps its pid). */
  reap(pid: number, status: number, startTime = this.starts.get(pid)) {
    const exit = { pid, status, startTime, exitedAt: new Date() };
    if (startTime !== undefined && [...this.holds].some((h) => startTime >= h.since)) {
      this.#zombies.push(exit);
      return;
    }
    this.#deliver(exit);
  }
  #flush() {
    const zombies = this.#zombies;
    this.#zombies = [];
    for (const z of zombies) this.reap(z.pid, z.status, z.startTime);
  }
  #deliver(exit: ReapedExit) {
    if (exit.startTime === this.starts.get(exit.pid)) this.starts.delete(exit.pid);
    for (const l of this.#listeners) l(exit);
  }
}

function container(id: string, kills: (string | number)[] = []): RoutedContainer & {
  execs: Map<string, ShimProcess>;
  initKills: Set<Promise<void>>;
} {
  const c = {
    id,
    runtime: {
      kill: (cid: string, sig: number) => {
        kills.push(`${cid} ${sig}`);
        return Promise.resolve();
      },
    },
    init: new ShimProcess(id, "", STDIO),
    execs: new Map<string, ShimProcess>(),
    initKills: new Set<Promise<void>>(),
    sharesPidNamespace: () => Promise.resolve(false),
    runningExecs: () => [...c.execs.values()].filter((p) => p.pid !== 0 && p.state !== "stopped"),
  };
  return c;
}

function setup() {
  const reaper = new Reaper();
  const events: string[] = [];
  const listed: RoutedContainer[] = [];
  const router = new ExitRouter({
    platform: reaper,
    events: {
      publish: (topic: string, _t: string, msg: unknown) => {
        const m = msg as { id?: string; exitStatus?: number };
        events.push(topic === "/tasks/exit" ? `exit ${m.id} ${m.exitStatus}` : topic);
      },
    },
    logger: new Logger(),
    containers: () => listed,
  });
  return { reaper, events, listed, router };
}

/** Lets the router's asynchronous deliveries run. */
const settle = () => new Promise((r) => setTimeout(r, 5));

Deno.test("track: an init reaped before its pid is known gets its exit once, after /tasks/create", async () => {
  const { reaper, events, listed, router } = setup();
  const c = container("c1");
  await router.track(c, c.init, {
    creates: true,
    run: () => {
      const pid = reaper.spawn(40);
      reaper.reap(40, 3); // dies inside the runtime's create, before create returns its pid
      return Promise.resolve({ pid });
    },
    announce: () => {
      listed.push(c);
      events.push("/tasks/create");
    },
  });
  assert.equal(c.init.state, "created");
  assert.equal(c.init.pid, 40);
  await c.init.exited;
  await settle();
  assert.deepEqual(events, ["/tasks/create", "exit c1 3"]);
  assert.equal(router.initExitTaken(c), true);
  router.close();
});

Deno.test("track: an older process's exit with the same pid is not taken (pid reuse)", async () => {
  const { reaper, events, listed, router } = setup();
  const c = container("c1");
  reaper.spawn(41); // an unrelated earlier pid 41, started before the window
  const oldStart = reaper.starts.get(41)!;
  await router.track(c, c.init, {
    creates: true,
    run: () => {
      reaper.reap(41, 9, oldStart); // the old 41 dies in the window...
      return Promise.resolve({ pid: reaper.spawn(41) }); // ...and 41 is ours now
    },
    announce: () => listed.push(c),
  });
  await settle();
  assert.equal(c.init.state, "created");
  assert.deepEqual(events, []);
  reaper.reap(41, 0);
  assert.equal((await c.init.exited).status, 0);
  router.close();
});

Deno.test("track: an exec reaped before its pid is read keeps its own exit when the pid is reused", async () => {
  const { reaper, events, listed, router } = setup();
  const c = container("c1");
  listed.push(c);
  await router.track(c, c.init, {
    creates: true,
    run: () => Promise.resolve({ pid: reaper.spawn(60) }),
    announce: () => {},
  });
  const e = c.execs.set("e1", new ShimProcess("c1", "e1", STDIO)).get("e1")!;
  let helper = false;
  await router.track(c, e, {
    run: () => {
      reaper.spawn(61);
      reaper.reap(61, 206); // the exec exits before the runtime's exec returns its pid...
      // ...and, were 61 reaped, the kernel could give it to the next process (a runtime helper).
      if (reaper.isFree(61)) helper = reaper.spawn(61) === 61;
      return Promise.resolve({ pid: 61 });
    },
    announce: () => events.push("/tasks/exec-started"),
  });
  if (helper) reaper.reap(61, 0); // the helper exits 0: it must not be taken for the exec
  assert.equal(helper, false, "pid 61 was freed while the exec's pid was not known yet");
  assert.equal((await e.exited).status, 206);
  await settle();
  assert.deepEqual(events, ["/tasks/exec-started", "exit e1 206"]);
  assert.equal(reaper.holds.size, 0);
  router.close();
});

Deno.test("track: the hold covers only the start; later processes are reaped at once", async () => {
  const { reaper, listed, router } = setup();
  const c = container("c1");
  listed.push(c);
  let held = 0;
  await router.track(c, c.init, {
    creates: true,
    run: () => {
      held = reaper.holds.size;
      return Promise.resolve({ pid: reaper.spawn(62) });
    },
    prepare: () => {
      // The pid and start time are read: the hold has ended before prepare.
      assert.equal(reaper.holds.size, 0);
      return Promise.resolve();
    },
    announce: () => {},
  });
  assert.equal(held, 1);
  reaper.reap(62, 4);
  assert.equal((await c.init.exited).status, 4);
  router.close();
});

Deno.test("track: an exit during prepare waits for the announcement", async () => {
  const { reaper, events, listed, router } = setup();
  const c = container("c1");
  listed.push(c);
  await router.track(c, c.init, {
    creates: true,
    run: () => Promise.resolve({ pid: reaper.spawn(42) }),
    prepare: () => Promise.resolve(),
    announce: () => events.push("/tasks/create"),
  });
  const e = c.execs.set("e1", new ShimProcess("c1", "e1", STDIO)).get("e1")!;
  await router.track(c, e, {
    run: () => Promise.resolve({ pid: reaper.spawn(43) }),
    prepare: async () => {
      reaper.reap(43, 5); // the exec is known by pid now, but not yet announced
      await settle();
    },
    announce: () => events.push("/tasks/exec-started"),
  });
  await e.exited;
  await settle();
  assert.deepEqual(events, ["/tasks/create", "/tasks/exec-started", "exit e1 5"]);
  assert.equal(e.state, "stopped");
  router.close();
});

Deno.test("track: a failed start closes its window and releases the held exits", async () => {
  const { reaper, events, listed, router } = setup();
  const c = container("c1");
  listed.push(c);
  await router.track(c, c.init, {
    creates: true,
    run: () => Promise.resolve({ pid: reaper.spawn(50) }),
    announce: () => {},
  });
  const e = c.execs.set("e1", new ShimProcess("c1", "e1", STDIO)).get("e1")!;
  await assert.rejects(
    router.track(c, e, { run: () => Promise.reject(new Error("exec failed")), announce: () => {} }),
    /exec failed/,
  );
  assert.equal(e.pid, 0);
  assert.equal(e.state, "created");
  assert.equal(reaper.holds.size, 0); // its hold ended too
  await e.startSettled(); // not held forever
  // The init's exit is not held by the failed exec either.
  reaper.reap(50, 0);
  await c.init.exited;
  await settle();
  assert.deepEqual(events, ["exit c1 0"]);
  router.close();
});

Deno.test("track: a runtime-reported exit wins; the reaped one of its pid is set aside", async () => {
  const { reaper, events, listed, router } = setup();
  const c = container("c1");
  const exit = Promise.withResolvers<number>();
  await router.track(c, c.init, {
    creates: true,
    run: () => Promise.resolve({ pid: 60, exited: exit.promise }),
    announce: () => listed.push(c),
  });
  assert.equal(c.init.startTime, undefined); // a guest pid: no host start time
  reaper.reap(60, 99); // an unrelated host pid 60
  await settle();
  assert.equal(c.init.state, "created");
  exit.resolve(7);
  assert.equal((await c.init.exited).status, 7);
  await settle();
  assert.deepEqual(events, ["exit c1 7"]);
  router.close();
});

Deno.test("track: a failed runtime exit report takes the reaped exit of the pid", async () => {
  const { reaper, events, listed, router } = setup();
  const c = container("c1");
  const exit = Promise.withResolvers<number>();
  await router.track(c, c.init, {
    creates: true,
    run: () => Promise.resolve({ pid: 61, exited: exit.promise }),
    announce: () => listed.push(c),
  });
  reaper.reap(61, 137);
  exit.reject(new Error("runsc wait: sandbox gone"));
  assert.equal((await c.init.exited).status, 137);
  await settle();
  assert.deepEqual(events, ["exit c1 137"]);
  router.close();
});

Deno.test("the init's exit goes out after its execs', after a Kill reply, once", async () => {
  const { reaper, events, listed, router } = setup();
  const kills: (string | number)[] = [];
  const c = container("c1", kills);
  listed.push(c);
  await router.track(c, c.init, {
    creates: true,
    run: () => Promise.resolve({ pid: reaper.spawn(70) }),
    announce: () => {},
  });
  await router.track(c, c.init, { run: () => Promise.resolve(), announce: () => {} });
  assert.equal(c.init.state, "running");
  const e = c.execs.set("e1", new ShimProcess("c1", "e1", STDIO)).get("e1")!;
  await router.track(c, e, {
    run: () => Promise.resolve({ pid: reaper.spawn(71) }),
    announce: () => {},
  });
  const reply = Promise.withResolvers<void>();
  c.initKills.add(reply.promise); // a Kill of the init still being answered
  reaper.reap(70, 143);
  reaper.reap(70, 143); // reported twice: taken once
  await settle();
  assert.equal(router.initExitTaken(c), true);
  assert.equal(c.init.state, "running"); // held: the exec still runs, the Kill is unanswered
  assert.deepEqual(kills, ["c1 9"]); // the exec outlived the init: killed, as the Go shim does
  reaper.reap(71, 137);
  await settle();
  assert.deepEqual(events, ["exit e1 137"]);
  c.initKills.delete(reply.promise);
  reply.resolve();
  await c.init.exited;
  await settle();
  assert.deepEqual(events, ["exit e1 137", "exit c1 143"]);
  router.close();
});

Deno.test("close: no exit is routed afterwards", async () => {
  const { reaper, events, listed, router } = setup();
  const c = container("c1");
  listed.push(c);
  await router.track(c, c.init, {
    creates: true,
    run: () => Promise.resolve({ pid: reaper.spawn(80) }),
    announce: () => {},
  });
  router.close();
  reaper.reap(80, 0);
  await settle();
  assert.equal(c.init.state, "created");
  assert.deepEqual(events, []);
});
