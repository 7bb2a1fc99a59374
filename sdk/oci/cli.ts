/**
 * An adapter for runc-compatible OCI runtime command lines (runc, runsc, crun).
 *
 * Every method spawns one runtime command through an injected `spawn` function, so a shim can
 * route the children through its subreaper (`Reaper.spawn`) and keep their exit statuses.
 * Global flags follow the runc shim: `--root <root> --log <log> --log-format json
 * [--systemd-cgroup] <globalArgs...> <command> ...`.
 *
 * ## Observed runtime differences (Debian runc 1.1.5, runsc release 20221219, crun 1.8.1)
 *
 * The adapter does not branch on the binary name; it tolerates the following instead, and the
 * runsc-specific global flags come in through `globalArgs`:
 *
 * - runsc refuses to start a container outside a network namespace it manages unless given
 *   `--network=none` or `--network=host`: `create` succeeds, then `start` fails with "cannot
 *   run with network enabled in root network namespace". The default `runc spec` config.json
 *   needs no other change for runsc. `--platform=ptrace` is that release's default and works
 *   on a VM; `--platform=kvm` hung in `create` with the sandbox spinning a CPU (nested KVM).
 *   `--debug --debug-log=<dir>/` writes per-command debug files there; `--log` keeps errors.
 * - runsc writes its `--log-format json` entries without a newline between them, with `msg`
 *   before `level`; the log parser below scans concatenated JSON objects rather than lines.
 *   It also reads text-format `level=error msg="..."` lines.
 * - runsc exits 128 on failure (runc and crun exit 1).
 * - runsc `state` has no `rootfs`, `created` or `owner` fields; only id, pid, status, bundle.
 * - runsc `ps --format json` lists sandbox-internal pids (the init is `[1]`), not host pids.
 * - runsc `kill` of a container whose sandbox has exited fails with "connecting to control
 *   server at PID <n>: connection refused"; `kill()` confirms with `state()` that the
 *   container is stopped and then reports NotFound, for any runtime whose wording differs.
 * - A missing container is "container does not exist" for runc, `loading container "<id>":
 *   file does not exist` for runsc, and "error opening file `<root>/<id>/status`: No such file
 *   or directory" for crun; `isNotExist()` accepts all three.
 * - runsc without `--log` writes its internal log to stdout, which for `create`/`exec` with
 *   stdio attached would end up in the container's output: always set `log`.
 *
 * @module
 */

import type { ConnectError } from "@connectrpc/connect";
// Light Connect-shaped errors: `delete` and `-info` build this runtime without loading Connect.
import { Code, isStatusError, statusError } from "../shim/status_error.ts";
import { type OciFeatures, parseOciFeatures } from "./features.ts";

/** How one stdio stream of a spawned runtime command is wired. */
export type StdioMode = "piped" | "null" | "inherit";

/**
 * The stdio a container process inherits: the runtime command is spawned with `stdio` and then
 * handed to `attach`, which takes over its piped streams. `ProcessIo` from `sdk/linux`
 * satisfies this interface.
 *
 * @example Usage
 * ```ts ignore
 * const io: ProcessStdio = {
 *   stdio: { stdin: "null", stdout: "piped", stderr: "null" },
 *   attach(child) {
 *     child.stdout.pipeTo(Deno.stdout.writable, { preventClose: true });
 *   },
 * };
 * await cli.create("web", { bundle, pidFile: `${bundle}/init.pid`, io });
 * ```
 */
export interface ProcessStdio {
  /** The stdio options the runtime command is spawned with. */
  readonly stdio: {
    readonly stdin: StdioMode;
    readonly stdout: StdioMode;
    readonly stderr: StdioMode;
  };
  /** Takes over the piped streams of the spawned runtime command. */
  attach(child: Deno.ChildProcess): void;
}

/**
 * Spawns a prepared command. A shim passes `(cmd) => reaper.spawn(cmd)` so its subreaper does
 * not steal the exit status of the runtime commands.
 *
 * @example Usage
 * ```ts
 * import type { SpawnFn } from "./cli.ts";
 * const spawn: SpawnFn = (cmd) => cmd.spawn();
 * ```
 */
export type SpawnFn = (cmd: Deno.Command) => Deno.ChildProcess;

/**
 * Options of {@link OciRuntimeCli}.
 *
 * @example Usage
 * ```ts
 * import type { OciRuntimeCliOptions } from "./cli.ts";
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
   * How a shim learns that a container's init exited: `"reap"` (default: the init is a process
   * the shim reaps, as with runc and crun) or `"wait"` (through {@link OciRuntimeCli.wait}:
   * gVisor's sub-containers share their sandbox's process, so there is no exit to reap).
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
 * import type { CreateOptions } from "./cli.ts";
 * const opts: CreateOptions = { bundle: "/b", pidFile: "/b/init.pid", noPivot: true };
 * ```
 */
export interface CreateOptions {
  /** The bundle directory (holds config.json). */
  bundle: string;
  /** Where the runtime writes the container init pid. */
  pidFile: string;
  /** `--console-socket`, e.g. `ConsoleSocket.path`, for a terminal container. */
  consoleSocket?: string;
  /** `--no-pivot`. */
  noPivot?: boolean;
  /** `--no-new-keyring`. */
  noNewKeyring?: boolean;
  /** The stdio the container init inherits. Without it the init gets /dev/null. */
  io?: ProcessStdio;
  /** Extra flags placed after the known ones, before the id. */
  extraArgs?: readonly string[];
}

