/**
 * The option and result types of {@link OciRuntimeCli}'s commands: how a runtime command's
 * stdio is wired, the adapter's own settings, each command's flags, and the `state` and
 * `events` documents the runtime prints. Types only: importing this file evaluates nothing.
 *
 * @module
 */

import type { RuntimePipes, RuntimeStdio } from "../shim/runtime.ts";

/** How one stdio stream of a spawned runtime command is wired. */
export type StdioMode = "piped" | "null" | "inherit";

/**
 * The pipes a container process inherits from the runtime command that starts it: the seam's
 * {@link RuntimePipes} under the name this package has always used. The base hands a runtime a
 * whole {@link RuntimeStdio}; code that drives the CLI directly may pass just the pipes (`ProcessIo`
 * from `sdk/linux` satisfies it).
 *
 * @example Usage
 * ```ts ignore
 * const io: ProcessStdio = {
 *   stdio: { stdin: "null", stdout: "piped", stderr: "null" },
 *   attach(child) {
 *     child.stdout.pipeTo(Deno.stdout.writable, { preventClose: true });
 *   },
 * };
 * await cli.create("web", { bundle, io });
 * ```
 */
export type ProcessStdio = RuntimePipes;

/**
 * Spawns a prepared command. A shim passes `(cmd) => reaper.spawn(cmd)` so its subreaper does
 * not steal the exit status of the runtime commands.
 *
 * @example Usage
 * ```ts
 * import type { SpawnFn } from "@skiff/shim/oci";
 * const spawn: SpawnFn = (cmd) => cmd.spawn();
 * ```
 */
export type SpawnFn = (cmd: Deno.Command) => Deno.ChildProcess;

/**
 * Options of {@link OciRuntimeCli}.
 *
 * @example Usage
 * ```ts
 * import type { OciRuntimeCliOptions } from "@skiff/shim";
 * const opts: OciRuntimeCliOptions = {
 *   binary: "runsc",
 *   root: "/run/containerd/runsc/default",
 *   log: "/run/containerd/io.containerd.runtime.v2.task/default/web/log.json",
 *   globalArgs: ["--network=none"],
 * };
 * ```
 */
export interface OciRuntimeCliOptions {
  /** Runtime executable, a name looked up on PATH or a path. Defaults to "runc". */
  binary?: string;
  /** The `--root` state directory; a shim appends the namespace (`<root>/<ns>`). */
  root?: string;
  /**
   * Path for `--log` (written with `--log-format json`). Failures are reported with the last
   * error entry the command added to this file. The runc shim uses `<bundle>/log.json`.
   */
  log?: string;
  /** Adds `--systemd-cgroup`. */
  systemdCgroup?: boolean;
  /** Extra global flags placed before the command, e.g. `["--network=none"]` for runsc. */
  globalArgs?: readonly string[];
  /** Spawns the runtime commands. Defaults to `(cmd) => cmd.spawn()`. */
  spawn?: SpawnFn;
  /** Extra environment for the runtime commands (NOTIFY_SOCKET is always removed). */
  env?: Record<string, string>;
  /** Default for `create`/`restore`'s `noPivot` (runc options `no_pivot_root`). */
  noPivot?: boolean;
  /** Default for `create`'s `noNewKeyring` (runc options `no_new_keyring`). */
  noNewKeyring?: boolean;
  /**
   * How the init's exit is reported: `"reap"` (default: the init is a process the shim reaps,
   * as with runc and crun) or `"wait"` (the init's `RuntimeProcess.exited` is
   * {@link OciRuntimeCli.wait}, run from `start` or `restore` on: gVisor's sub-containers share
   * their sandbox's process, so there is no exit of their own to reap).
   */
  initExit?: "reap" | "wait";
  /**
   * Working directory of every per-container command (create, start, kill, exec, state...):
   * the container's bundle, as containerd's runc shim runs runc there. OCI runtimes and
   * wrappers around them may read `../runtime/config.json`. Without it, `create` and `restore` run in
   * their `bundle` and the other commands in the caller's working directory. When the
   * directory no longer exists (a late delete), the command runs in the caller's.
   */
  cwd?: string;
  /**
   * Which command hands the container process its stdio (pipes, not a terminal): `"create"`
   * (default; runc, crun, a gVisor sandbox's root container) or `"start"` (a gVisor
   * sub-container: `runsc start` gives the process its own stdio, and ignores `create`'s).
   */
  stdioAt?: "create" | "start";
  /**
   * Whose pids the runtime's `ps` lists: `"host"` (default; runc, crun) or `"sandbox"` (gVisor:
   * pids of the sandbox's own pid space, meaningless on the host). With `"sandbox"`,
   * {@link OciRuntimeCli.ps} returns none and the shim lists the host pids it knows itself.
   */
  psPids?: "host" | "sandbox";
}

