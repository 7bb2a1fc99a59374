/**
 * containerd's `binary://` logging protocol: the logger runs with fd 3 = the process's stdout,
 * fd 4 = its stderr, fd 5 = a "wait" pipe it writes one byte to (or closes) once ready.
 *
 * `Deno.Command` cannot hand extra descriptors to a child, so the three pipes are FIFOs in a
 * private temporary directory and `/bin/sh` opens them as fds 3, 4 and 5 before it `exec`s the
 * logger.
 *
 * @module
 */

import { close, mkfifo, O, open, readFd } from "./libc.ts";
import { FdStream } from "./fd_stream.ts";
import { Canceller, POLLIN, waitFd } from "./poll.ts";
import { processStartTime } from "./proc_stat.ts";
import type { Reaper } from "./reaper.ts";
import { adoptChild } from "./adopted_child.ts";

/**
 * What {@linkcode BinaryLogger.start} needs.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { BinaryLoggerOptions } from "@skiff/shim/linux";
 * // From `binary-v2:///usr/bin/my-logger?tag=web`:
 * const options: BinaryLoggerOptions = {
 *   path: "/usr/bin/my-logger",
 *   args: ["tag", "web"],
 *   requireReady: true,
 *   containerId: "web",
 *   namespace: "default",
 * };
 * strictEqual(options.reaper, undefined); // spawned directly
 * ```
 */
export interface BinaryLoggerOptions {
  /** Absolute path of the logging binary. */
  path: string;
  /** Arguments, from the URI's query as `k v k2 v2`. */
  args: string[];
  /** `binary-v2`: the logger must write one byte to fd 5; EOF alone is an error. */
  requireReady: boolean;
  /** Exported as CONTAINER_ID. */
  containerId: string;
  /** Exported as CONTAINER_NAMESPACE. */
  namespace: string;
  /** Spawns through this reaper when given, so its exit is never mistaken for an orphan's. */
  reaper?: Reaper;
  /** How long {@linkcode BinaryLogger.close} waits for the logger to exit before SIGKILL. */
  exitTimeoutMs?: number;
}

/**
 * A running logger as a live upgrade hands it to the next code ({@linkcode BinaryLogger.adopt}):
 * the logger process stays the shim's child across execve; the descriptors of its pipes are
 * carried with the process's stdio.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { BinaryLoggerCarry } from "@skiff/shim/linux";
 * const carry: BinaryLoggerCarry = {
 *   path: "/usr/bin/my-logger",
 *   pid: 4242,
 *   startTime: 51234,
 *   dir: "/tmp/skiff-logger-x1",
 *   exitTimeoutMs: 12_000,
 * };
 * strictEqual(carry.pid, 4242);
 * ```
 */
export interface BinaryLoggerCarry {
  /** The logging binary, for messages. */
  path: string;
  /** The logger's pid. */
  pid: number;
  /** Its start time in clock ticks since boot: with the pid, it names the process. */
  startTime: number;
  /** The directory of its FIFOs, removed once it has exited. */
  dir: string;
  /** {@linkcode BinaryLoggerOptions.exitTimeoutMs}. */
  exitTimeoutMs: number;
  /** Set when the logger had exited already: its exit code. */
  exitCode?: number;
}

/** The logger process: a Deno child, or one adopted after a live upgrade. */
interface LoggerProcess {
  readonly pid: number;
  readonly status: Promise<Deno.CommandStatus>;
  /** Its status once known (set when `status` settles). */
  exited?: Deno.CommandStatus;
  kill(): void;
}

// Positional parameters keep the FIFO paths out of the logger's environment.
const LAUNCHER = 'o=$1 e=$2 w=$3; shift 3; exec "$@" 3<"$o" 4<"$e" 5>"$w"';