/**
 * Options of {@link OciRuntimeCli.exec}. Only detached execs are supported: the process is
 * reparented to the shim (a subreaper), which reaps it.
 *
 * @example Usage
 * ```ts
 * import type { ExecOptions } from "./cli.ts";
 * const opts: ExecOptions = { pidFile: "/b/exec1.pid", detach: true };
 * ```
 */
export interface ExecOptions {
  /** Where the runtime writes the exec process pid. */
  pidFile: string;
  /** `--console-socket` for a terminal exec. */
  consoleSocket?: string;
  /** The stdio the exec process inherits. Without it the process gets /dev/null. */
  io?: ProcessStdio;
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
 * import type { KillOptions } from "./cli.ts";
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
 * import type { DeleteOptions } from "./cli.ts";
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
 * import type { CriuOptions } from "./cli.ts";
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
 * import type { CheckpointOptions } from "./cli.ts";
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
 * import type { RestoreOptions } from "./cli.ts";
 * const opts: RestoreOptions = {
 *   bundle: "/b",
 *   imagePath: "/var/ckpt",
 *   pidFile: "/b/init.pid",
 *   noSubreaper: true,
 * };
 * ```
 */
export interface RestoreOptions extends CriuOptions {
  /** The bundle directory. */
  bundle: string;
  /** Where the runtime writes the restored init pid. */
  pidFile: string;
  /** `--console-socket` for a terminal container. */
  consoleSocket?: string;
  /** The stdio the restored init inherits. */
  io?: ProcessStdio;
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
 * import type { EventsOptions } from "./cli.ts";
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
 * import type { OciState } from "./cli.ts";
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
 * import type { OciEvent } from "./cli.ts";
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

/**
 * Details of a failed runtime command.
 *
 * @example Usage
 * ```ts
 * import type { OciRuntimeErrorInit } from "./cli.ts";
 * const init: OciRuntimeErrorInit = {
 *   binary: "runc",
 *   command: "start",
 *   id: "web",
 *   args: ["start", "web"],
 *   exitCode: 1,
 *   runtimeMessage: "container not running",
 * };
 * ```
 */
export interface OciRuntimeErrorInit {
  /** The runtime executable. */
  binary: string;
  /** The runtime subcommand, e.g. "create". */
  command: string;
  /** The container id, when the command names one. */
  id?: string;
  /** Full argument list the runtime was started with. */
  args: readonly string[];
  /** Exit code, or -1 when the runtime could not be started at all. */
  exitCode: number;
  /** The runtime's last error line ("" when it printed none). */
  runtimeMessage: string;
}

/**
 * A runtime command failed. `runtimeMessage` is the runtime's last error line (from the
 * `--log` file, or from its stderr when the adapter owned it).
 *
 * @example Usage
 * ```ts
 * import { OciRuntimeError } from "./cli.ts";
 * const e = new OciRuntimeError({
 *   binary: "runc",
 *   command: "start",
 *   id: "web",
 *   args: ["start", "web"],
 *   exitCode: 1,
 *   runtimeMessage: "container not running",
 * });
 * console.assert(e.message === 'runc start "web" failed (exit status 1): container not running');
 * ```
 */
export class OciRuntimeError extends Error {
  /** The runtime executable. */
  readonly binary: string;
  /** The runtime subcommand. */
  readonly command: string;
  /** The container id, when the command names one. */
  readonly id: string | undefined;
  /** Full argument list. */
  readonly args: readonly string[];
  /** Exit code, or -1 when the runtime could not be started. */
  readonly exitCode: number;
  /** The runtime's last error line. */
  readonly runtimeMessage: string;

  /**
   * Builds the error and its message from the failure details.
   *
   * @param init What failed.
   * @param options Standard error options (`cause`).
   */
  constructor(init: OciRuntimeErrorInit, options?: ErrorOptions) {
    const target = init.id === undefined ? "" : ` "${init.id}"`;
    const status = init.exitCode < 0 ? "could not be run" : `failed (exit status ${init.exitCode})`;
    const detail = init.runtimeMessage === "" ? "" : `: ${init.runtimeMessage}`;
    super(`${init.binary} ${init.command}${target} ${status}${detail}`, options);
    this.name = "OciRuntimeError";
    this.binary = init.binary;
    this.command = init.command;
    this.id = init.id;
    this.args = init.args;
    this.exitCode = init.exitCode;
    this.runtimeMessage = init.runtimeMessage;
  }
}

// Phrases meaning "the process is already gone" for a kill (runc, crun, Deno.kill).
const GONE_PATTERNS: readonly RegExp[] = [
  /container not running/i,
  /not found/i,
  /process already finished/i,
  /no such process/i,
  /\bESRCH\b/,
];

/**
 * Maps a failed kill to the code the Task API expects: NotFound when the process has already
 * gone ("container not running", "not found", "process already finished", "no such process",
 * ESRCH, or an error that is already NotFound), FailedPrecondition otherwise. A ConnectError
 * with any other code is returned unchanged.
 *
 * @param e What `kill()` (or `Deno.kill`) threw.
 * @returns A ConnectError to throw from the Task service.
 *
 * @example Usage
 * ```ts
 * import { Code } from "@connectrpc/connect";
 * import { mapKillError } from "./cli.ts";
 * const e = mapKillError(new Error("container not running"));
 * console.assert(e.code === Code.NotFound);
 * ```
 */
export function mapKillError(e: unknown): ConnectError {
  if (isStatusError(e)) return e;
  if (e instanceof Deno.errors.NotFound) {
    return statusError(`kill failed: process already finished: ${e.message}`, Code.NotFound);
  }
  const text = e instanceof OciRuntimeError
    ? `${e.runtimeMessage}\n${e.message}`
    : e instanceof Error
    ? e.message
    : String(e);
  const message = e instanceof Error ? e.message : String(e);
  if (GONE_PATTERNS.some((p) => p.test(text))) {
    return statusError(
      `kill failed: process already finished: ${message}`,
      Code.NotFound,
      e,
    );
  }
  return statusError(
    `kill failed: ${message}`,
    Code.FailedPrecondition,
    e,
  );
}

/**
 * True when an error says the container does not exist: a ConnectError with Code.NotFound, or
 * an OciRuntimeError whose runtime line says "does not exist" (runc, runsc) or that crun could
 * not open the container's state files. A shim's delete ignores such errors.
 *
 * @param e Anything thrown by an `OciRuntimeCli` method.
 * @returns Whether the container is already gone.
 *
 * @example Usage
 * ```ts
 * import { isNotExist, OciRuntimeError } from "./cli.ts";
 * const e = new OciRuntimeError({
 *   binary: "runc",
 *   command: "delete",
 *   id: "web",
 *   args: ["delete", "web"],
 *   exitCode: 1,
 *   runtimeMessage: "container does not exist",
 * });
 * console.assert(isNotExist(e));
 * ```
 */
export function isNotExist(e: unknown): boolean {
  if (isStatusError(e)) return e.code === Code.NotFound;
  if (e instanceof OciRuntimeError) return runtimeSaysMissing(e.runtimeMessage, e.id);
  if (e instanceof Error) return /does not exist/i.test(e.message);
  return false;
}

function runtimeSaysMissing(message: string, id: string | undefined): boolean {
  if (/does not exist/i.test(message)) return true;
  // crun names the state file or directory it could not open: "<root>/<id>/status".
  return id !== undefined && /No such file or directory/.test(message) &&
    (message.includes(`/${id}/`) || message.includes(`/${id}'`) || message.includes(`/${id}\``));
}

