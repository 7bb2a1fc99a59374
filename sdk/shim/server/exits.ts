/**
 * Exit routing: which process an exit belongs to, and when its `/tasks/exit` goes out.
 *
 * Exits come from two places. The reaper reports every re-parented process that exits (runc's
 * inits and execs); {@link ExitRouter} matches those to the processes it knows by pid and start
 * time, and keeps the ones that arrive while a process is being started in an
 * {@link ExitWindow} until that process's pid is known. A runtime that reports an exit itself
 * ({@link RuntimeProcess.exited}: a gVisor sub-container's `runsc wait`, an agent's or a VM
 * guest's process) is awaited instead, and its pid is never matched against reaped exits.
 *
 * Delivery keeps containerd's order: `/tasks/start` (or `/tasks/exec-started`) before
 * `/tasks/exit`, every exec's exit before its init's, the init's exit after any Kill of it has
 * been answered, and after an exec mid-start has settled.
 *
 * @module
 */

import { timestampOf } from "../../../proto/shim_wire.ts";
import type { EventPublisher } from "./events.ts";
import { ExitWindow } from "./exit_window.ts";
import { isExitOf } from "../../linux/reaper.ts";
import type { Logger } from "../logger.ts";
import type { ReapedExit, ShimPlatform } from "./platform.ts";
import type { ProcessExitInfo, ShimProcess } from "./process.ts";
import type { ContainerRuntime, RuntimeProcess } from "../runtime.ts";

/** Longest an init's exit waits for a Kill reply of that init ({@link RoutedContainer.initKills}). */
const KILL_REPLY_WAIT_MS = 10_000;

/**
 * Longest a start keeps the exits of processes started since it began unreaped
 * ({@link ShimPlatform.holdExitsSince}); a runtime's create or exec takes well under this.
 */
const HOLD_MAX_MS = 10_000;

/** Longest a failed runtime exit report waits for the reaper's exit of the same pid. */
const REAPED_FALLBACK_MS = 2_000;

/**
 * Longest a runtime-reported exit waits for the process's output to reach containerd's ends.
 * Bounded: something outside the process (a child it left behind) may hold its output open.
 */
const OUTPUT_BEFORE_EXIT_MS = 2_000;

/**
 * A reaped exit (runc, crun) needs no fixed bound: its pipes tell how much of the process's
 * output is still on its way, and the wait lasts while that moves (`ProcessIo.landed`). A
 * handle without `landed` waits this long for its output's end.
 */
const OUTPUT_BEFORE_REAPED_EXIT_MS = 500;

/**
 * A container as exit routing sees it (`Container` satisfies it): its processes, its runtime
 * (to kill what outlives the init) and the state the init's exit waits on.
 */
export interface RoutedContainer {
  /** Container id. */
  readonly id: string;
  /** The runtime, to kill the processes that outlive the init. */
  readonly runtime: Pick<ContainerRuntime, "kill">;
  /** The init process. */
  readonly init: ShimProcess;
  /** Execs by id. */
  readonly execs: ReadonlyMap<string, ShimProcess>;
  /** Whether the init shares its pid namespace (read from the bundle's spec once). */
  sharesPidNamespace(): Promise<boolean>;
  /** Kill RPCs of the init still being answered; the init's exit waits for them. */
  readonly initKills: ReadonlySet<Promise<void>>;
  /** Execs that have started and not yet exited. */
  runningExecs(): ShimProcess[];
}

/** What the router needs from the service it routes for. */
export interface ExitRouterDeps {
  /** Reaped exits, start times and the boot clock. */
  platform: Pick<ShimPlatform, "onExit" | "startTimeOf" | "bootTicks" | "holdExitsSince">;
  /** Where `/tasks/exit` goes. */
  events: Pick<EventPublisher, "publish">;
  /** Logger. */
  logger: Logger;
  /** The containers currently served (looked up on every reaped exit). */
  containers(): Iterable<RoutedContainer>;
}

/**
 * How a process comes to run, for {@link ExitRouter.track}: the runtime's create of an init,
 * its Start or restore, or an exec's start.
 */
export interface ProcessLaunch {
  /**
   * The runtime's create of an init, which runs only at Start: the process stays `created`.
   * Otherwise it runs from now on (`running`).
   */
  readonly creates?: boolean;
  /**
   * Asks the runtime to create, start, restore or exec the process; resolves once its I/O is
   * ready with what the runtime reported, or with nothing when the pid is known already (Start
   * of a created init).
   */
  run(): Promise<RuntimeProcess | void>;
  /** Runs once the pid is known, before the process is announced (its OOM watch, its cgroup). */
  prepare?(): Promise<void>;
  /**
   * Makes the process known: lists the container and publishes `/tasks/create`, or publishes
   * `/tasks/start` or `/tasks/exec-started`. Synchronous, so no exit is delivered in between.
   */
  announce(): void;
}

