// The fakes of the Task service's unit tests (task_service_test.ts, task_service_exits_test.ts):
// a runtime and a platform that record what they are asked and report exits when told.
import { create } from "@bufbuild/protobuf";
import { type Any, AnySchema } from "@bufbuild/protobuf/wkt";
import { type Code, ConnectError } from "@connectrpc/connect";
import { TaskService } from "../../../../sdk/shim/server/task_service.ts";
import type { ReapedExit, ShimPlatform } from "../../../../sdk/shim/server/platform.ts";
import type { ContainerRuntime } from "../../../../sdk/shim/runtime.ts";
import { Logger } from "../../../../sdk/shim/logger.ts";
import { Shim } from "../../../../sdk/shim/shim.ts";

export class FakeRuntime implements ContainerRuntime {
  calls: string[] = [];
  constructor(private p: FakePlatform) {}
  /** With `exits`: each init's exit is reported by the runtime (RuntimeProcess.exited). */
  exits: Map<string, PromiseWithResolvers<number>> | undefined;
  create(id: string, o: { bundle: string }) {
    this.calls.push(`create ${id}`);
    const pid = this.p.spawned(this.p.fixedPid ?? this.p.nextPid++);
    this.p.pidFiles.set(`${o.bundle}/init.pid`, pid);
    this.p.duringStart?.(pid);
    if (!this.exits) return Promise.resolve({ pid });
    const exit = Promise.withResolvers<number>();
    this.exits.set(id, exit);
    return Promise.resolve({ pid, exited: exit.promise });
  }
  start(id: string) {
    this.calls.push(`start ${id}`);
    // A process that dies at once: its exit races the start event.
    if (this.p.dieOnStart) this.p.exit(this.p.pidOf(id), 0);
    return Promise.resolve();
  }
  /** Runs inside kill, before it returns (e.g. the signalled init exits meanwhile). */
  duringKill: (() => Promise<void>) | undefined;
  async kill(id: string, sig: number, o?: { all?: boolean }) {
    this.calls.push(`kill ${id} ${sig}${o?.all ? " all" : ""}`);
    await this.duringKill?.();
  }
  delete(id: string) {
    this.calls.push(`delete ${id}`);
    return Promise.resolve();
  }
  async exec(id: string, execId: string, _p: unknown, _o: unknown) {
    this.calls.push(`exec ${id}`);
    if (this.p.execGate) {
      // runc exec held up before it runs (runc-fp's delayExec), then failing on a dead init.
      await this.p.execGate;
      throw new Error("cannot exec in a stopped container");
    }
    const pid = this.p.spawned(this.p.execPids.shift() ?? this.p.nextPid++);
    this.p.pidFiles.set(`exec ${execId}`, pid);
    this.p.duringStart?.(pid);
    return { pid };
  }
  ps() {
    // Like runc's: reads the cgroup, so a process that left it is not listed.
    return Promise.resolve([...this.p.pidFiles.values()].filter((p) => !this.p.outOfCgroup.has(p)));
  }
  pause(id: string) {
    this.calls.push(`pause ${id}`);
    return Promise.resolve();
  }
  resume(id: string) {
    this.calls.push(`resume ${id}`);
    return Promise.resolve();
  }
  update() {
    return Promise.resolve();
  }
  checkpoint() {
    return Promise.reject(new Error("criu failed"));
  }
  restore(id: string, o: { bundle: string; imagePath: string; noSubreaper?: boolean }) {
    this.calls.push(`restore ${id} ${o.imagePath}${o.noSubreaper ? " no-subreaper" : ""}`);
    const pid = this.p.spawned(this.p.nextPid++);
    this.p.pidFiles.set(`${o.bundle}/init.pid`, pid);
    return Promise.resolve({ pid });
  }
}

