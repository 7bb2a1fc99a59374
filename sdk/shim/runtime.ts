/**
 * The runtime seam: what the {@link Shim} base class needs from a low-level runtime for one
 * container. It assumes no host pid file and no inherited child: a runtime reports what it
 * started as a {@link RuntimeProcess} (its pid, and when the runtime owns them its exit, signals
 * and terminal), and takes a process's stdio in whichever of three shapes suits it
 * ({@link RuntimeStdio}: a console socket, pipes a runtime command inherits, or web streams).
 * {@link OciRuntimeCli} (runc, runsc, crun) implements it, and so can a runtime whose processes
 * are not the shim's children at all (a VM guest's, an agent's).
 *
 * @module
 */

import type { Any } from "@bufbuild/protobuf/wkt";

/**
 * What a runtime started (a container's init at create or restore, or an exec): its pid, and,
 * when the runtime rather than the shim's reaper owns them, its exit, signals and terminal.
 *
 * @example A process the shim's reaper sees (runc, crun)
 * ```ts
 * import type { RuntimeProcess } from "@skiff/shim/seam";
 * const init: RuntimeProcess = { pid: 4242 };
 * ```
 *
 * @example A process whose exit the runtime reports (an agent's, a VM guest's)
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { RuntimeProcess } from "@skiff/shim/seam";
 * const exit = Promise.withResolvers<number>();
 * const p: RuntimeProcess = { pid: 7, exited: exit.promise, kill: () => Promise.resolve() };
 * exit.resolve(0);
 * strictEqual((await p.exited), 0);
 * ```
 */
export interface RuntimeProcess {
  /**
   * Whose exit the shim reports, one of three: a host process re-parented to the shim (runc's
   * init, reaped by the shim); a child the runtime spawned with `ctx.spawn` (its exit is taken
   * from Deno's `child.status`, so Wait answers when it ends, even if it ended before create or
   * exec returned); or, with {@link RuntimeProcess.exited}, any pid (a guest's).
   */
  readonly pid: number;
  /**
   * When present, the runtime reports the exit status (128 + signal for a signal) and the
   * reaper is not consulted: this pid is never matched against reaped exits (a guest pid may
   * equal an unrelated host pid). When it rejects (`runsc wait` after the sandbox died), the
   * shim takes a reaped exit of the pid if one was seen or arrives within 2 s, else reports
   * status 255. The exit is published once the process's output has reached containerd's ends
   * (its copies ended; at most 2 s more): containerd's client closes its FIFOs when it has the
   * exit, so a runtime that carries the output itself must not lose the race to its last bytes.
   */
  readonly exited?: Promise<number>;
  /** Signals an exec (Kill with an exec id) whose pid is not a host pid the shim can signal. */
  kill?(signal: number): Promise<void>;
  /** Resizes the terminal, when the runtime owns it (it took {@link RuntimeStdio.streams}). */
  resize?(width: number, height: number): Promise<void>;
  /** CloseIO: called after the shim closed its own write end of the stdin FIFO. */
  closeStdin?(): Promise<void>;
}

/**
 * What a runtime hands its next code across a live upgrade, for one process
 * (`ContainerRuntime.carryProcess`) or for the whole shim (`Shim.carryUpgrade`): descriptors
 * kept open across execve (by name), and plain data.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { RuntimeCarry } from "@skiff/shim";
 * const c: RuntimeCarry = { descriptors: { waitOutput: 17 } };
 * strictEqual(c.descriptors?.waitOutput, 17);
 * ```
 */
export interface RuntimeCarry {
  /** Descriptors the next code reads or writes, kept open across execve. */
  descriptors?: Record<string, number>;
  /** Anything else, as JSON. */
  data?: unknown;
}

/** {@linkcode RuntimeCarry} for one process (`ContainerRuntime.carryProcess`). */
export type RuntimeProcessCarry = RuntimeCarry;

/**
 * containerd's ends of a process's stdio as web streams, for runtimes that move the bytes
 * themselves (over a socket to an agent, a vsock to a guest).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { RuntimeStreams } from "@skiff/shim/seam";
 * // What opts.io.streams() hands the runtime: containerd's stdin and stdout targets.
 * let output = "";
 * const { stdin, stdout }: RuntimeStreams = {
 *   stdin: ReadableStream.from([new TextEncoder().encode("hello\n")]),
 *   stdout: new WritableStream({ write: (c) => void (output += new TextDecoder().decode(c)) }),
 * };
 * // The runtime's side: an agent that echoes its input (a guest's process, over a vsock).
 * const agent = new TransformStream<Uint8Array, Uint8Array>();
 * await Promise.all([stdin!.pipeTo(agent.writable), agent.readable.pipeTo(stdout!)]);
 * strictEqual(output, "hello\n"); // stdout closed when the output ended: Delete waits for that
 * ```
 */