/**
 * Routes exits to the processes of the containers a Task service serves.
 *
 * @example Usage
 * ```ts ignore
 * const exits = new ExitRouter({ platform, events, logger, containers: () => map.values() });
 * await exits.track(container, exec, {
 *   run: () => runtime.exec(id, execId, spec, { io }),
 *   announce: () => events.publish("/tasks/exec-started", "containerd.events.TaskExecStarted", {
 *     containerId: id, execId, pid: exec.pid,
 *   }),
 * });
 * ```
 */
export class ExitRouter {
  #d: ExitRouterDeps;
  /** Processes being started whose pid is not known yet; see {@link ExitWindow}. */
  #windows = new Set<ExitWindow>();
  /** Execs whose exit has been claimed (their exit event may still be on its way). */
  #claimed = new WeakSet<ShimProcess>();
  /** Containers whose init's exit has been taken in (its event may still be on its way). */
  #initExits = new WeakSet<RoutedContainer>();
  /** Reaped exits of processes whose runtime reports their exit, kept for a failed report. */
  #aside = new WeakMap<ShimProcess, PromiseWithResolvers<ReapedExit>>();
  #asideExits = new WeakMap<ShimProcess, ReapedExit>();
  #unsubscribe: () => void;
  #settling = 0;

  /**
   * Subscribes to reaped exits.
   *
   * @param deps platform, events, logger and the served containers
   */
  constructor(deps: ExitRouterDeps) {
    this.#d = deps;
    this.#unsubscribe = deps.platform.onExit((e) => this.#onExit(e));
  }

  /** Stops listening for reaped exits. */
  close(): void {
    this.#unsubscribe();
  }

  /**
   * Whether `c`'s init has exited as far as the shim knows: its exit is taken in, though its
   * event may wait (for an exec mid-start, a Kill reply, the last output).
   *
   * @param c the container
   */
  /**
   * Exits taken in and not yet recorded and published (waiting for output, execs or kills): a
   * live upgrade waits for none.
   */
  get settling(): number {
    return this.#settling;
  }

  initExitTaken(c: RoutedContainer): boolean {
    return this.#initExits.has(c);
  }

  /**
   * Every process comes to run through here: the init's create, its Start or restore, an exec's
   * start. It opens an {@link ExitWindow} before the runtime is asked (the process may exit,
   * and be reaped, before its pid is known), holds the process's exits back until it is
   * announced (containerd requires `/tasks/create` or `/tasks/start` before `/tasks/exit`),
   * records its pid and start time, and then hands over the exit the window kept for it, or
   * awaits the exit its runtime reports. Until the pid and start time are read, the platform
   * keeps processes started since the window opened unreaped ({@link ShimPlatform.holdExitsSince}),
   * so a pid that is reused meanwhile cannot lend this process another's start time.
   *
   * @param c the container, listed by the time `launch.announce` returns
   * @param p its init or exec
   * @param launch the runtime's part and the announcement
   */
  async track(c: RoutedContainer, p: ShimProcess, launch: ProcessLaunch): Promise<void> {
    p.beginStart();
    const window = new ExitWindow(this.#d.platform.bootTicks?.());
    const release = this.#hold(window);
    this.#windows.add(window);
    let known = false;
    try {
      try {
        const rp = await launch.run();
        if (rp) {
          // A pid the runtime reports with its own exit may not be a host pid: no start time.
          p.started(rp, rp.exited ? undefined : this.#d.platform.startTimeOf?.(rp.pid));
          known = true;
        }
      } finally {
        // Pid and start time are recorded: an exit held back is routed by them from here on
        // (to the window until the process is announced).
        release();
      }
      await launch.prepare?.();
      if (!launch.creates) p.markStarted();
      launch.announce();
    } finally {
      this.#windows.delete(window);
      p.endStart();
    }
    if (known) this.#takeEarlyExit(c, p, window);
  }

  /**
   * Asks the platform to keep the processes started from `window`'s opening unreaped until the
   * returned function is called: one that exits before its pid is read keeps that pid, so the
   * start time read for it is its own (under pid reuse it could be a later process's, whose exit
   * would then be taken for it). Bounded by {@link HOLD_MAX_MS}: a start that hangs must not
   * hold other processes' exits back; the window still catches what is reaped after that.
   */
  #hold(window: ExitWindow): () => void {
    const since = window.openedAt;
    const end = since === undefined ? undefined : this.#d.platform.holdExitsSince?.(since);
    if (!end) return () => {};
    const timer = setTimeout(end, HOLD_MAX_MS);
    Deno.unrefTimer(timer);
    return () => {
      clearTimeout(timer);
      end();
    };
  }

  /**
   * Once `p`'s pid is known (and `c` is listed): awaits the exit its runtime reports, or hands
   * over the reaped exit `window` holds for it, if any.
   */
  /**
   * After a live upgrade: a carried process whose exit the runtime reports is awaited again
   * (one the shim reaps needs nothing: its exit is routed by pid).
   *
   * @param c its container
   * @param p the process
   * @param aside its reaped exit the previous code kept, if any
   */
  adopt(c: RoutedContainer, p: ShimProcess, aside?: ReapedExit): void {
    if (aside) this.#setAside(p, aside);
    const exited = p.runtime?.exited;
    if (exited && p.state !== "stopped") void this.#runtimeExit(c, p, exited);
  }

  #takeEarlyExit(c: RoutedContainer, p: ShimProcess, window: ExitWindow): void {
    const exited = p.runtime?.exited;
    if (exited) {
      void this.#runtimeExit(c, p, exited);
      return;
    }
    const early = window.take(p.pid, p.startTime);
    if (!early) return;
    if (p.execId === "") {
      void this.#initExited(c, early);
      return;
    }
    this.#claimed.add(p);
    void this.#execExited(c, p, early);
  }