export class FakePlatform implements ShimPlatform {
  nextPid = 100;
  pidFiles = new Map<string, number>();
  dieOnStart = false;
  fixedPid: number | undefined;
  outOfCgroup = new Set<number>();
  /** Pids handed to the next execs, in order (recycled pids); then nextPid. */
  execPids: number[] = [];
  /** When set, the runtime's exec waits for it and then fails. */
  execGate: Promise<void> | undefined;
  /** What each process's output drain waits for (its copies' end); done at once by default. */
  outputDone: Promise<void> = Promise.resolve();
  /** When set, the io handle has `landed` (as ProcessIo's), resolving with this. */
  outputLanded: Promise<void> | undefined;
  /** Runs inside the runtime's create/exec, once the new process has its pid. */
  duringStart: ((pid: number) => void) | undefined;
  /** Clock ticks since boot; every new process starts one tick later than the last. */
  ticks = 1000;
  /** Start times of live processes, as /proc would tell. */
  starts = new Map<number, number>();
  startTimeOf?: (pid: number) => number | undefined = (pid) => this.starts.get(pid);
  bootTicks?: () => number = () => this.ticks;
  #listeners = new Set<(e: ReapedExit) => void>();
  pidOf(id: string) {
    void id; // one container per test
    return [...this.pidFiles.entries()].find(([f]) => f.endsWith("/init.pid"))![1];
  }
  /** A new process got `pid` (a live pid is the same process: a gVisor sandbox's, shared). */
  spawned(pid: number): number {
    if (!this.starts.has(pid)) this.starts.set(pid, ++this.ticks);
    return pid;
  }
  /** Reaps `pid`: by default the live process that has it; `startTime` names another. */
  exit(pid: number, status: number, startTime = this.starts.get(pid)) {
    if (startTime === this.starts.get(pid)) this.starts.delete(pid);
    const e: ReapedExit = { pid, status, exitedAt: new Date() };
    if (startTime !== undefined && this.startTimeOf) e.startTime = startTime;
    for (const l of this.#listeners) l(e);
  }
  spawn(cmd: Deno.Command) {
    return cmd.spawn();
  }
  onExit(l: (e: ReapedExit) => void) {
    this.#listeners.add(l);
    return () => this.#listeners.delete(l);
  }
  openIo() {
    const outputDone = () => this.outputDone;
    const landed = this.outputLanded;
    return Promise.resolve({
      io: {
        terminal: false,
        stdio: { stdin: "null", stdout: "null", stderr: "null" } as const,
        attach() {},
        streams: () => ({}),
      },
      ready: () => Promise.resolve(),
      handle: {
        closeStdin: () => Promise.resolve(),
        drain: async (ms?: number) => {
          let timer: ReturnType<typeof setTimeout> | undefined;
          await Promise.race([outputDone(), new Promise((r) => timer = setTimeout(r, ms))]);
          clearTimeout(timer);
        },
        ...(landed ? { landed: () => landed } : {}),
        close: () => Promise.resolve(),
      },
    });
  }
  mount() {
    return Promise.resolve();
  }
  unmount() {
    return Promise.resolve();
  }
  stats(): Promise<Any> {
    return Promise.resolve(create(AnySchema, {}));
  }
  watchOom() {
    return Promise.resolve({ close() {} });
  }
  kill(pid: number) {
    this.exit(pid, 137);
  }
}

export function setup() {
  const platform = new FakePlatform();
  const runtime = new FakeRuntime(platform);
  class TestShim extends Shim<{ x: number }> {
    readonly runtimeName = "io.containerd.test.v1";
    readonly options = { defaults: () => ({ x: 1 }) };
    runtime() {
      return runtime;
    }
  }
  const events: string[] = [];
  const exits: string[] = [];
  let shutdowns = 0;
  const svc = new TaskService({
    shim: new TestShim(),
    platform,
    events: {
      publish: (topic: string, _s: unknown, msg: unknown) => {
        events.push(topic);
        if (topic === "/tasks/exit") exits.push((msg as { id: string }).id);
      },
    },
    logger: new Logger(),
    namespace: "ns",
    onShutdown: () => shutdowns++,
  });
  return { svc, platform, runtime, events, exits, shutdowns: () => shutdowns };
}

export async function withBundle(fn: (bundle: string) => Promise<void>) {
  const bundle = await Deno.makeTempDir();
  try {
    await fn(bundle);
  } finally {
    await Deno.remove(bundle, { recursive: true });
  }
}

export function code(c: Code) {
  return (e: unknown) => e instanceof ConnectError && e.code === c;
}

export const spec: Any = create(AnySchema, {
  typeUrl: "types.containerd.io/opencontainers/runtime-spec/1/Process",
  value: new TextEncoder().encode(JSON.stringify({ args: ["true"], cwd: "/" })),
});

/** A promise's value, or "pending" when it has not settled within 20 ms. */
export async function settledOrPending<V>(p: Promise<V>): Promise<V | "pending"> {
  const pending = new Promise<"pending">((r) => setTimeout(() => r("pending"), 20));
  return await Promise.race([p, pending]);
}