/**
 * Options of {@link readPidFile}.
 *
 * @example Usage
 * ```ts
 * import type { ReadPidFileOptions } from "./cli.ts";
 * const opts: ReadPidFileOptions = { attempts: 50, intervalMs: 20 };
 * ```
 */
export interface ReadPidFileOptions {
  /** How many reads to try before giving up. Defaults to 40. */
  attempts?: number;
  /** Pause between reads in milliseconds. Defaults to 25. */
  intervalMs?: number;
}

/**
 * Reads a pid file written by the runtime. The file can appear (or be completed) slightly after
 * the runtime command returns, so a missing, empty or partial file is re-read a few times.
 *
 * @param path The pid file.
 * @param options Retry policy.
 * @returns The pid (a positive integer).
 *
 * @example Usage
 * ```ts ignore
 * import { readPidFile } from "./cli.ts";
 * const pid = await readPidFile("/run/containerd/io.containerd.runtime.v2.task/default/web/init.pid");
 * ```
 */
export async function readPidFile(path: string, options: ReadPidFileOptions = {}): Promise<number> {
  const attempts = Math.max(1, options.attempts ?? 40);
  const intervalMs = options.intervalMs ?? 25;
  let last = "";
  for (let i = 0; i < attempts; i++) {
    try {
      const text = (await Deno.readTextFile(path)).trim();
      if (/^[0-9]+$/.test(text) && Number(text) > 0) return Number(text);
      last = `content ${JSON.stringify(text)}`;
    } catch (e) {
      if (!(e instanceof Deno.errors.NotFound)) throw e;
      last = "no such file";
    }
    if (i + 1 < attempts) await new Promise((r) => setTimeout(r, intervalMs));
  }
  throw new Error(`Cannot read pid file "${path}" after ${attempts} attempts: ${last}`);
}

/**
 * Drives a runc-compatible OCI runtime CLI (runc, runsc, crun) with the runc shim's conventions.
 * Methods addressing an existing container reject with a `ConnectError` (Code.NotFound) when
 * the runtime says it does not exist; `kill()` also when the process has already finished.
 * Other failures reject with an {@link OciRuntimeError}.
 *
 * @example Usage
 * ```ts ignore
 * import { OciRuntimeCli } from "./cli.ts";
 * const cli = new OciRuntimeCli({
 *   root: "/run/containerd/runc/default",
 *   log: `${bundle}/log.json`,
 *   spawn: (cmd) => reaper.spawn(cmd),
 * });
 * await cli.create("web", { bundle, pidFile: `${bundle}/init.pid`, io });
 * const pid = await readPidFile(`${bundle}/init.pid`);
 * await cli.start("web");
 * await cli.kill("web", 15);
 * await cli.delete("web");
 * ```
 */
