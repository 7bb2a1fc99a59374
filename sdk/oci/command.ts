/**
 * The adapter's settings with their defaults, and one runtime command run to completion: its
 * environment and working directory, how its stdio is wired (the caller's `ProcessStdio`,
 * /dev/null for commands that leave a container holding their stdio, pipes otherwise), its output
 * collected in the background (bounded, so a chatty runtime cannot grow the shim), and its
 * failure described as an {@link OciRuntimeError}.
 *
 * @module
 */

import { Code, statusError } from "../ttrpc/status_error.ts";
import { isNotExist, OciRuntimeError } from "./errors.ts";
import type { OciRuntimeCliOptions, ProcessStdio, SpawnFn, StdioMode } from "./options.ts";
import { firstJsonValue, lastLogError, logSize, tail } from "./runtime_log.ts";

/** The adapter's settings every command shares. */
export interface CommandRunner {
  /** Runtime executable. */
  readonly binary: string;
  /** Spawns the command (the shim's subreaper). */
  readonly spawn: SpawnFn;
  /** Extra environment. */
  readonly env: Record<string, string>;
  /** The `--log` file the command's error is read from, if any. */
  readonly log?: string;
}

/** {@link OciRuntimeCliOptions} with the defaults applied (root, log and cwd stay optional). */
export type CliSettings =
  & Required<Omit<OciRuntimeCliOptions, "root" | "log" | "cwd">>
  & Pick<OciRuntimeCliOptions, "root" | "log" | "cwd">;

/**
 * Fills in the defaults of {@link OciRuntimeCliOptions} (runc, the caller's spawn, create's
 * flags off, exits reaped, stdio at create, host pids) and copies its arrays and records.
 *
 * @param options What the caller set.
 * @returns Every setting.
 */
export function cliSettings(options: OciRuntimeCliOptions): CliSettings {
  return {
    binary: options.binary ?? "runc",
    root: options.root,
    log: options.log,
    systemdCgroup: options.systemdCgroup ?? false,
    globalArgs: [...(options.globalArgs ?? [])],
    spawn: options.spawn ?? ((cmd) => cmd.spawn()),
    env: { ...(options.env ?? {}) },
    noPivot: options.noPivot ?? false,
    noNewKeyring: options.noNewKeyring ?? false,
    initExit: options.initExit ?? "reap",
    cwd: options.cwd,
    stdioAt: options.stdioAt ?? "create",
    psPids: options.psPids ?? "host",
  };
}

/** How one command runs. */
export interface RunOptions {
  /** The command leaves descendants holding its stdio (create, exec, restore). */
  detaches?: boolean;
  /** The stdio the container process inherits (create, exec, restore; start with runsc). */
  io?: ProcessStdio | undefined;
  /** Bytes written to the command's stdin (update's resources). */
  input?: Uint8Array;
  /** Map "does not exist" to NotFound (false for create/restore, where it means the bundle). */
  addressesContainer?: boolean;
  /** Working directory; used only when it still exists (a late delete runs where we are). */
  cwd?: string;
  /**
   * Called once, when the first bytes of the command's stdout have been read into this process
   * (a `wait` whose answer is in hand: a live upgrade must not replace the process image now).
   */
  onOutput?: () => void;
}

type Stdio = { stdin: StdioMode; stdout: StdioMode; stderr: StdioMode };

/**
 * Runs `runner.binary argv...` and resolves with its stdout ("" for a detaching command), or
 * rejects with an {@link OciRuntimeError} carrying the runtime's last error line (a ConnectError
 * with Code.NotFound when it says the container `id` does not exist).
 *
 * @param runner The adapter's binary, spawn hook, environment and log file.
 * @param command The subcommand, for the error message.
 * @param id The container the command addresses, if any.
 * @param argv The full argument list.
 * @param opts Stdio, input and working directory.
 * @returns The command's stdout.
 */