/**
 * A running logging binary and the writers for the process's stdout and stderr.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { BinaryLogger } from "@skiff/shim/linux";
 * // A logger in the binary-v2 style: signals ready on fd 5, copies fd 3 into the file it is given.
 * const dir = Deno.makeTempDirSync();
 * const path = `${dir}/my-logger`;
 * Deno.writeTextFileSync(path, '#!/bin/sh\nprintf x >&5; exec 5>&-; cat <&3 > "$2"\n');
 * Deno.chmodSync(path, 0o755);
 * const logger = await BinaryLogger.start({
 *   path,
 *   args: ["out", `${dir}/out.log`],
 *   requireReady: true,
 *   containerId: "web",
 *   namespace: "default",
 * });
 * await logger.stdout.write(new TextEncoder().encode("hello\n"));
 * await logger.close(); // closes the pipes and waits for the logger to exit
 * strictEqual(Deno.readTextFileSync(`${dir}/out.log`), "hello\n");
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export class BinaryLogger {
  /** Writer for the process's stdout (the logger's fd 3). */
  readonly stdout: FdStream;
  /** Writer for the process's stderr (the logger's fd 4). */
  readonly stderr: FdStream;
  #path: string;
  #child: LoggerProcess;
  #dir: string;
  #exitTimeoutMs: number;
  #closed: Promise<void> | undefined;

  private constructor(
    path: string,
    stdout: FdStream,
    stderr: FdStream,
    child: LoggerProcess,
    dir: string,
    exitTimeoutMs: number,
  ) {
    this.#path = path;
    this.stdout = stdout;
    this.stderr = stderr;
    this.#child = child;
    this.#dir = dir;
    this.#exitTimeoutMs = exitTimeoutMs;
  }

  /**
   * Starts the logger and waits until it is ready (one byte or EOF on its wait pipe).
   *
   * @param options see {@linkcode BinaryLoggerOptions}
   */
  static async start(options: BinaryLoggerOptions): Promise<BinaryLogger> {
    const what = `binary logger "${options.path}"`;
    // sh would report a missing binary only as an early EOF, which binary:// reads as "ready".
    let info: Deno.FileInfo;
    try {
      info = await Deno.stat(options.path);
    } catch (e) {
      throw new Error(`start ${what}: ${(e as Error).message}`);
    }
    if (!info.isFile || ((info.mode ?? 0) & 0o111) === 0) {
      throw new Error(`start ${what}: not an executable file`);
    }
    const dir = await Deno.makeTempDir({ prefix: "skiff-logger-" });
    const fds: number[] = [];
    let child: Deno.ChildProcess | undefined;
    try {
      for (const name of ["stdout", "stderr", "wait"]) mkfifo(`${dir}/${name}`, 0o600);
      // O_RDWR opens of a FIFO never block, and make the logger's O_RDONLY opens not block.
      const outRw = open(`${dir}/stdout`, O.RDWR | O.NONBLOCK);
      fds.push(outRw);
      const errRw = open(`${dir}/stderr`, O.RDWR | O.NONBLOCK);
      fds.push(errRw);
      // A reader on the wait FIFO lets the logger's write-only open proceed.
      const wait = open(`${dir}/wait`, O.RDONLY | O.NONBLOCK);
      fds.push(wait);
      const cmd = new Deno.Command("/bin/sh", {
        args: [
          "-c",
          LAUNCHER,
          "skiff-logger",
          `${dir}/stdout`,
          `${dir}/stderr`,
          `${dir}/wait`,
          options.path,
          ...options.args,
        ],
        env: { CONTAINER_ID: options.containerId, CONTAINER_NAMESPACE: options.namespace },
        stdin: "null",
        stdout: "null",
        stderr: "null",
      });
      child = options.reaper ? options.reaper.spawn(cmd) : cmd.spawn();
      await waitReady(wait, child, options.requireReady, what);
      // Now that the logger holds the read ends, keep write-only ends, so a dead logger gives
      // EPIPE instead of a pipe that silently fills up.
      const out = open(`${dir}/stdout`, O.WRONLY | O.NONBLOCK);
      fds.push(out);
      const err = open(`${dir}/stderr`, O.WRONLY | O.NONBLOCK);
      fds.push(err);
      for (const fd of [outRw, errRw, wait]) close(fd);
      const spawned = child;
      const process: LoggerProcess = {
        pid: spawned.pid,
        status: spawned.status,
        kill: () => spawned.kill("SIGKILL"),
      };
      spawned.status.then((s) => process.exited = s);
      return new BinaryLogger(
        options.path,
        new FdStream(out, `${what} stdout`),
        new FdStream(err, `${what} stderr`),
        process,
        dir,
        options.exitTimeoutMs ?? 12_000,
      );
    } catch (e) {
      for (const fd of fds) close(fd);
      if (child) {
        try {
          child.kill("SIGKILL");
        } catch { /* already exited */ }
        await child.status;
      }
      await Deno.remove(dir, { recursive: true }).catch(() => {});
      throw e;
    }
  }

  /**
   * Continues, in the code a live upgrade started, a logger {@linkcode BinaryLogger.carry}
   * handed over: `stdout` and `stderr` write to its pipes (the carried descriptors), and its
   * exit comes from `reaper`, which must not have reaped anything since the upgrade yet (one
   * started with `held: true`, released after this).
   *
   * @param carry what the previous code handed over
   * @param stdout the writer for its fd 3 (the carried descriptor)
   * @param stderr the writer for its fd 4 (the carried descriptor)
   * @param reaper the shim's reaper, which reports the logger's exit
   * @example Usage
   * ```ts ignore
   * const logger = BinaryLogger.adopt(carry, new FdStream(outFd, "stdout"), new FdStream(errFd, "stderr"), reaper);
   * ```
   */
  static adopt(
    carry: BinaryLoggerCarry,
    stdout: FdStream,
    stderr: FdStream,
    reaper: Pick<Reaper, "onExit">,
  ): BinaryLogger {
    // Exited before the upgrade, or reaped since by the previous code's Deno: reported gone.
    const adopted = adoptChild(carry.pid, carry.startTime, reaper, carry.exitCode);
    const child: LoggerProcess = {
      pid: carry.pid,
      status: adopted.status.then((s) => child.exited = s),
      kill: () => adopted.kill("SIGKILL"),
    };
    return new BinaryLogger(carry.path, stdout, stderr, child, carry.dir, carry.exitTimeoutMs);
  }

  /**
   * What the next code needs to continue this logger after a live upgrade (the descriptors of
   * {@linkcode BinaryLogger.stdout} and {@linkcode BinaryLogger.stderr} are carried with the
   * process's stdio).
   *
   * @throws {Error} when the logger is being closed
   */
  carry(): BinaryLoggerCarry {
    if (this.#closed) {
      throw new Error(`binary logger "${this.#path}" (pid ${this.#child.pid}) is being closed`);
    }
    const exited = this.#child.exited;
    const startTime = exited ? undefined : processStartTime(this.#child.pid);
    return {
      path: this.#path,
      pid: this.#child.pid,
      startTime: startTime ?? 0,
      dir: this.#dir,
      exitTimeoutMs: this.#exitTimeoutMs,
      // Gone without Deno's status yet: it exited, how is unknown.
      ...(exited || startTime === undefined ? { exitCode: exited?.code ?? 255 } : {}),
    };
  }

  /** The logger's exit status. */
  get status(): Promise<Deno.CommandStatus> {
    return this.#child.status;
  }

  /**
   * Closes stdout and stderr (the logger sees EOF), waits for it to exit (SIGKILL after
   * `exitTimeoutMs`) and removes the FIFOs; idempotent.
   */
  close(): Promise<void> {
    this.#closed ??= (async () => {
      await Promise.all([this.stdout.close(), this.stderr.close()]);
      let timer: ReturnType<typeof setTimeout> | undefined;
      const timeout = new Promise<"timeout">((resolve) => {
        timer = setTimeout(() => resolve("timeout"), this.#exitTimeoutMs);
      });
      const outcome = await Promise.race([this.#child.status, timeout]);
      clearTimeout(timer);
      if (outcome === "timeout") {
        try {
          this.#child.kill();
        } catch { /* exited meanwhile */ }
        await this.#child.status;
      }
      await Deno.remove(this.#dir, { recursive: true }).catch(() => {});
    })();
    return this.#closed;
  }
}

/** Waits for one byte or EOF on the wait FIFO, or fails when the logger exits first. */
async function waitReady(
  fd: number,
  child: Deno.ChildProcess,
  requireReady: boolean,
  what: string,
): Promise<void> {
  const exited = new Canceller();
  let status: Deno.CommandStatus | undefined;
  child.status.then((s) => {
    status = s;
    exited.cancel();
  });
  try {
    const buf = new Uint8Array(1);
    // Until the logger opens fd 5, poll reports nothing, so a premature EOF cannot be seen.
    while (await waitFd(fd, POLLIN, exited)) {
      const n = readFd(fd, buf, `${what} wait pipe`);
      if (n === null) continue;
      if (n === 1) return;
      if (requireReady) throw new Error(`${what} closed its wait pipe without signalling ready`);
      return;
    }
    // Exited: a byte or EOF may still be waiting in the pipe.
    const n = readFd(fd, buf, `${what} wait pipe`);
    if (n === 1 || (n === 0 && !requireReady && status?.success)) return;
    throw new Error(`${what} exited with ${status?.code ?? "unknown status"} before it was ready`);
  } finally {
    exited.close();
  }
}