export class OciRuntimeCli {
  #binary: string;
  #root: string | undefined;
  #log: string | undefined;
  #systemdCgroup: boolean;
  #globalArgs: readonly string[];
  #spawn: SpawnFn;
  #env: Record<string, string>;
  #noPivot: boolean;
  #noNewKeyring: boolean;
  #cwd: string | undefined;
  #stdioAt: "create" | "start";
  #psPids: "host" | "sandbox";
  /** With `stdioAt: "start"`: the stdio `create` was given, handed to `start`. */
  #deferredIo: ProcessStdio | undefined;
  /** How the init's exit is observed (see {@link OciRuntimeCliOptions.initExit}). */
  readonly initExit: "reap" | "wait";

  /**
   * Creates an adapter; nothing is spawned until a method is called.
   *
   * @param options Binary, global flags, create defaults and spawn hook.
   */
  constructor(options: OciRuntimeCliOptions = {}) {
    this.#binary = options.binary ?? "runc";
    this.#root = options.root;
    this.#log = options.log;
    this.#systemdCgroup = options.systemdCgroup ?? false;
    this.#globalArgs = [...(options.globalArgs ?? [])];
    this.#spawn = options.spawn ?? ((cmd) => cmd.spawn());
    this.#env = { ...(options.env ?? {}) };
    this.#noPivot = options.noPivot ?? false;
    this.#noNewKeyring = options.noNewKeyring ?? false;
    this.initExit = options.initExit ?? "reap";
    this.#cwd = options.cwd;
    this.#stdioAt = options.stdioAt ?? "create";
    this.#psPids = options.psPids ?? "host";
  }

  /**
   * The runtime executable.
   *
   * @example Usage
   * ```ts
   * import { OciRuntimeCli } from "./cli.ts";
   * console.assert(new OciRuntimeCli().binary === "runc");
   * ```
   */
  get binary(): string {
    return this.#binary;
  }

