/**
 * The stdio of a container process as containerd describes it (`CreateTaskRequest` /
 * `ExecProcessRequest`: `stdin`, `stdout`, `stderr`, `terminal`), wired to the OCI runtime
 * command that starts the process.
 *
 * @module
 */

import { close as closeFd, O, open, unreadBytes } from "./libc.ts";
import { FdStream } from "./fd_stream.ts";
import { BinaryLogger } from "./binary_logger.ts";
import { fifoPath } from "./stdio_uri.ts";
import { Pty } from "./pty.ts";
import { type ChildPipes, takeChildPipes } from "./child_pipes.ts";
import { type CopyProgress, OutputLanding } from "./output_landing.ts";
import { isPipe, setCloseOnExec } from "./descriptors.ts";
import type { Reaper } from "./reaper.ts";
import type { ProcessIoCarry } from "./process_io_carry.ts";
import {
  openOrThrow,
  openOutputs,
  type ProcessIoContext,
  type Sink,
  type StdioSpec,
} from "./stdio_targets.ts";

/**
 * How soon a FIFO's reader is looked at again after a write left it bytes to take: how finely
 * `OutputLanding` can tell when the reader last read (a reader gone for a while is not waited
 * for; see `UNREAD_FOR_MS` there).
 */
const READER_LOOK_MS = 200;

/**
 * `Deno.CommandOptions` stdio for the runtime command that starts the process: the shape of the
 * seam's `RuntimePipes.stdio` (sdk/shim/runtime.ts), which {@linkcode ProcessIo} fills. (It was
 * also named `RuntimeStdio`, beside the seam's different `RuntimeStdio`.)
 *
 * @example Usage
 * ```ts
 * import { deepStrictEqual } from "node:assert/strict";
 * import { type CommandStdio, ProcessIo } from "@skiff/shim/linux";
 * const dir = Deno.makeTempDirSync();
 * const io = await ProcessIo.open(
 *   { stdin: "", stdout: `file://${dir}/log`, stderr: `file://${dir}/log`, terminal: false },
 *   { containerId: "web", namespace: "default" },
 * );
 * const stdio: CommandStdio = io.stdio; // spread into the runtime command's options
 * deepStrictEqual(stdio, { stdin: "null", stdout: "piped", stderr: "piped" });
 * await io.close();
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export interface CommandStdio {
  /** `"piped"` when the process reads a stdin FIFO. */
  stdin: "piped" | "null";
  /** `"piped"` when the process's stdout goes somewhere. */
  stdout: "piped" | "null";
  /** `"piped"` when the process's stderr goes somewhere. */
  stderr: "piped" | "null";
}