export interface RuntimeStreams {
  /** Bytes from containerd's stdin; ends after CloseIO and the client closing its end. */
  readonly stdin?: ReadableStream<Uint8Array>;
  /**
   * Into containerd's stdout target (with a terminal, the terminal's output). Close it when
   * the process's output has ended: Delete waits (up to 10 s) for that, as for a pipe's EOF.
   */
  readonly stdout?: WritableStream<Uint8Array>;
  /** Into containerd's stderr target; absent with a terminal. */
  readonly stderr?: WritableStream<Uint8Array>;
}

/**
 * The pipes of a runtime command that the container process inherits: the command is spawned
 * with `stdio` and then handed to `attach`, which takes over its piped streams (OCI CLIs).
 * `ProcessIo` from `sdk/linux` satisfies it.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { RuntimePipes } from "@skiff/shim/seam";
 * // A RuntimePipes that keeps the command's stdout (ProcessIo copies it to containerd's target).
 * let output: Promise<string> = Promise.resolve("");
 * const pipes: RuntimePipes = {
 *   stdio: { stdin: "null", stdout: "piped", stderr: "null" },
 *   attach: (child) => void (output = new Response(child.stdout).text()),
 * };
 * // A shell stands in for `runc create`; the container process would inherit these pipes.
 * const child = new Deno.Command("sh", { args: ["-c", "echo hi"], ...pipes.stdio }).spawn();
 * pipes.attach(child);
 * await child.status;
 * strictEqual(await output, "hi\n");
 * ```
 */
export interface RuntimePipes {
  /** Deno.Command stdio settings for the runtime command. */
  readonly stdio: {
    readonly stdin: "piped" | "null";
    readonly stdout: "piped" | "null";
    readonly stderr: "piped" | "null";
  };
  /** Called with the spawned runtime command so the pipes can be copied. */
  attach(child: Deno.ChildProcess): void;
}

/**
 * The stdio of one process, as the base hands it to a runtime. A runtime uses one of three
 * shapes: {@link RuntimeStdio.consoleSocket} (an OCI CLI with a terminal), the
 * {@link RuntimePipes} (an OCI CLI without one), or {@link RuntimeStdio.streams} (a runtime
 * that moves the bytes itself).
 *
 * @example Usage
 * ```ts
 * import { deepStrictEqual } from "node:assert/strict";
 * import type { RuntimeStdio } from "@skiff/shim";
 * // An OCI CLI's choice: the console socket with a terminal, else the pipes.
 * function createArgs(io: RuntimeStdio, id: string): string[] {
 *   const args = ["create", "--bundle", "/run/b/web"];
 *   if (io.consoleSocket) args.push("--console-socket", io.consoleSocket);
 *   return [...args, id]; // without one: spawn with ...io.stdio, then io.attach(child)
 * }
 * const tty: RuntimeStdio = {
 *   terminal: true,
 *   consoleSocket: "/run/b/web/console.sock",
 *   stdio: { stdin: "null", stdout: "null", stderr: "null" },
 *   attach: () => {},
 *   streams: () => ({}),
 * };
 * deepStrictEqual(createArgs(tty, "web").slice(3), ["--console-socket", "/run/b/web/console.sock", "web"]);
 * ```
 */
export interface RuntimeStdio extends RuntimePipes {
  /** Whether the process has a terminal. */
  readonly terminal: boolean;
  /** With a terminal: where an OCI CLI sends the pty master (`--console-socket`). */
  readonly consoleSocket?: string;
  /**
   * Takes containerd's ends as web streams. Call it once, before create or exec resolves;
   * from then on the shim copies nothing itself and, with a terminal, waits for no pty master
   * (the runtime owns the terminal: {@link RuntimeProcess.resize}).
   */
  streams(): RuntimeStreams;
}

/** Options for creating a container. */
export interface RuntimeCreateOptions {
  /** The bundle directory (holds config.json and rootfs). */
  bundle: string;
  /** The init's stdio. */
  io: RuntimeStdio;
}