export async function runCommand(
  runner: CommandRunner,
  command: string,
  id: string | undefined,
  argv: string[],
  opts: RunOptions = {},
): Promise<string> {
  const cwd = await existingDir(opts.cwd);
  const ownStdio = opts.io === undefined;
  const stdio = stdioFor(opts, runner.log);
  const logOffset = runner.log === undefined ? 0 : await logSize(runner.log);
  const fail = (exitCode: number, runtimeMessage: string, cause?: unknown) => {
    const err = new OciRuntimeError(
      { binary: runner.binary, command, id, args: argv, exitCode, runtimeMessage },
      cause === undefined ? undefined : { cause },
    );
    if ((opts.addressesContainer ?? true) && id !== undefined && isNotExist(err)) {
      return statusError(err.message, Code.NotFound, err);
    }
    return err;
  };

  let child: Deno.ChildProcess;
  try {
    child = runner.spawn(
      new Deno.Command(runner.binary, {
        args: argv,
        ...stdio,
        ...commandEnv(runner.env),
        ...(cwd === undefined ? {} : { cwd }),
      }),
    );
  } catch (e) {
    throw fail(-1, e instanceof Error ? e.message : String(e), e);
  }
  if (opts.io !== undefined) opts.io.attach(child);

  const stdout = ownStdio && stdio.stdout === "piped"
    ? new Collector(child.stdout, opts.onOutput)
    : undefined;
  const stderr = ownStdio && stdio.stderr === "piped" ? new Collector(child.stderr) : undefined;
  if (ownStdio && stdio.stdin === "piped") await writeInput(child, opts.input);

  const status = await child.status;
  if (status.success && opts.detaches) {
    // Keep draining (and discarding) so the container never writes into a closed pipe.
    stderr?.discardRest();
    return "";
  }
  await drain([stdout, stderr]);
  if (status.success) return stdout?.text() ?? "";

  const fromLog = runner.log === undefined ? undefined : await lastLogError(runner.log, logOffset);
  throw fail(status.code, fromLog ?? tail(stderr?.text() ?? ""));
}

/**
 * The JSON a command printed, when `valid` accepts it; otherwise an {@link OciRuntimeError}
 * quoting the output ("unexpected output ...").
 *
 * @param binary Runtime executable, for the error.
 * @param command The subcommand.
 * @param id The container id.
 * @param out The command's stdout.
 * @param valid Whether the parsed value has the expected shape.
 * @returns The parsed value.
 */
export function outputJson<T>(
  binary: string,
  command: string,
  id: string,
  out: string,
  valid: (v: never) => boolean,
): T {
  const value = firstJsonValue(out);
  if (value === undefined || !valid(value as never)) {
    throw new OciRuntimeError({
      binary,
      command,
      id,
      args: [command, id],
      exitCode: 0,
      runtimeMessage: `unexpected output ${JSON.stringify(tail(out))}`,
    });
  }
  return value as T;
}

/**
 * Runs `fn` with the OCI `process` JSON in a temporary file (exec's `--process`), removed after.
 *
 * @param process The OCI process object.
 * @param fn What runs with the file's path.
 * @returns What `fn` returns.
 */
export async function withProcessFile<T>(
  process: Record<string, unknown>,
  fn: (file: string) => Promise<T>,
): Promise<T> {
  const file = await Deno.makeTempFile({
    dir: runtimeDir(),
    prefix: "skiff-process-",
    suffix: ".json",
  });
  try {
    await Deno.writeTextFile(file, JSON.stringify(process));
    return await fn(file);
  } finally {
    await Deno.remove(file).catch(() => {});
  }
}

function stdioFor(opts: RunOptions, log: string | undefined): Stdio {
  if (opts.io !== undefined) return { ...opts.io.stdio };
  if (opts.detaches) {
    // Descendants keep these open; a pipe we stopped reading would give them EPIPE, so stderr
    // is only piped when there is no log file to read the error from.
    return { stdin: "null", stdout: "null", stderr: log === undefined ? "piped" : "null" };
  }
  return { stdin: opts.input ? "piped" : "null", stdout: "piped", stderr: "piped" };
}

async function writeInput(child: Deno.ChildProcess, input: Uint8Array | undefined): Promise<void> {
  const writer = child.stdin.getWriter();
  try {
    if (input) await writer.write(input);
    await writer.close();
  } catch {
    // The runtime exited without reading its input; its exit status says why.
  }
}

/** `dir` when it is an existing directory, else undefined (run where the caller is). */
async function existingDir(dir: string | undefined): Promise<string | undefined> {
  if (dir === undefined) return undefined;
  return await Deno.stat(dir).then((st) => st.isDirectory ? dir : undefined, () => undefined);
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

const COLLECT_LIMIT = 1 << 20;

/** Reads a stream in the background, keeping at most COLLECT_LIMIT bytes. */
class Collector {
  #chunks: Uint8Array[] = [];
  #size = 0;
  #reader: ReadableStreamDefaultReader<Uint8Array>;
  #discard = false;
  #onFirst: (() => void) | undefined;
  readonly done: Promise<void>;

  constructor(stream: ReadableStream<Uint8Array>, onFirst?: () => void) {
    this.#reader = stream.getReader();
    this.#onFirst = onFirst;
    this.done = this.#pump();
  }

  async #pump(): Promise<void> {
    try {
      for (;;) {
        const { done, value } = await this.#reader.read();
        if (done) return;
        if (value.length > 0 && this.#onFirst) {
          const first = this.#onFirst;
          this.#onFirst = undefined;
          first();
        }
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
