/**
 * The runtime seam: what the {@link Shim} base class needs from a low-level runtime for one
 * container. {@link OciRuntimeCli} (runc, runsc, crun) implements it; a VM runtime can too.
 *
 * @module
 */

/** Stdio handed to a runtime command; the container process inherits these pipes. */
export interface RuntimeStdio {
  /** Deno.Command stdio settings for the runtime command. */
  readonly stdio: {
    stdin: "piped" | "null";
    stdout: "piped" | "null";
    stderr: "piped" | "null";
  };
  /** Called with the spawned runtime command so the pipes can be copied. */
  attach(child: Deno.ChildProcess): void;
}

/** Options for creating a container. */
export interface RuntimeCreateOptions {
  /** The bundle directory (holds config.json and rootfs). */
  bundle: string;
  /** Where the runtime writes the init pid. */
  pidFile: string;
  /** Console socket path when the container has a terminal. */
  consoleSocket?: string;
  /** Stdio when the container has no terminal. */
  io?: RuntimeStdio;
}

/** Options for starting an additional process in a container. */
export interface RuntimeExecOptions {
  /** Where the runtime writes the process pid. */
  pidFile: string;
  /** Console socket path when the process has a terminal. */
  consoleSocket?: string;
  /** Stdio when the process has no terminal. */
  io?: RuntimeStdio;
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
 * `WithRestoreImage`). The restored init's pid is written to `pidFile`.
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
  /**
   * How the base learns that a container's init exited: `"reap"` (default: the init is a
   * process the shim reaps) or `"wait"` (the runtime's {@link ContainerRuntime.wait} reports
   * it, for runtimes whose init is not a host process of its own, like gVisor sub-containers).
   */
  readonly initExit?: "reap" | "wait";
  /** With `initExit: "wait"`: blocks until the init exits and returns its status. */
  wait?(id: string): Promise<number>;
  /** Creates the container (it stays in "created"). */
  create(id: string, opts: RuntimeCreateOptions): Promise<void>;
  /** Starts the container's init process. */
  start(id: string): Promise<void>;
  /** Signals the init process (or, with `all`, every process of the container). */
  kill(id: string, signal: number, opts?: { all?: boolean }): Promise<void>;
  /** Deletes the container; `force` kills it first. */
  delete(id: string, opts?: { force?: boolean }): Promise<void>;
  /** Starts an additional process described by an OCI `Process` object. */
  exec(id: string, process: unknown, opts: RuntimeExecOptions): Promise<void>;
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
  restore?(id: string, opts: RuntimeRestoreOptions): Promise<void>;
}