/** Options for starting an additional process in a container. */
export interface RuntimeExecOptions {
  /** The process's stdio. */
  io: RuntimeStdio;
}
/** Checkpoint options, decoded from `containerd.runc.v1.CheckpointOptions`. */
export interface RuntimeCheckpointOptions {
  /** Where the image is written. */
  imagePath: string;
  /** criu's work directory. */
  workPath?: string;
  /** Parent image for incremental checkpoints. */
  parentPath?: string;
  /** Keep the container running after the checkpoint. */
  leaveRunning?: boolean;
  /** Checkpoint established TCP connections. */
  tcpEstablished?: boolean;
  /** Checkpoint external unix sockets. */
  extUnixSk?: boolean;
  /** The container has a terminal. */
  shellJob?: boolean;
  /** Checkpoint file locks. */
  fileLocks?: boolean;
  /** Namespaces to leave empty. */
  emptyNs?: string[];
  /** criu cgroups mode. */
  cgroupsMode?: string;
}

/**
 * Options for restoring a container from a checkpoint image: the Start of a task that
 * containerd created with a checkpoint (`ctr run --checkpoint`, the client's
 * `WithRestoreImage`). The restored init is reported like a created one.
 */
export interface RuntimeRestoreOptions extends RuntimeCreateOptions {
  /** The checkpoint image directory (CreateTaskRequest.checkpoint). */
  imagePath: string;
  /** criu's work directory. */
  workPath?: string;
  /** The shim is the subreaper (runc `--no-subreaper`). */
  noSubreaper?: boolean;
}

/**
 * One container's runtime, as the base class drives it. Errors should be `ConnectError`s
 * with containerd's codes where the Task API defines one (kill of a finished process is
 * NotFound), otherwise errors whose message carries the runtime's own last error line.
 */
export interface ContainerRuntime {
  /** Creates the container (it stays in "created"); resolves with its init. */
  create(id: string, opts: RuntimeCreateOptions): Promise<RuntimeProcess>;
  /** Starts the container's init process. */
  start(id: string): Promise<void>;
  /** Signals the init process (or, with `all`, every process of the container). */
  kill(id: string, signal: number, opts?: { all?: boolean }): Promise<void>;
  /** Deletes the container; `force` kills it first. */
  delete(id: string, opts?: { force?: boolean }): Promise<void>;
  /** Starts an additional process described by an OCI `Process` object. */
  exec(
    id: string,
    execId: string,
    process: unknown,
    opts: RuntimeExecOptions,
  ): Promise<RuntimeProcess>;
  /** Lists the container's pids. */
  ps(id: string): Promise<number[]>;
  /** Freezes the container. */
  pause(id: string): Promise<void>;
  /** Thaws the container. */
  resume(id: string): Promise<void>;
  /** Updates resources from an OCI `LinuxResources` object. */
  update(id: string, resources: unknown): Promise<void>;
  /** Checkpoints the container. */
  checkpoint(id: string, opts: RuntimeCheckpointOptions): Promise<void>;
  /**
   * Restores a checkpointed container, its init running on from the image (runc `restore
   * --detach`). Optional: without it, Create with a checkpoint is Unimplemented.
   */
  restore?(id: string, opts: RuntimeRestoreOptions): Promise<RuntimeProcess>;
  /**
   * False while an exit this runtime reports is on its way (its reporting command has ended,
   * its answer is not taken in yet): a live upgrade waits for true. Absent: always settled.
   */
  readonly settled?: boolean;
  /**
   * After a live upgrade, in the code that now runs: a process whose exit this runtime reports
   * ({@link RuntimeProcess.exited}), reported again (e.g. a new `runsc wait`). Optional: without
   * it, a shim with such a process refuses to upgrade (runtimes whose processes the shim reaps
   * need nothing).
   */
  resumeProcess?(
    id: string,
    process: {
      execId: string;
      pid: number;
      created: boolean;
      /**
       * For a process whose stdio this runtime took as streams ({@link RuntimeStdio.streams}):
       * containerd's ends again, as they were left (call once; a stream that had ended is absent).
       */
      streams?: () => RuntimeStreams;
    },
    carried?: RuntimeProcessCarry,
  ): RuntimeProcess;
  /**
   * Before a live upgrade, in the old code: what the next code's
   * {@link ContainerRuntime.resumeProcess} needs for a process whose exit this runtime reports
   * (e.g. the output of a `wait` command still running, kept open across execve). Optional.
   */
  carryProcess?(id: string, process: { execId: string }): RuntimeProcessCarry | undefined;
  /**
   * cgroup (or guest) statistics for Stats, packed as containerd expects (e.g.
   * `io.containerd.cgroups.v1.Metrics`). Optional: by default the platform reads the cgroup of
   * the init's host pid.
   */
  stats?(id: string): Promise<Any>;
  /**
   * Watches the container for OOM kills, once after create (or restore). Optional: by default
   * the platform watches the cgroup of the init's host pid.
   */
  watchOom?(id: string, onOom: () => void): Promise<{ close(): void }>;
}