  /**
   * The global flags placed before every command.
   *
   * @example Usage
   * ```ts
   * import { OciRuntimeCli } from "./cli.ts";
   * const cli = new OciRuntimeCli({ root: "/run/r/default", log: "/b/log.json" });
   * console.assert(cli.globalArgs.join(" ") === "--root /run/r/default --log /b/log.json --log-format json");
   * ```
   */
  get globalArgs(): string[] {
    const args: string[] = [];
    if (this.#root !== undefined) args.push("--root", this.#root);
    if (this.#log !== undefined) args.push("--log", this.#log, "--log-format", "json");
    if (this.#systemdCgroup) args.push("--systemd-cgroup");
    args.push(...this.#globalArgs);
    return args;
  }

  /**
   * Returns a copy with some options replaced, e.g. a per-bundle `log`.
   *
   * @param patch Options to override.
   * @returns A new adapter.
   *
   * @example Usage
   * ```ts
   * import { OciRuntimeCli } from "./cli.ts";
   * const base = new OciRuntimeCli({ root: "/run/r/default" });
   * const perBundle = base.withOptions({ log: "/b/log.json" });
   * console.assert(perBundle.globalArgs.includes("/b/log.json"));
   * ```
   */
  withOptions(patch: OciRuntimeCliOptions): OciRuntimeCli {
    return new OciRuntimeCli({
      binary: this.#binary,
      root: this.#root,
      log: this.#log,
      systemdCgroup: this.#systemdCgroup,
      globalArgs: this.#globalArgs,
      spawn: this.#spawn,
      env: this.#env,
      noPivot: this.#noPivot,
      noNewKeyring: this.#noNewKeyring,
      initExit: this.initExit,
      cwd: this.#cwd,
      stdioAt: this.#stdioAt,
      psPids: this.#psPids,
      ...patch,
    });
  }

  /**
   * `create --bundle B --pid-file P [--console-socket S] [--no-pivot] [--no-new-keyring] ID`.
   * Resolves once the runtime command exits 0 (the container is then "created"); read the init
   * pid with {@link readPidFile}. Only the exit status is awaited: the container init keeps the
   * command's stdio open.
   *
   * @param id Container id.
   * @param options Bundle, pid file, console socket and stdio.
   *
   * @example Usage
   * ```ts ignore
   * await cli.create("web", { bundle, pidFile: `${bundle}/init.pid`, io });
   * const pid = await readPidFile(`${bundle}/init.pid`);
   * ```
   */
  async create(id: string, options: CreateOptions): Promise<void> {
    const args = ["--bundle", options.bundle, "--pid-file", options.pidFile];
    if (options.consoleSocket !== undefined) args.push("--console-socket", options.consoleSocket);
    if (options.noPivot ?? this.#noPivot) args.push("--no-pivot");
    if (options.noNewKeyring ?? this.#noNewKeyring) args.push("--no-new-keyring");
    args.push(...(options.extraArgs ?? []), id);
    const deferIo = this.#stdioAt === "start" && options.consoleSocket === undefined;
    this.#deferredIo = deferIo ? options.io : undefined;
    await this.#run("create", id, args, {
      detaches: true,
      io: deferIo ? undefined : options.io,
      addressesContainer: false,
      cwd: this.#cwd ?? options.bundle,
    });
  }

  /**
   * `start ID`: runs the user process of a created container. With `stdioAt: "start"`, the
   * stdio given to {@link OciRuntimeCli.create} is handed to this command instead.
   *
   * @param id Container id.
   *
   * @example Usage
   * ```ts ignore
   * await cli.start("web");
   * ```
   */
  async start(id: string): Promise<void> {
    const io = this.#deferredIo;
    this.#deferredIo = undefined;
    // With deferred stdio, `start` is the command whose stdio the process keeps.
    await this.#run("start", id, [id], io ? { io, detaches: true } : {});
  }

  /**
   * `state ID`, parsed.
   *
   * @param id Container id.
   * @returns The container state.
   *
   * @example Usage
   * ```ts ignore
   * const { status, pid } = await cli.state("web");
   * ```
   */
  async state(id: string): Promise<OciState> {
    const out = await this.#run("state", id, [id]);
    const value = this.#parseJson("state", id, out);
    if (
      typeof value !== "object" || value === null || typeof value.id !== "string" ||
      typeof value.pid !== "number" || typeof value.status !== "string"
    ) {
      throw this.#badOutput("state", id, out);
    }
    return value as unknown as OciState;
  }

  /**
   * `kill [--all] ID SIGNAL`. Rejects with a ConnectError (Code.NotFound) when the container
   * is not running any more, whatever the runtime's wording (the state is checked when the
   * message is not conclusive).
   *
   * @param id Container id.
   * @param signal Signal number.
   * @param options `all` adds `--all`.
   *
   * @example Usage
   * ```ts ignore
   * await cli.kill("web", 9, { all: true });
   * ```
   */
  async kill(id: string, signal: number, options: KillOptions = {}): Promise<void> {
    const args = options.all ? ["--all", id, String(signal)] : [id, String(signal)];
    try {
      await this.#run("kill", id, args);
    } catch (e) {
      if (!(e instanceof OciRuntimeError)) throw e;
      if (GONE_PATTERNS.some((p) => p.test(e.runtimeMessage))) throw mapKillError(e);
      // runsc words a stopped sandbox as a refused control connection; ask for the state.
      let status: string;
      try {
        status = (await this.state(id)).status;
      } catch (stateError) {
        if (isNotExist(stateError)) throw stateError;
        throw e;
      }
      if (status === "stopped") {
        throw statusError(
          `kill failed: process already finished: ${e.message}`,
          Code.NotFound,
          e,
        );
      }
      throw e;
    }
  }

  /**
   * `delete [--force] ID`. A missing container rejects with a ConnectError (Code.NotFound);
   * callers that tolerate it check {@link isNotExist}.
   *
   * @param id Container id.
   * @param options `force` adds `--force`.
   *
   * @example Usage
   * ```ts ignore
   * try {
   *   await cli.delete("web", { force: true });
   * } catch (e) {
   *   if (!isNotExist(e)) throw e;
   * }
   * ```
   */
  async delete(id: string, options: DeleteOptions = {}): Promise<void> {
    await this.#run("delete", id, options.force ? ["--force", id] : [id]);
  }

  /**
   * `exec --process F --detach --pid-file P [--console-socket S] ID`, with the OCI Process
   * JSON written to a temporary file that is removed afterwards. Resolves once the runtime
   * command has exited 0; the process pid is then in `pidFile` (see {@link readPidFile}).
   *
   * @param id Container id.
   * @param process The OCI `process` object (args, env, cwd, user, terminal, ...).
   * @param options Pid file, console socket and stdio.
   *
   * @example Usage
   * ```ts ignore
   * await cli.exec("web", { args: ["sh", "-c", "echo hi"], cwd: "/", env: [] }, {
   *   pidFile: `${bundle}/exec1.pid`,
   *   io,
   *   detach: true,
   * });
   * ```
   */
  async exec(
    id: string,
    process: Record<string, unknown>,
    options: ExecOptions,
  ): Promise<void> {
    const file = await Deno.makeTempFile({
      dir: runtimeDir(),
      prefix: "skiff-process-",
      suffix: ".json",
    });
    try {
      await Deno.writeTextFile(file, JSON.stringify(process));
      const args = ["--process", file, "--detach", "--pid-file", options.pidFile];
      if (options.consoleSocket !== undefined) args.push("--console-socket", options.consoleSocket);
      args.push(...(options.extraArgs ?? []), id);
      await this.#run("exec", id, args, { detaches: true, io: options.io });
    } finally {
      await Deno.remove(file).catch(() => {});
    }
  }

  /**
   * `ps --format json ID`: the container's pids as the runtime reports them (host pids for
   * runc and crun; sandbox-internal pids for runsc). With `psPids: "sandbox"`, none, without
   * running the command.
   *
   * @param id Container id.
   * @returns The pids.
   *
   * @example Usage
   * ```ts ignore
   * const pids = await cli.ps("web");
   * ```
   */
  async ps(id: string): Promise<number[]> {
    if (this.#psPids === "sandbox") return [];
    const out = await this.#run("ps", id, ["--format", "json", id]);
    const value = this.#parseJson("ps", id, out);
    if (value === null) return [];
    if (!Array.isArray(value) || !value.every((p) => typeof p === "number")) {
      throw this.#badOutput("ps", id, out);
    }
    return value as number[];
  }

  /**
   * `pause ID`: freezes every process of the container.
   *
   * @param id Container id.
   *
   * @example Usage
   * ```ts ignore
   * await cli.pause("web");
   * ```
   */
  async pause(id: string): Promise<void> {
    await this.#run("pause", id, [id]);
  }

  /**
   * `resume ID`: thaws a paused container.
   *
   * @param id Container id.
   *
   * @example Usage
   * ```ts ignore
   * await cli.resume("web");
   * ```
   */
  async resume(id: string): Promise<void> {
    await this.#run("resume", id, [id]);
  }

  /**
   * `update --resources - ID` with the OCI `LinuxResources` JSON on stdin.
   *
   * @param id Container id.
   * @param resources OCI `linux.resources` object.
   *
   * @example Usage
   * ```ts ignore
   * await cli.update("web", { memory: { limit: 64 * 1024 * 1024 } });
   * ```
   */
  async update(id: string, resources: Record<string, unknown>): Promise<void> {
    const input = new TextEncoder().encode(JSON.stringify(resources));
    await this.#run("update", id, ["--resources", "-", id], { input });
  }

  /**
   * `checkpoint --image-path I [--work-path W] [--parent-path P] [--leave-running]
   * [--tcp-established] [--ext-unix-sk] [--shell-job] [--file-locks] [--empty-ns X]...
   * [--manage-cgroups-mode M] ID`.
   *
   * @param id Container id.
   * @param options Image and work paths and CRIU flags.
   *
   * @example Usage
   * ```ts ignore
   * await cli.checkpoint("web", { imagePath: "/var/ckpt", workPath: `${bundle}/work`, leaveRunning: true });
   * ```
   */
  async checkpoint(id: string, options: CheckpointOptions): Promise<void> {
    const args = ["--image-path", options.imagePath];
    if (options.workPath !== undefined) args.push("--work-path", options.workPath);
    if (options.parentPath !== undefined) args.push("--parent-path", options.parentPath);
    if (options.leaveRunning) args.push("--leave-running");
    args.push(...criuFlags(options), id);
    await this.#run("checkpoint", id, args);
  }

  /**
   * `restore --bundle B --image-path I [--work-path W] --detach --pid-file P
   * [--console-socket S] [--no-pivot] [--no-subreaper] [CRIU flags] ID`. Resolves once the
   * runtime command has exited 0; the restored init pid is then in `pidFile`.
   *
   * @param id Container id.
   * @param options Bundle, image, pid file, stdio and CRIU flags.
   *
   * @example Usage
   * ```ts ignore
   * await cli.restore("web", { bundle, imagePath: "/var/ckpt", pidFile: `${bundle}/init.pid`, io });
   * ```
   */
  async restore(id: string, options: RestoreOptions): Promise<void> {
    const args = ["--bundle", options.bundle, "--image-path", options.imagePath];
    if (options.workPath !== undefined) args.push("--work-path", options.workPath);
    args.push("--detach", "--pid-file", options.pidFile);
    if (options.consoleSocket !== undefined) args.push("--console-socket", options.consoleSocket);
    if (options.noPivot ?? this.#noPivot) args.push("--no-pivot");
    if (options.noSubreaper) args.push("--no-subreaper");
    args.push(...criuFlags(options), ...(options.extraArgs ?? []), id);
    await this.#run("restore", id, args, {
      detaches: true,
      io: options.io,
      addressesContainer: false,
      cwd: this.#cwd ?? options.bundle,
    });
  }

  /**
   * `wait ID` (runsc): blocks until the container's init exits and returns its exit status.
   * runc and crun have no such command; use it with `initExit: "wait"` runtimes.
   *
   * @param id Container id.
   * @returns The exit status (128 + signal when a signal killed it).
   *
   * @example Usage
   * ```ts ignore
   * const status = await new OciRuntimeCli({ binary: "runsc", initExit: "wait" }).wait("web");
   * ```
   */
  async wait(id: string): Promise<number> {
    const out = await this.#run("wait", id, [id]);
    const value = this.#parseJson("wait", id, out);
    const status = (value as { exitStatus?: unknown } | null)?.exitStatus;
    if (typeof status !== "number") throw this.#badOutput("wait", id, out);
    return status;
  }

  /**
   * `events --stats ID`: one statistics event.
   *
   * @param id Container id.
   * @param _options Only `{ stats: true }` is supported.
   * @returns The parsed event.
   *
   * @example Usage
   * ```ts ignore
   * const { data } = await cli.events("web", { stats: true });
   * ```
   */
  async events(id: string, _options: EventsOptions = { stats: true }): Promise<OciEvent> {
    const out = await this.#run("events", id, ["--stats", id]);
    const value = this.#parseJson("events", id, out);
    if (typeof value !== "object" || value === null || typeof value.type !== "string") {
      throw this.#badOutput("events", id, out);
    }
    return value as unknown as OciEvent;
  }

  /**
   * `--version`: the version token of the first line ("1.1.5+ds1" from "runc version
   * 1.1.5+ds1"), or the whole first line when it has no such token.
   *
   * @returns The runtime version.
   *
   * @example Usage
   * ```ts ignore
   * const v = await new OciRuntimeCli({ binary: "runsc" }).version();
   * ```
   */
  async version(): Promise<string> {
    const out = await this.#run("--version", undefined, [], { global: false });
    const first = out.split("\n").find((l) => l.trim() !== "")?.trim() ?? "";
    return /\bversion\s+(\S+)/i.exec(first)?.[1] ?? first;
  }

  /**
   * `features` (runtime-spec features.md): what the runtime supports, e.g. `rro` among its
   * mount options. Run like containerd's runc shim runs it: no global flags, no container.
   *
   * @returns The parsed document; throws when the runtime has no such command (runsc, older
   *   runc) or prints something that is not a JSON object.
   *
   * @example Usage
   * ```ts ignore
   * const f = await new OciRuntimeCli({ binary: "runc" }).features();
   * console.log(f.mountOptions?.includes("rro"));
   * ```
   */
  async features(): Promise<OciFeatures> {
    const out = await this.#run("features", undefined, [], { global: false });
    try {
      return parseOciFeatures(out);
    } catch (e) {
      throw new OciRuntimeError({
        binary: this.#binary,
        command: "features",
        args: ["features"],
        exitCode: 0,
        runtimeMessage: (e as Error).message,
      });
    }
  }

  async #run(
    command: string,
    id: string | undefined,
    args: string[],
    opts: RunOptions = {},
  ): Promise<string> {
    const argv = [...(opts.global === false ? [] : this.globalArgs), command, ...args];
    // Per-container commands run in the bundle; the others where the caller is.
    const cwd = await existingDir(id === undefined ? undefined : opts.cwd ?? this.#cwd);
    const ownStdio = opts.io === undefined;
    let stdio: { stdin: StdioMode; stdout: StdioMode; stderr: StdioMode };
    if (opts.io !== undefined) stdio = { ...opts.io.stdio };
    else if (opts.detaches) {
      // Descendants keep these open; a pipe we stopped reading would give them EPIPE, so stderr
      // is only piped when there is no log file to read the error from.
      stdio = { stdin: "null", stdout: "null", stderr: this.#log === undefined ? "piped" : "null" };
    } else {
      stdio = { stdin: opts.input ? "piped" : "null", stdout: "piped", stderr: "piped" };
    }
    const logOffset = this.#log === undefined ? 0 : await fileSize(this.#log);
    const fail = (exitCode: number, runtimeMessage: string, cause?: unknown) => {
      const err = new OciRuntimeError(
        { binary: this.#binary, command, id, args: argv, exitCode, runtimeMessage },
        cause === undefined ? undefined : { cause },
      );
      if ((opts.addressesContainer ?? true) && id !== undefined && isNotExist(err)) {
        return statusError(err.message, Code.NotFound, err);
      }
      return err;
    };

    let child: Deno.ChildProcess;
    try {
      child = this.#spawn(
        new Deno.Command(this.#binary, {
          args: argv,
          ...stdio,
          ...commandEnv(this.#env),
          ...(cwd === undefined ? {} : { cwd }),
        }),
      );
    } catch (e) {
      throw fail(-1, e instanceof Error ? e.message : String(e), e);
    }
    if (opts.io !== undefined) opts.io.attach(child);

    const stdout = ownStdio && stdio.stdout === "piped" ? new Collector(child.stdout) : undefined;
    const stderr = ownStdio && stdio.stderr === "piped" ? new Collector(child.stderr) : undefined;
    if (ownStdio && stdio.stdin === "piped") {
      const writer = child.stdin.getWriter();
      try {
        if (opts.input) await writer.write(opts.input);
        await writer.close();
      } catch {
        // The runtime exited without reading its input; its exit status says why.
      }
    }

    const status = await child.status;
    if (status.success && opts.detaches) {
      // Keep draining (and discarding) so the container never writes into a closed pipe.
      stderr?.discardRest();
      return "";
    }
    await drain([stdout, stderr]);
    if (status.success) return stdout?.text() ?? "";

    const fromLog = this.#log === undefined ? undefined : await lastLogError(this.#log, logOffset);
    throw fail(status.code, fromLog ?? tail(stderr?.text() ?? ""));
  }

  #parseJson(command: string, id: string, out: string): Record<string, unknown> | null {
    const value = firstJsonValue(out);
    if (value === undefined) throw this.#badOutput(command, id, out);
    return value as Record<string, unknown> | null;
  }

  #badOutput(command: string, id: string, out: string): OciRuntimeError {
    return new OciRuntimeError({
      binary: this.#binary,
      command,
      id,
      args: [command, id],
      exitCode: 0,
      runtimeMessage: `unexpected output ${JSON.stringify(tail(out))}`,
    });
  }
}

interface RunOptions {
  /** The command leaves descendants holding its stdio (create, exec, restore). */
  detaches?: boolean;
  io?: ProcessStdio | undefined;
  input?: Uint8Array;
  /** Prepend the global flags (false for `--version`). */
  global?: boolean;
  /** Map "does not exist" to NotFound (false for create/restore, where it means the bundle). */
  addressesContainer?: boolean;
  /** Working directory for this command (create/restore: their bundle). */
  cwd?: string;
}

/** `dir` when it is an existing directory, else undefined (run where the caller is). */
async function existingDir(dir: string | undefined): Promise<string | undefined> {
  if (dir === undefined) return undefined;
  return await Deno.stat(dir).then((st) => st.isDirectory ? dir : undefined, () => undefined);
}

function criuFlags(o: CriuOptions): string[] {
  const args: string[] = [];
  if (o.tcpEstablished) args.push("--tcp-established");
  if (o.extUnixSk) args.push("--ext-unix-sk");
  if (o.shellJob) args.push("--shell-job");
  if (o.fileLocks) args.push("--file-locks");
  for (const ns of o.emptyNs ?? []) args.push("--empty-ns", ns);
  if (o.cgroupsMode !== undefined) args.push("--manage-cgroups-mode", o.cgroupsMode);
  return args;
}

function commandEnv(
  extra: Record<string, string>,
): { env: Record<string, string>; clearEnv: boolean } {
  try {
    // The shim's NOTIFY_SOCKET (if systemd started containerd) must not reach the runtime.
    const env = Deno.env.toObject();
    delete env.NOTIFY_SOCKET;
    return { env: { ...env, ...extra }, clearEnv: true };
  } catch {
    return { env: extra, clearEnv: false };
  }
}

function runtimeDir(): string | undefined {
  try {
    return Deno.env.get("XDG_RUNTIME_DIR") || undefined;
  } catch {
    return undefined;
  }
}

async function fileSize(path: string): Promise<number> {
  try {
    return (await Deno.stat(path)).size;
  } catch {
    return 0;
  }
}

/** The message of the last error entry written to the log at or after `offset`. */
async function lastLogError(path: string, offset: number): Promise<string | undefined> {
  let bytes: Uint8Array;
  try {
    bytes = await Deno.readFile(path);
  } catch {
    return undefined;
  }
  // A log that shrank was truncated or replaced: read all of it.
  const fresh = bytes.length >= offset ? bytes.subarray(offset) : bytes;
  return lastErrorEntry(new TextDecoder().decode(fresh));
}

function lastErrorEntry(text: string): string | undefined {
  let found: string | undefined;
  for (const entry of jsonObjects(text)) {
    if (
      typeof entry.msg === "string" &&
      (entry.level === "error" || entry.level === "fatal" || entry.level === "panic")
    ) {
      found = entry.msg;
    }
  }
  if (found !== undefined) return found;
  // Text format: level=error msg="..."
  for (const m of text.matchAll(/level=(?:error|fatal|panic) msg="((?:[^"\\]|\\.)*)"/g)) {
    try {
      found = JSON.parse(`"${m[1]}"`);
    } catch {
      found = m[1];
    }
  }
  return found;
}

/** Yields each top-level JSON object in `text`, whether newline-separated or concatenated. */
function* jsonObjects(text: string): Generator<Record<string, unknown>> {
  let depth = 0;
  let start = -1;
  let inString = false;
  let escaped = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (escaped) escaped = false;
      else if (c === "\\") escaped = true;
      else if (c === '"') inString = false;
      continue;
    }
    if (c === '"' && depth > 0) inString = true;
    else if (c === "{") {
      if (depth++ === 0) start = i;
    } else if (c === "}" && depth > 0 && --depth === 0) {
      try {
        const v = JSON.parse(text.slice(start, i + 1));
        if (typeof v === "object" && v !== null) yield v as Record<string, unknown>;
      } catch {
        // Not JSON after all; keep scanning.
      }
    }
  }
}