/**
 * Options of {@link OciRuntimeCli.create}.
 *
 * @example Usage
 * ```ts
 * import type { CreateOptions } from "@skiff/shim/oci";
 * const opts: CreateOptions = { bundle: "/b", noPivot: true };
 * ```
 */
export interface CreateOptions {
  /** The bundle directory (holds config.json). */
  bundle: string;
  /** Where the runtime writes the container init pid; `<bundle>/init.pid` by default. */
  pidFile?: string;
  /** `--console-socket` for a terminal container; by default the `io`'s own, if any. */
  consoleSocket?: string;
  /** `--no-pivot`. */
  noPivot?: boolean;
  /** `--no-new-keyring`. */
  noNewKeyring?: boolean;
  /**
   * The init's stdio: the seam's {@link RuntimeStdio} (its console socket or its pipes), or
   * just pipes. Without it the init gets /dev/null.
   */
  io?: ProcessStdio | RuntimeStdio;
  /** Extra flags placed after the known ones, before the id. */
  extraArgs?: readonly string[];
}

/**
 * Options of {@link OciRuntimeCli.exec}. Only detached execs are supported: the process is
 * reparented to the shim (a subreaper), which reaps it.
 *
 * @example Usage
 * ```ts
 * import type { ExecOptions } from "@skiff/shim/oci";
 * const opts: ExecOptions = { pidFile: "/b/exec1.pid", detach: true };
 * ```
 */
export interface ExecOptions {
  /**
   * Where the runtime writes the exec process pid; `<cwd>/<execId>.pid` by default (a
   * temporary file without `cwd`). The adapter removes it once read.
   */
  pidFile?: string;
  /** `--console-socket` for a terminal exec; by default the `io`'s own, if any. */
  consoleSocket?: string;
  /** The exec's stdio, as for {@link CreateOptions.io}. Without it the process gets /dev/null. */
  io?: ProcessStdio | RuntimeStdio;
  /** Always detached (`--detach`); the field exists to make that explicit. */
  detach?: true;
  /** Extra flags placed after the known ones, before the id. */
  extraArgs?: readonly string[];
}

/**
 * Options of {@link OciRuntimeCli.kill}.
 *
 * @example Usage
 * ```ts
 * import type { KillOptions } from "@skiff/shim/oci";
 * const opts: KillOptions = { all: true };
 * ```
 */
export interface KillOptions {
  /** `--all`: signal every process of the container. */
  all?: boolean;
}

/**
 * Options of {@link OciRuntimeCli.delete}.
 *
 * @example Usage
 * ```ts
 * import type { DeleteOptions } from "@skiff/shim/oci";
 * const opts: DeleteOptions = { force: true };
 * ```
 */
export interface DeleteOptions {
  /** `--force`: kill a running container first. */
  force?: boolean;
}

/**
 * CRIU flags shared by {@link OciRuntimeCli.checkpoint} and {@link OciRuntimeCli.restore}.
 *
 * @example Usage
 * ```ts
 * import type { CriuOptions } from "@skiff/shim/oci";
 * const opts: CriuOptions = { imagePath: "/var/ckpt", tcpEstablished: true };
 * ```
 */
