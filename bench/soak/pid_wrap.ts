/**
 * Forces the host's pid counter to wrap, over and over, so that pids get reused while a test
 * or soak runs: it moves `/proc/sys/kernel/ns_last_pid` close to `pid_max`, then forks short
 * processes until the counter is seen below where it was put (it went past `pid_max` and
 * restarted low). After a wrap the kernel hands out the lowest free pids again, so pids of
 * processes that exited since the previous wrap come back.
 *
 * Needs root in the host's pid namespace. The counter is host-wide: other processes' pids move
 * too, which is harmless (pid reuse is normal), only faster than usual.
 *
 * @example Usage
 * ```ts ignore
 * const w = new PidWrapper({ everyMs: 2000 });
 * w.start();
 * // ... spawn processes ...
 * await w.stop();
 * console.log(w.wraps);
 * ```
 *
 * @module
 */

const LAST_PID = "/proc/sys/kernel/ns_last_pid";
const PID_MAX = "/proc/sys/kernel/pid_max";

/**
 * The kernel's pid limit (`/proc/sys/kernel/pid_max`).
 *
 * @returns the highest pid plus one
 * @example Usage
 * ```ts ignore
 * console.log(pidMax()); // 32768
 * ```
 */
export function pidMax(): number {
  return Number(Deno.readTextFileSync(PID_MAX).trim());
}

/**
 * The last pid the kernel handed out in this pid namespace.
 *
 * @returns `/proc/sys/kernel/ns_last_pid`
 * @example Usage
 * ```ts ignore
 * console.log(lastPid());
 * ```
 */
export function lastPid(): number {
  return Number(Deno.readTextFileSync(LAST_PID).trim());
}

/**
 * Options of {@linkcode PidWrapper}.
 *
 * @example Usage
 * ```ts ignore
 * const o: PidWrapperOptions = { everyMs: 1000, margin: 150 };
 * ```
 */
export interface PidWrapperOptions {
  /** Pause between two forced wraps. Default 2000. */
  everyMs?: number;
  /** How far below `pid_max` the counter is put before churning. Default 200. */
  margin?: number;
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/**
 * Repeatedly forces the pid counter to wrap, and counts the wraps it saw happen.
 *
 * @example Usage
 * ```ts ignore
 * const w = new PidWrapper();
 * w.start();
 * await w.waitForWraps(1);
 * await w.stop();
 * ```
 */
export class PidWrapper {
  /** Wraps observed: the counter was seen below the value it was moved to. */
  wraps = 0;
  /** Forced wraps that were not observed within the churn bound (should stay 0). */
  misses = 0;
  readonly #everyMs: number;
  readonly #margin: number;
  #running = false;
  #loop: Promise<void> = Promise.resolve();
  #churn: Deno.ChildProcess | undefined;

  /** @param opts how often and from how close to `pid_max` */
  constructor(opts: PidWrapperOptions = {}) {
    this.#everyMs = opts.everyMs ?? 2000;
    this.#margin = opts.margin ?? 200;
  }

  /** Starts wrapping in the background; {@linkcode PidWrapper.stop} ends it. */
  start(): void {
    if (this.#running) return;
    this.#running = true;
    this.#loop = this.#run();
  }

  /** Stops after the current wrap and waits for the churn processes to end. */
  async stop(): Promise<void> {
    this.#running = false;
    await this.#loop;
  }

  /**
   * Waits until at least `n` wraps were observed, or `timeoutMs` passed.
   *
   * @param n wraps to wait for
   * @param timeoutMs give up after this long. Default 30000
   * @returns true when `n` wraps were observed
   */
  async waitForWraps(n: number, timeoutMs = 30_000): Promise<boolean> {
    const until = Date.now() + timeoutMs;
    while (this.wraps < n && Date.now() < until) await sleep(20);
    return this.wraps >= n;
  }

  /** Forces one wrap now and returns whether it was observed. */
  async wrapOnce(): Promise<boolean> {
    const max = pidMax();
    const target = max - this.#margin;
    Deno.writeTextFileSync(LAST_PID, String(target));
    // Enough forks to pass pid_max on their own, whatever else runs on the host.
    const forks = this.#margin + 100;
    const churn = new Deno.Command("/bin/sh", {
      args: ["-c", `n=0; while [ $n -lt ${forks} ]; do /bin/true; n=$((n+1)); done`],
      stdin: "null",
      stdout: "null",
      stderr: "null",
    }).spawn();
    this.#churn = churn;
    let seen = false;
    const done = churn.status.then(() => undefined);
    let finished = false;
    done.then(() => finished = true);
    for (;;) {
      const now = lastPid();
      // Below the start value after having been at or above it: it went past pid_max.
      if (now < target) {
        seen = true;
        break;
      }
      if (finished) {
        // One last look: the final forks may have wrapped after the previous read.
        seen = lastPid() < target;
        break;
      }
      await sleep(2);
    }
    await done;
    this.#churn = undefined;
    if (seen) this.wraps++;
    else this.misses++;
    return seen;
  }

  async #run(): Promise<void> {
    while (this.#running) {
      await this.wrapOnce();
      const until = Date.now() + this.#everyMs;
      while (this.#running && Date.now() < until) await sleep(20);
    }
  }
}