function firstJsonValue(text: string): unknown {
  const trimmed = text.trim();
  try {
    return JSON.parse(trimmed);
  } catch {
    // Some runtimes print a trailing line after the JSON; take the first object.
    for (const o of jsonObjects(trimmed)) return o;
    return undefined;
  }
}

function tail(text: string): string {
  const t = text.trim();
  return t.length <= 2048 ? t : `...${t.slice(-2048)}`;
}

const COLLECT_LIMIT = 1 << 20;

/** Reads a stream in the background, keeping at most COLLECT_LIMIT bytes. */
class Collector {
  #chunks: Uint8Array[] = [];
  #size = 0;
  #reader: ReadableStreamDefaultReader<Uint8Array>;
  #discard = false;
  readonly done: Promise<void>;

  constructor(stream: ReadableStream<Uint8Array>) {
    this.#reader = stream.getReader();
    this.done = this.#pump();
  }

  async #pump(): Promise<void> {
    try {
      for (;;) {
        const { done, value } = await this.#reader.read();
        if (done) return;
        if (this.#discard || this.#size >= COLLECT_LIMIT) continue;
        this.#chunks.push(value);
        this.#size += value.length;
      }
    } catch {
      // Cancelled or the pipe broke: what was read so far is all there is.
    }
  }

  discardRest(): void {
    this.#discard = true;
    this.#chunks = [];
  }

  async cancel(): Promise<void> {
    await this.#reader.cancel().catch(() => {});
    await this.done;
  }

  text(): string {
    const all = new Uint8Array(this.#size);
    let at = 0;
    for (const c of this.#chunks) {
      all.set(c.subarray(0, Math.min(c.length, this.#size - at)), at);
      at += c.length;
    }
    return new TextDecoder().decode(all);
  }
}

// After the runtime exits, its output is complete in the pipe; wait that long at most for EOF
// in case a descendant (e.g. a runsc gofer) still holds the write end.
const DRAIN_MS = 2000;

async function drain(collectors: (Collector | undefined)[]): Promise<void> {
  const live = collectors.filter((c): c is Collector => c !== undefined);
  if (live.length === 0) return;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<"timeout">((r) => timer = setTimeout(() => r("timeout"), DRAIN_MS));
  const result = await Promise.race([Promise.all(live.map((c) => c.done)), timeout]);
  clearTimeout(timer);
  if (result === "timeout") await Promise.all(live.map((c) => c.cancel()));
}