/**
 * Opens the targets of a process's stdio and copies between them and the process.
 *
 * - FIFOs: stdout/stderr FIFOs are opened read-write (a FIFO's read-write open never blocks, so
 *   a client that never opens its end cannot wedge the shim, and the client can reattach);
 *   the stdin FIFO is opened for reading plus a write end of our own, so stdin sees EOF only
 *   after {@linkcode ProcessIo.closeStdin} (CloseIO) and the client closing. A stdout/stderr
 *   path that is not a FIFO is appended to.
 * - `file:///path`: parent directories created, appended to, stdout and stderr both go there.
 * - `binary://` / `binary-v2://`: see {@linkcode BinaryLogger}.
 *
 * When every copy into an output target has reached end of stream (the process and everything
 * sharing its pipes or terminal exited), that target is closed at once, as the Go runc shim does:
 * a client reading a stdout/stderr FIFO sees EOF at exit, not at Delete. CRI and containerd's
 * client wait for that EOF before they delete the task.
 *
 * All waiting happens in cancellable polls, so {@linkcode ProcessIo.close} always finishes.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { ProcessIo } from "@skiff/shim/linux";
 * const dir = Deno.makeTempDirSync();
 * const io = await ProcessIo.open(
 *   { stdin: "", stdout: `file://${dir}/log`, stderr: `file://${dir}/log`, terminal: false },
 *   { containerId: "web", namespace: "default" },
 * );
 * // A shell stands in for `runc create`: the process it starts inherits these pipes.
 * const child = new Deno.Command("sh", { args: ["-c", "echo hello"], ...io.stdio }).spawn();
 * io.attach(child);
 * await child.status;
 * strictEqual(await io.drain(), true); // every copy reached end of stream
 * await io.close();
 * strictEqual(Deno.readTextFileSync(`${dir}/log`), "hello\n");
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export class ProcessIo {
  /** Stdio options for the runtime command; all `"null"` in terminal mode. */
  readonly stdio: CommandStdio;
  #stdin: FdStream | undefined;
  #stdinKeepAlive: FdStream | undefined;
  #stdout: Sink | undefined;
  #stderr: Sink | undefined;
  #logger: BinaryLogger | undefined;
  #copies: Promise<void>[] = [];
  #outputCopies: Promise<void>[] = [];
  #landing = new OutputLanding();
  /** Read-only descriptors of the FIFO targets, to count what their clients have not read. */
  #fifoWatches: number[] = [];
  /** Per FIFO target: notes its reader's activity after each write. */
  #afterWrite = new Map<Sink, () => void>();
  #stopLooks: (() => void)[] = [];
  #readers: ReadableStreamDefaultReader<Uint8Array>[] = [];
  /** Output copies still writing into each sink; a sink is closed when its count reaches 0. */
  #writers = new Map<Sink, number>();
  /** Ends the copies of {@linkcode ProcessIo.streams} writables nobody closed (a failed create). */
  #unclosedSinks = new Set<() => void>();
  #pty: Pty | undefined;
  #terminal: boolean;
  #attached = false;
  #closed: Promise<void> | undefined;
  #pipes: ChildPipes = {};
  /** Chunks read but not yet written: a live upgrade waits for none. */
  #inHand = 0;
  /** Why this process's stdio cannot cross a live upgrade, if it cannot. */
  #uncarriable: string | undefined;
  /** A runtime took the targets as streams ({@linkcode ProcessIo.streams}). */
  #streams = false;

  private constructor(
    stdio: CommandStdio,
    parts: {
      stdin?: FdStream;
      stdinKeepAlive?: FdStream;
      stdout?: Sink;
      stderr?: Sink;
      logger?: BinaryLogger;
      terminal?: boolean;
    },
  ) {
    this.stdio = stdio;
    this.#terminal = parts.terminal ?? false;
    this.#stdin = parts.stdin;
    this.#stdinKeepAlive = parts.stdinKeepAlive;
    this.#stdout = parts.stdout;
    this.#stderr = parts.stderr;
    this.#logger = parts.logger;
    if (!this.#logger) this.#watchFifos();
  }

  /**
   * A FIFO's client must have read what the process wrote before its exit goes out. The FIFO is
   * looked at through a read-only descriptor of our own, never read: the write end closes when
   * the output ends (the client's EOF), and the bytes it left can still be counted. (A logger's
   * pipes are not watched: a second reader would keep a dead logger's pipe from failing.)
   */
  #watchFifos(): void {
    for (const sink of new Set([this.#stdout, this.#stderr])) {
      if (!(sink instanceof FdStream) || !isPipe(sink.fd)) continue;
      let fd: number;
      try {
        fd = open(`/proc/self/fd/${sink.fd}`, O.RDONLY | O.NONBLOCK);
      } catch {
        continue; // not counted: the exit waits only for the copies
      }
      this.#fifoWatches.push(fd);
      const unread = () => this.#fifoWatches.includes(fd) ? unreadBytes(fd) : 0;
      // The reader's activity: bytes it took since the last look, looked at after each write,
      // and again a little later while it was seen taking some and has more to take (a
      // reader that takes nothing is not looked at again until the next write).
      let taken = 0;
      let activeAt: number | undefined;
      let later: ReturnType<typeof setTimeout> | undefined;
      const look = () => {
        later = undefined;
        const left = unread();
        const nowTaken = sink.bytesWritten - left;
        const took = nowTaken > taken;
        if (activeAt === undefined || took) activeAt = performance.now();
        taken = nowTaken;
        if (took && left > 0 && !this.#closed) {
          later = setTimeout(look, READER_LOOK_MS);
          Deno.unrefTimer(later);
        }
      };
      this.#afterWrite.set(sink, () => later === undefined && look());
      this.#stopLooks.push(() => clearTimeout(later));
      this.#landing.watch({
        unread,
        get activeAt() {
          return activeAt;
        },
      });
    }
  }

  /**
   * Opens every target `spec` names. Throws (having closed what it opened) when one cannot be
   * opened, naming the stream and path.
   *
   * @param spec the request's stdio fields
   * @param ctx container identity for loggers
   */
  static async open(spec: StdioSpec, ctx: ProcessIoContext): Promise<ProcessIo> {
    const opened: { close(): Promise<void> }[] = [];
    try {
      let stdin: FdStream | undefined;
      let stdinKeepAlive: FdStream | undefined;
      const stdinPath = fifoPath(spec.stdin);
      if (stdinPath !== "") {
        stdin = new FdStream(
          openOrThrow("stdin fifo", stdinPath, O.RDONLY | O.NONBLOCK),
          `stdin fifo "${stdinPath}"`,
        );
        opened.push(stdin);
        // Succeeds at once because we hold a reader; keeps EOF away until CloseIO.
        stdinKeepAlive = new FdStream(
          openOrThrow("stdin fifo", stdinPath, O.WRONLY | O.NONBLOCK),
          `stdin fifo "${stdinPath}" (keep-alive writer)`,
        );
        opened.push(stdinKeepAlive);
      }

      const { stdout, stderr, logger } = await openOutputs(spec, ctx, opened);

      const terminal = spec.terminal;
      const stdio: CommandStdio = {
        stdin: !terminal && stdin ? "piped" : "null",
        stdout: !terminal && stdout ? "piped" : "null",
        stderr: !terminal && stderr ? "piped" : "null",
      };
      return new ProcessIo(stdio, {
        terminal,
        ...(stdin ? { stdin } : {}),
        ...(stdinKeepAlive ? { stdinKeepAlive } : {}),
        ...(stdout ? { stdout } : {}),
        ...(stderr ? { stderr } : {}),
        ...(logger ? { logger } : {}),
      });
    } catch (e) {
      await Promise.allSettled(opened.map((o) => o.close()));
      throw e;
    }
  }

  /**
   * Starts copying between the targets and `child`, a runtime command spawned with
   * {@linkcode ProcessIo.stdio}: stdin FIFO → `child.stdin` (closed at EOF), `child.stdout` and
   * `child.stderr` → their targets. Copying continues after `child` exits, for as long as the
   * container holds the pipes.
   *
   * @param child the spawned runtime command
   */
  attach(child: Deno.ChildProcess): void {
    this.#beginAttach("attach");
    // Into descriptors skiff owns, so that a live upgrade can hand them on.
    const pipes = takeChildPipes(child, {
      stdin: this.stdio.stdin === "piped",
      stdout: this.stdio.stdout === "piped",
      stderr: this.stdio.stderr === "piped",
    });
    if (pipes) return this.#pump(pipes);
    this.#uncarriable = `the stdio pipes of pid ${child.pid} could not be identified`;
    if (this.stdio.stdin === "piped" && this.#stdin) {
      this.#copies.push(this.#copyStdin(this.#stdin, child.stdin.getWriter()));
    }
    if (this.stdio.stdout === "piped" && this.#stdout) {
      this.#track(this.#copyOut(child.stdout, this.#stdout, this.#landing.track()), true);
    }
    if (this.stdio.stderr === "piped" && this.#stderr) {
      this.#track(this.#copyOut(child.stderr, this.#stderr, this.#landing.track()), true);
    }
  }

  /**
   * Whether a chunk of output or input has been read and not yet written (a live upgrade
   * replaces the process image only when none is).
   */
  get inHand(): boolean {
    return this.#inHand > 0;
  }

  /**
   * The descriptors a live upgrade keeps open for the next code ({@linkcode ProcessIo.adopt}).
   *
   * @throws {Error} when this stdio cannot be carried (pipes that could not be identified),
   *   saying why
   */
  carry(): ProcessIoCarry {
    if (this.#uncarriable) throw new Error(this.#uncarriable);
    const open = (s: { fd: number; closed: boolean } | undefined) =>
      s && !s.closed ? s.fd : undefined;
    const out: ProcessIoCarry = {};
    const pty = open(this.#pty);
    if (pty !== undefined) out.pty = pty;
    const fifo = open(this.#stdin);
    if (fifo !== undefined) {
      out.stdin = { fifo };
      const keepAlive = open(this.#stdinKeepAlive);
      if (keepAlive !== undefined) out.stdin.keepAlive = keepAlive;
      const pipe = open(this.#pipes.stdin);
      if (pipe !== undefined) out.stdin.pipe = pipe;
    }
    for (const name of ["stdout", "stderr"] as const) {
      // Every target is an FdStream: a FIFO, a file, or a logger's pipe.
      const sink = open((name === "stdout" ? this.#stdout : this.#stderr) as FdStream | undefined);
      if (sink === undefined) continue;
      out[name] = { sink };
      const pipe = open(this.#pipes[name]);
      if (pipe !== undefined) out[name]!.pipe = pipe;
    }
    if (this.#logger) out.logger = this.#logger.carry();
    if (this.#streams) out.streams = { terminal: this.#terminal };
    return out;
  }

  /**
   * Continues, in the code a live upgrade started, the stdio that {@linkcode ProcessIo.carry}
   * handed over: the same descriptors, copied as before (or, when a runtime had taken them as
   * streams, ready to be taken as streams again).
   *
   * @param carry what the previous code handed over
   * @param ctx the shim's reaper, which reports a carried `binary://` logger's exit (required
   *   then; see {@linkcode BinaryLogger.adopt})
   * @example Usage
   * ```ts
   * import { strictEqual } from "node:assert/strict";
   * import { ProcessIo } from "@skiff/shim/linux";
   * const dir = Deno.makeTempDirSync();
   * const io = await ProcessIo.open(
   *   { stdin: "", stdout: `file://${dir}/log`, stderr: `file://${dir}/log`, terminal: false },
   *   { containerId: "web", namespace: "default" },
   * );
   * const child = new Deno.Command("sh", { args: ["-c", "sleep 0.2; echo after"], ...io.stdio }).spawn();
   * io.attach(child);
   * const next = ProcessIo.adopt(io.carry()); // as the next code would, with the same descriptors
   * await child.status;
   * await next.drain();
   * strictEqual(Deno.readTextFileSync(`${dir}/log`), "after\n");
   * await next.close();
   * Deno.removeSync(dir, { recursive: true });
   * ```
   */
  static adopt(carry: ProcessIoCarry, ctx: { reaper?: Pick<Reaper, "onExit"> } = {}): ProcessIo {
    if (carry.logger && !ctx.reaper) {
      throw new Error(
        `carried binary logger "${carry.logger.path}" (pid ${carry.logger.pid}): adopting it needs the shim's reaper`,
      );
    }
    const streams = new Map<number, FdStream>();
    const take = (fd: number | undefined, what: string) => {
      if (fd === undefined) return undefined;
      let s = streams.get(fd);
      if (!s) {
        setCloseOnExec(fd, true); // inherited without it: the runtime's children must not get it
        streams.set(fd, s = new FdStream(fd, what));
      }
      return s;
    };
    const stdin = take(carry.stdin?.fifo, "stdin fifo (carried)");
    const keepAlive = take(carry.stdin?.keepAlive, "stdin fifo keep-alive (carried)");
    const stdout = take(carry.stdout?.sink, "stdout target (carried)");
    const stderr = take(carry.stderr?.sink, "stderr target (carried)");
    // A logger's pipes: both present until the logger is closed, which ends the process's io.
    const logger = carry.logger && stdout && stderr
      ? BinaryLogger.adopt(carry.logger, stdout, stderr, ctx.reaper!)
      : undefined;
    const io = new ProcessIo({ stdin: "null", stdout: "null", stderr: "null" }, {
      ...(stdin ? { stdin } : {}),
      ...(keepAlive ? { stdinKeepAlive: keepAlive } : {}),
      ...(stdout ? { stdout } : {}),
      ...(stderr ? { stderr } : {}),
      ...(logger ? { logger } : {}),
    });
    if (carry.streams) {
      // The runtime takes them as streams again (`resumeProcess` gets this io).
      io.#terminal = carry.streams.terminal;
      return io;
    }
    io.#attached = true;
    if (carry.pty !== undefined) {
      setCloseOnExec(carry.pty, true);
      io.#terminal = true;
      io.#pumpPty(new Pty(carry.pty));
      return io;
    }
    const pipes: ChildPipes = {};
    const inPipe = take(carry.stdin?.pipe, "stdin pipe (carried)");
    const outPipe = take(carry.stdout?.pipe, "stdout pipe (carried)");
    const errPipe = take(carry.stderr?.pipe, "stderr pipe (carried)");
    if (inPipe) pipes.stdin = inPipe;
    if (outPipe) pipes.stdout = outPipe;
    if (errPipe) pipes.stderr = errPipe;
    io.#pump(pipes);
    return io;
  }

  /** Copies between the targets and pipes this process owns. */
  #pump(pipes: ChildPipes): void {
    this.#pipes = pipes;
    if (pipes.stdin && this.#stdin) {
      const to = pipes.stdin;
      this.#copies.push(this.#copyStdinTo(this.#stdin, to));
    } else void pipes.stdin?.close();
    for (const name of ["stdout", "stderr"] as const) {
      const pipe = pipes[name];
      if (!pipe) continue;
      const sink = name === "stdout" ? this.#stdout : this.#stderr;
      this.#track(
        this.#copyOut(pipe.readable(), sink, this.#landing.track(pipe)).finally(() => pipe.close()),
        true,
      );
    }
  }

  async #copyStdinTo(from: FdStream, to: FdStream): Promise<void> {
    const buf = new Uint8Array(32 * 1024);
    try {
      for (let n; (n = await from.read(buf)) !== null;) {
        this.#inHand++;
        try {
          await to.write(buf.subarray(0, n));
        } finally {
          this.#inHand--;
        }
      }
    } catch {
      // The process closed its stdin (or exited): nothing left to feed.
    }
    await to.close();
  }

  /**
   * Starts copying in terminal mode: stdin FIFO → pty, pty → stdout target. As in the Go runc
   * shim, EOF on stdin closes the pty. {@linkcode ProcessIo.close} closes the pty too.
   *
   * @param pty the master received from the console socket
   */
  attachPty(pty: Pty): void {
    this.#beginAttach("attachPty");
    this.#pumpPty(pty);
  }

  /**
   * Resizes the terminal (a process attached with {@linkcode ProcessIo.attachPty}, or adopted
   * with one); nothing without a terminal.
   *
   * @param width columns
   * @param height rows
   */
  resize(width: number, height: number): void {
    this.#pty?.resize(width, height);
  }

  #pumpPty(pty: Pty): void {
    this.#pty = pty;
    if (this.#stdin) {
      const stdin = this.#stdin;
      this.#copies.push((async () => {
        const buf = new Uint8Array(32 * 1024);
        try {
          for (let n; (n = await stdin.read(buf)) !== null;) {
            this.#inHand++;
            try {
              await pty.write(buf.subarray(0, n));
            } finally {
              this.#inHand--;
            }
          }
        } catch {
          // the pty went away: nothing left to feed
        }
        await pty.close();
      })());
    }
    const progress = this.#landing.track();
    this.#track(this.#copyOut(pty.readable, this.#stdout, progress), true);
  }

  /**
   * Hands the targets over as web streams, for a runtime that moves the bytes itself (an agent,
   * a VM guest): stdin FIFO → `stdin` (ends at CloseIO and the client closing), `stdout` and
   * `stderr` → their targets (in terminal mode, `stdout` carries the terminal's output and there
   * is no `stderr`). A target is closed once every stream writing into it is closed, as at a
   * pipe's EOF; {@linkcode ProcessIo.drain} waits for that.
   */
  streams(): {
    stdin?: ReadableStream<Uint8Array>;
    stdout?: WritableStream<Uint8Array>;
    stderr?: WritableStream<Uint8Array>;
  } {
    this.#beginAttach("streams");
    this.#streams = true;
    const out: {
      stdin?: ReadableStream<Uint8Array>;
      stdout?: WritableStream<Uint8Array>;
      stderr?: WritableStream<Uint8Array>;
    } = {};
    if (this.#stdin) out.stdin = this.#stdin.readable();
    if (this.#stdout) out.stdout = this.#sinkStream(this.#stdout);
    if (this.#stderr && !this.#terminal) {
      out.stderr = this.#sinkStream(this.#stderr);
    }
    return out;
  }

  /** A writable into `sink`, tracked like an output copy: its close releases the sink. */
  #sinkStream(sink: Sink): WritableStream<Uint8Array> {
    this.#writers.set(sink, (this.#writers.get(sink) ?? 0) + 1);
    const done = Promise.withResolvers<void>();
    const progress = this.#landing.track();
    this.#track(done.promise.finally(() => progress.end()), true);
    this.#unclosedSinks.add(done.resolve);
    let broken = false;
    const end = async (eof: boolean) => {
      this.#unclosedSinks.delete(done.resolve);
      if (eof && !this.#closed) await this.#release(sink);
      done.resolve();
    };
    return new WritableStream<Uint8Array>({
      write: async (chunk) => {
        if (broken || this.#closed) return progress.settle(chunk.byteLength);
        // As a pipe's copy: after a sink error keep accepting, so the sender never blocks.
        this.#inHand++;
        await sink.write(chunk).then(
          () => this.#afterWrite.get(sink)?.(),
          () => broken = true,
        ).finally(() => {
          this.#inHand--;
          progress.settle(chunk.byteLength);
        });
      },
      close: () => end(true),
      abort: () => end(true),
    });
  }

  /** Closes our write end of the stdin FIFO (CloseIO): the process sees EOF once the client's does. */
  async closeStdin(): Promise<void> {
    await this.#stdinKeepAlive?.close();
  }

  /**
   * Waits until the output copies have finished (the process and everything sharing its pipes
   * exited), for at most `timeoutMs`. Resolves `true` when drained, `false` on timeout.
   *
   * @param timeoutMs the bound; 10 s, as the runc shim waits on delete
   */
  async drain(timeoutMs = 10_000): Promise<boolean> {
    const outputs = Promise.all(this.#outputCopies).then(() => true);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), timeoutMs);
    });
    try {
      return await Promise.race([outputs, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Waits, once the process has exited, until what it wrote before its exit has reached the
   * targets' readers: every byte its pipes held or a copy had in hand when this was called (or,
   * for a terminal or streams, the end of the output) is in the targets, and the FIFOs among them
   * have been read empty. Keeps waiting as long as bytes move, however slowly the clients read;
   * gives up when none moved for a while, or after `maxMs`.
   *
   * @param maxMs the overall bound (default 10 s, as the runc shim waits on delete)
   * @returns `true` once landed, `false` when it gave up
   * @example Usage
   * ```ts
   * import { strictEqual } from "node:assert/strict";
   * import { ProcessIo } from "@skiff/shim/linux";
   * const dir = Deno.makeTempDirSync();
   * const io = await ProcessIo.open(
   *   { stdin: "", stdout: `file://${dir}/log`, stderr: "", terminal: false },
   *   { containerId: "web", namespace: "default" },
   * );
   * // The shell leaves a child holding its stdout: the output never ends, yet what the shell
   * // wrote lands, and that is all this waits for. (It starts once attached, as a runtime's
   * // process does: the pipes are taken from a command that is still running.)
   * const script = `until [ -e ${dir}/go ]; do sleep 0.01; done; echo hello; sleep 30 & echo $! > ${dir}/bg`;
   * const child = new Deno.Command("sh", { args: ["-c", script], ...io.stdio }).spawn();
   * io.attach(child);
   * Deno.writeTextFileSync(`${dir}/go`, "");
   * await child.status;
   * strictEqual(await io.landed(), true);
   * strictEqual(Deno.readTextFileSync(`${dir}/log`), "hello\n");
   * Deno.kill(Number(Deno.readTextFileSync(`${dir}/bg`)), "SIGKILL");
   * await io.close();
   * Deno.removeSync(dir, { recursive: true });
   * ```
   */
  landed(maxMs?: number): Promise<boolean> {
    return this.#landing.landed(maxMs);
  }

  /** Stops all copying and closes every FIFO, file, logger and pty; idempotent. */
  close(): Promise<void> {
    this.#closed ??= (async () => {
      await Promise.allSettled(this.#readers.map((r) => r.cancel()));
      await Promise.allSettled([this.#stdin?.close(), this.#stdinKeepAlive?.close()]);
      await Promise.allSettled(Object.values(this.#pipes).map((p) => p.close()));
      await this.#pty?.close();
      // A runtime that took the streams and failed before it used them never closes them.
      for (const end of this.#unclosedSinks) end();
      // The targets close before the copies are awaited: a copy can be waiting to write into a
      // FIFO that its client stopped reading (or died holding full), and only closing the
      // target ends that wait. A target's close cancels the wait; nothing writes after it.
      const sinks = new Set([this.#stdout, this.#stderr]);
      if (this.#logger) await this.#logger.close();
      else await Promise.allSettled([...sinks].map((s) => s?.close()));
      await Promise.allSettled(this.#copies);
      for (const stop of this.#stopLooks) stop();
      for (const fd of this.#fifoWatches.splice(0)) closeFd(fd);
    })();
    return this.#closed;
  }

  #track(copy: Promise<void>, output: boolean): void {
    this.#copies.push(copy);
    if (output) this.#outputCopies.push(copy);
  }

  #beginAttach(method: string): void {
    if (this.#closed) throw new Error(`ProcessIo.${method}: already closed`);
    if (this.#attached) throw new Error(`ProcessIo.${method}: already attached`);
    this.#attached = true;
  }

  async #copyStdin(
    stdin: FdStream,
    writer: WritableStreamDefaultWriter<Uint8Array>,
  ): Promise<void> {
    const buf = new Uint8Array(32 * 1024);
    try {
      for (let n; (n = await stdin.read(buf)) !== null;) {
        await writer.write(buf.slice(0, n));
      }
      await writer.close();
    } catch {
      // The process closed its stdin (or exited): nothing left to feed.
      await writer.abort().catch(() => {});
    }
  }

  /**
   * Copies `source` into `sink`; after a sink error keeps draining so the process never blocks.
   * At end of stream the sink is released, and closed once no other copy writes into it.
   */
  async #copyOut(
    source: ReadableStream<Uint8Array>,
    sink: Sink | undefined,
    progress: CopyProgress,
  ): Promise<void> {
    const reader = source.getReader();
    this.#readers.push(reader);
    if (sink) this.#writers.set(sink, (this.#writers.get(sink) ?? 0) + 1);
    let broken = sink === undefined;
    let eof = false;
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) {
          eof = true;
          break;
        }
        if (broken) {
          progress.settle(value.byteLength);
          continue;
        }
        this.#inHand++;
        try {
          await sink!.write(value);
          this.#afterWrite.get(sink!)?.();
        } catch {
          broken = true; // reader gone (e.g. the logger died): discard from now on
        } finally {
          this.#inHand--;
          progress.settle(value.byteLength);
        }
      }
    } catch {
      // cancelled by close()
    } finally {
      reader.releaseLock();
      progress.end();
    }
    if (eof && sink && !this.#closed) await this.#release(sink);
  }

  /** One writer of `sink` is done; the last one closes it (the FIFO's reader then sees EOF). */
  async #release(sink: Sink): Promise<void> {
    const left = (this.#writers.get(sink) ?? 1) - 1;
    this.#writers.set(sink, left);
    if (left > 0) return;
    await sink.close().catch(() => {});
  }
}