  /**
   * Routes a reaped exit: to the known process it belongs to, else to every process being
   * started whose pid is not known yet. Synchronous, so no exit can slip between the two.
   */
  #onExit(exit: ReapedExit): void {
    if (this.#deliver(exit)) return;
    for (const window of this.#windows) window.add(exit);
  }

  /** Hands `exit` to the live processes it is the exit of; false when there are none. */
  #deliver(exit: ReapedExit): boolean {
    const inits: RoutedContainer[] = [];
    for (const c of this.#d.containers()) {
      // Several inits can share a pid (gVisor: a pod's containers run in the sandbox's
      // process); when it exits, they all have.
      const init = c.init;
      if (init.pid !== 0 && !this.#initExits.has(c) && isExitOf(exit, init.pid, init.startTime)) {
        inits.push(c);
      }
      for (const p of c.execs.values()) {
        if (p.pid === 0 || p.state === "stopped" || this.#claimed.has(p)) continue;
        if (!isExitOf(exit, p.pid, p.startTime)) continue;
        if (p.runtime?.exited) {
          this.#setAside(p, exit);
          return true;
        }
        this.#claimed.add(p);
        void this.#execExited(c, p, exit);
        return true;
      }
    }
    for (const c of inits) {
      // The runtime reports this init's exit; the reaper's is kept for a failed report.
      if (c.init.runtime?.exited) this.#setAside(c.init, exit);
      else void this.#initExited(c, exit);
    }
    return inits.length > 0;
  }

  /**
   * A process whose runtime reports its exit. When that report fails (`runsc wait` once the
   * sandbox is gone), a reaped exit of its pid counts instead: one seen already, or one
   * within {@link REAPED_FALLBACK_MS}; else status 255.
   */
  async #runtimeExit(c: RoutedContainer, p: ShimProcess, exited: Promise<number>): Promise<void> {
    // Settling from the report's arrival (or failure) to its delivery: a live upgrade waits.
    const settled = exited.then(() => {}, () => {});
    void settled.then(() => this.#settling++);
    try {
      await this.#runtimeExitOf(c, p, exited);
    } finally {
      await settled;
      this.#settling--;
    }
  }

  async #runtimeExitOf(c: RoutedContainer, p: ShimProcess, exited: Promise<number>): Promise<void> {
    let status: number;
    try {
      status = await exited;
    } catch (e) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const late = await Promise.race([
        this.#reapedAside(p).promise,
        new Promise<undefined>((r) => timer = setTimeout(() => r(undefined), REAPED_FALLBACK_MS)),
      ]);
      clearTimeout(timer);
      if (late) status = late.status;
      else {
        this.#d.logger.error("the runtime's exit report failed; reporting status 255", {
          id: c.id,
          exec: p.execId,
          error: (e as Error).message,
        });
        status = 255;
      }
    }
    const exit = { status, exitedAt: new Date() };
    // A runtime that carries the output itself (an agent's stream calls) races its exit report
    // against the last bytes: they get longer to land than a local copy.
    if (p.execId === "") return await this.#initExited(c, exit, OUTPUT_BEFORE_EXIT_MS);
    if (this.#claimed.has(p)) return;
    this.#claimed.add(p);
    await this.#execExited(c, p, exit, OUTPUT_BEFORE_EXIT_MS);
  }

  /** A reaped exit of a process whose exit the runtime reports, kept for a failed report. */
  #setAside(p: ShimProcess, exit: ReapedExit): void {
    this.#asideExits.set(p, exit);
    this.#reapedAside(p).resolve(exit);
  }

  /**
   * The reaped exit kept for a process whose exit the runtime reports (a live upgrade carries
   * it: the runtime's report may still fail in the next code).
   *
   * @param p the process
   */
  reapedAside(p: ShimProcess): ReapedExit | undefined {
    return this.#asideExits.get(p);
  }

  #reapedAside(p: ShimProcess): PromiseWithResolvers<ReapedExit> {
    let aside = this.#aside.get(p);
    if (!aside) this.#aside.set(p, aside = Promise.withResolvers());
    return aside;
  }

  async #execExited(
    c: RoutedContainer,
    p: ShimProcess,
    exit: ProcessExitInfo,
    outputWaitMs?: number,
  ): Promise<void> {
    this.#settling++;
    try {
      await p.startSettled();
      await outputLanded(p, outputWaitMs);
      p.markExited(exit);
      this.#publishExit(c, p);
    } finally {
      this.#settling--;
    }
  }

  /**
   * Takes in the init's exit (once) and publishes it when containerd may see it: after the
   * start event, after every exec mid-start has settled, after the execs' exits, and after any
   * Kill of the init has been answered.
   *
   * @param c the container
   * @param exit how its init ended
   * @param outputWaitMs longest its output may still take to land after a runtime-reported
   *   exit; none for a reaped one (see {@link outputLanded})
   */
  async #initExited(
    c: RoutedContainer,
    exit: ProcessExitInfo,
    outputWaitMs?: number,
  ): Promise<void> {
    // Reported once; a second report (a late one) changes nothing.
    if (this.#initExits.has(c)) return;
    this.#initExits.add(c);
    this.#settling++;
    try {
      await this.#initExitSettle(c, exit, outputWaitMs);
    } finally {
      this.#settling--;
    }
  }

  async #initExitSettle(
    c: RoutedContainer,
    exit: ProcessExitInfo,
    outputWaitMs: number | undefined,
  ): Promise<void> {
    const p = c.init;
    await p.startSettled();
    // Like the Go shim, hold the init's exit while an exec is mid-start (containerd #10589):
    // until that Start settles, Exec still creates and Start refuses (FailedPrecondition).
    await Promise.all([...c.execs.values()].map((e) => e.startSettled()));
    // Without a pid namespace of its own, the init's other processes outlive it: kill them
    // (the Go shim does too). Execs die with a private one; kill them anyway if they did not.
    if (
      c.runningExecs().length > 0 ||
      await c.sharesPidNamespace()
    ) {
      await c.runtime.kill(c.id, 9, { all: true }).catch(() => {});
      await Promise.race([
        Promise.all(c.runningExecs().map((e) => e.exited)),
        new Promise((r) => setTimeout(r, 5_000)),
      ]);
    }
    await killsAnswered(c);
    await outputLanded(p, outputWaitMs);
    p.markExited(exit);
    // The init's exit is always the last exit published for a container.
    this.#publishExit(c, p);
  }

  #publishExit(c: RoutedContainer, p: ShimProcess): void {
    const exit = p.exit!;
    this.#d.events.publish("/tasks/exit", "containerd.events.TaskExit", {
      containerId: c.id,
      id: p.id,
      pid: p.pid,
      exitStatus: exit.status,
      exitedAt: timestampOf(exit.exitedAt),
    });
    this.#d.logger.debug("process exited", { id: c.id, exec: p.execId, status: exit.status });
  }
}