export interface CriuOptions {
  /** `--image-path`: where the checkpoint image is written or read. */
  imagePath: string;
  /** `--work-path`: where CRIU writes its logs. */
  workPath?: string;
  /** `--tcp-established`. */
  tcpEstablished?: boolean;
  /** `--ext-unix-sk`. */
  extUnixSk?: boolean;
  /** `--shell-job`. */
  shellJob?: boolean;
  /** `--file-locks`. */
  fileLocks?: boolean;
  /** `--empty-ns X` for each entry. */
  emptyNs?: readonly string[];
  /** `--manage-cgroups-mode`. */
  cgroupsMode?: string;
}

/**
 * Options of {@link OciRuntimeCli.checkpoint}.
 *
 * @example Usage
 * ```ts
 * import type { CheckpointOptions } from "@skiff/shim/oci";
 * const opts: CheckpointOptions = { imagePath: "/var/ckpt", leaveRunning: true };
 * ```
 */
export interface CheckpointOptions extends CriuOptions {
  /** `--parent-path`: a previous image for incremental dumps. */
  parentPath?: string;
  /** `--leave-running`: keep the container running after the dump. */
  leaveRunning?: boolean;
}

/**
 * Options of {@link OciRuntimeCli.restore}.
 *
 * @example Usage
 * ```ts
 * import type { RestoreOptions } from "@skiff/shim/oci";
 * const opts: RestoreOptions = {
 *   bundle: "/b",
 *   imagePath: "/var/ckpt",
 *   noSubreaper: true,
 * };
 * ```
 */
export interface RestoreOptions extends CriuOptions {
  /** The bundle directory. */
  bundle: string;
  /** Where the runtime writes the restored init pid; `<bundle>/init.pid` by default. */
  pidFile?: string;
  /** `--console-socket` for a terminal container; by default the `io`'s own, if any. */
  consoleSocket?: string;
  /** The restored init's stdio, as for {@link CreateOptions.io}. */
  io?: ProcessStdio | RuntimeStdio;
  /** `--no-pivot`. */
  noPivot?: boolean;
  /** `--no-subreaper` (the runc shim sets it: the shim itself is the subreaper). */
  noSubreaper?: boolean;
  /** Always detached (`--detach`). */
  detach?: true;
  /** Extra flags placed after the known ones, before the id. */
  extraArgs?: readonly string[];
}

/**
 * Options of {@link OciRuntimeCli.events}.
 *
 * @example Usage
 * ```ts
 * import type { EventsOptions } from "@skiff/shim/oci";
 * const opts: EventsOptions = { stats: true };
 * ```
 */
export interface EventsOptions {
  /** `--stats`: print one statistics event and exit (the only supported mode). */
  stats?: true;
}

/**
 * The `state` JSON of a container. runc also prints `rootfs`, `created` and `owner`; runsc
 * prints only the required fields.
 *
 * @example Usage
 * ```ts
 * import type { OciState } from "@skiff/shim/oci";
 * const s: OciState = { id: "web", pid: 42, status: "running", bundle: "/b" };
 * ```
 */
export interface OciState {
  /** OCI spec version the runtime reports. */
  ociVersion?: string;
  /** Container id. */
  id: string;
  /** Host pid of the init (runsc: the sandbox process); 0 once stopped. */
  pid: number;
  /** "creating", "created", "running", "paused" or "stopped". */
  status: string;
  /** Bundle directory. */
  bundle: string;
  /** Root filesystem path (runc, crun). */
  rootfs?: string;
  /** Creation time, RFC 3339 (runc, crun). */
  created?: string;
  /** Owner (runc). */
  owner?: string;
  /** Annotations from config.json. */
  annotations?: Record<string, string>;
}

/**
 * One event printed by `events --stats`: `{ type: "stats", id, data }`.
 *
 * @example Usage
 * ```ts
 * import type { OciEvent } from "@skiff/shim/oci";
 * const e: OciEvent = { type: "stats", id: "web", data: { pids: { current: 1 } } };
 * ```
 */
export interface OciEvent {
  /** "stats" for `--stats`. */
  type: string;
  /** Container id. */
  id: string;
  /** Statistics (cpu, memory, pids, blkio, hugetlb, ...) as the runtime prints them. */
  data?: Record<string, unknown>;
}