/**
 * Waits for `p`'s output to land before its exit is seen: containerd's client may close its
 * FIFOs as soon as it has the exit (containerd 1.6's task Delete closes them before it waits for
 * its copies; 2.x waits for their end), so output still on its way is lost. A terminal's last
 * line, read from the pty after the exit, raced it too.
 *
 * @param ms for a runtime-reported exit, how long its output's copies may take to end; none for a
 *   reaped exit, whose pipes say what is still on its way
 */
async function outputLanded(p: ShimProcess, ms: number | undefined): Promise<void> {
  if (!p.io) return;
  if (ms === undefined && p.io.landed) await p.io.landed().catch(() => {});
  else await p.io.drain(ms ?? OUTPUT_BEFORE_REAPED_EXIT_MS).catch(() => {});
}

/**
 * Waits until no Kill of `c`'s init is being answered, then one more turn of the event loop
 * so the last reply is written before the exit that may close its connection goes out.
 * Bounded: a runtime's kill that hangs must not hold the exit forever.
 */
async function killsAnswered(c: RoutedContainer): Promise<void> {
  if (c.initKills.size === 0) return;
  let timer: ReturnType<typeof setTimeout> | undefined;
  await Promise.race([
    (async () => {
      while (c.initKills.size > 0) await Promise.all(c.initKills);
    })(),
    new Promise((r) => timer = setTimeout(r, KILL_REPLY_WAIT_MS)),
  ]);
  clearTimeout(timer);
  await new Promise((r) => setTimeout(r, 0));
}
