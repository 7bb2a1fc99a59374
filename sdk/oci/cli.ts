/**
 * An adapter for runc-compatible OCI runtime command lines (runc, runsc, crun).
 *
 * Every method spawns one runtime command through an injected `spawn` function, so a shim can
 * route the children through its subreaper (`Reaper.spawn`) and keep their exit statuses.
 * Global flags follow the runc shim: `--root <root> --log <log> --log-format json
 * [--systemd-cgroup] <globalArgs...> <command> ...`.
 *
 * See the package doc (`mod.ts`) for the differences between runc, runsc and crun it tolerates.
 *
 * @module
 */
// long: over 500 lines with its runnable JSDoc examples (one per runtime command); the code (~260
// lines) is the OciRuntimeCli class only

import {
  type CliSettings,
  cliSettings,
  outputJson,
  runCommand,
  type RunOptions,
  withProcessFile,
} from "./command.ts";
import { isNotExist, mapKillError, OciRuntimeError, processGone, saysGone } from "./errors.ts";
import { type OciFeatures, parseOciFeatures } from "./features.ts";
import type { RuntimeProcess, RuntimeProcessCarry, RuntimeStdio } from "../shim/runtime.ts";
import type {
  CheckpointOptions,
  CreateOptions,
  CriuOptions,
  DeleteOptions,
  EventsOptions,
  ExecOptions,
  KillOptions,
  OciEvent,
  OciRuntimeCliOptions,
  OciState,
  ProcessStdio,
  RestoreOptions,
} from "./options.ts";

/**
 * Drives a runc-compatible OCI runtime CLI (runc, runsc, crun) with the runc shim's conventions.
 * Methods addressing an existing container reject with a `ConnectError` (Code.NotFound) when
 * the runtime says it does not exist; `kill()` also when the process has already finished.
 * Other failures reject with an {@link OciRuntimeError}.
 *
 * @example Usage
 * ```ts ignore
 * import { OciRuntimeCli } from "@skiff/shim";
 * const cli = new OciRuntimeCli({
 *   root: "/run/containerd/runc/default",
 *   log: `${bundle}/log.json`,
 *   spawn: (cmd) => reaper.spawn(cmd),
 * });
 * const { pid } = await cli.create("web", { bundle, io });
 * await cli.start("web");
 * await cli.kill("web", 15);
 * await cli.delete("web");
 * ```
 */
export class OciRuntimeCli {
  /** The options with their defaults filled in. */
  readonly #o: CliSettings;
  /** With `stdioAt: "start"`: the stdio `create` was given, handed to `start`. */
  #deferredIo: ProcessStdio | undefined;
  /** With `initExit: "wait"`: the inits' exits, settled by a `wait` run from start/restore. */
  #exits = new Map<string, PromiseWithResolvers<number>>();
  /**
   * `wait` commands running, by pid: the container, and whether its answer has begun to arrive
   * (read by Deno's pipe reader, which reads ahead: from then on the answer is in this code's
   * memory only, and an upgrade that carried the pipe would hand on an answer already taken).
   */
  #waiting = new Map<number, { id: string; answered: boolean }>();
  /** Outputs of `wait` commands the previous code started, by container id. */
  #answers = new Map<string, { fd: number; errors: number; read: boolean }>();

  /**
   * Creates an adapter; nothing is spawned until a method is called.
   *
   * @param options Binary, global flags, create defaults and spawn hook.
   */
  constructor(options: OciRuntimeCliOptions = {}) {
    this.#o = cliSettings(options);
  }

  /**
   * The runtime executable.
   *
   * @example Usage
   * ```ts
   * import { strictEqual } from "node:assert/strict";
   * import { OciRuntimeCli } from "@skiff/shim";
   * strictEqual(new OciRuntimeCli().binary, "runc");
   * ```
   */
  get binary(): string {
    return this.#o.binary;
  }

  /**
   * The global flags placed before every command.
   *
   * @example Usage
   * ```ts
   * import { strictEqual } from "node:assert/strict";
   * import { OciRuntimeCli } from "@skiff/shim";
   * const cli = new OciRuntimeCli({ root: "/run/r/default", log: "/b/log.json" });
   * strictEqual(cli.globalArgs.join(" "), "--root /run/r/default --log /b/log.json --log-format json");
   * ```
   */
  get globalArgs(): string[] {
    const args: string[] = [];
    if (this.#o.root !== undefined) args.push("--root", this.#o.root);
    if (this.#o.log !== undefined) args.push("--log", this.#o.log, "--log-format", "json");
    if (this.#o.systemdCgroup) args.push("--systemd-cgroup");
    args.push(...this.#o.globalArgs);
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
   * import { strictEqual } from "node:assert/strict";
   * import { OciRuntimeCli } from "@skiff/shim";
   * const base = new OciRuntimeCli({ root: "/run/r/default" });
   * const perBundle = base.withOptions({ log: "/b/log.json" });
   * strictEqual(perBundle.globalArgs.includes("/b/log.json"), true);
   * ```
   */
  withOptions(patch: OciRuntimeCliOptions): OciRuntimeCli {
    return new OciRuntimeCli({ ...this.#o, ...patch });
  }

  /**
   * `create --bundle B --pid-file P [--console-socket S] [--no-pivot] [--no-new-keyring] ID`.
   * Resolves once the runtime command exits 0 (the container is then "created") with the init
   * read from the pid file. Only the exit status is awaited: the container init keeps the
   * command's stdio open.
   *
   * @param id Container id.
   * @param options Bundle, pid file, console socket and stdio.
   * @returns The init: its host pid, and with `initExit: "wait"` its exit (from `start` on).
   *
   * @example Usage
   * ```ts ignore
   * const { pid } = await cli.create("web", { bundle, io });
   * ```
   */
  async create(id: string, options: CreateOptions): Promise<RuntimeProcess> {
    const pidFile = options.pidFile ?? `${options.bundle}/init.pid`;
    const { consoleSocket, pipes } = stdioOf(options);
    const args = ["--bundle", options.bundle, "--pid-file", pidFile];
    if (consoleSocket !== undefined) args.push("--console-socket", consoleSocket);
    if (options.noPivot ?? this.#o.noPivot) args.push("--no-pivot");
    if (options.noNewKeyring ?? this.#o.noNewKeyring) args.push("--no-new-keyring");
    args.push(...(options.extraArgs ?? []), id);
    const deferIo = this.#o.stdioAt === "start" && consoleSocket === undefined;
    this.#deferredIo = deferIo ? pipes : undefined;
    await this.#run("create", id, args, {
      detaches: true,
      io: deferIo ? undefined : pipes,
      addressesContainer: false,
      cwd: this.#o.cwd ?? options.bundle,
    });
    return this.#init(id, await readPidFile(pidFile));
  }

  /** The init with `pid`; with `initExit: "wait"`, its exit comes from a later `wait`. */
  #init(id: string, pid: number): RuntimeProcess {
    if (this.#o.initExit !== "wait") return { pid };
    const exit = Promise.withResolvers<number>();
    exit.promise.catch(() => {}); // a container deleted before Start never waits
    this.#exits.set(id, exit);
    return { pid, exited: exit.promise };
  }

  /**
   * After a live upgrade: the process's exit report again. With `initExit: "wait"` the init's
   * exit comes from a new `wait` (now if it was started, else from `start`); every other
   * process is reaped by the shim, which needs nothing from here.
   *
   * @param id Container id.
   * @param process the process as the previous code knew it
   * @example Usage
   * ```ts
   * import { strictEqual } from "node:assert/strict";
   * import { OciRuntimeCli } from "@skiff/shim";
   * const cli = new OciRuntimeCli({ binary: "runc" }); // initExit "reap": nothing to resume
   * strictEqual(cli.resumeProcess("web", { execId: "", pid: 42, created: false }).exited, undefined);
   * ```
   */
  resumeProcess(
    id: string,
    process: { execId: string; pid: number; created: boolean },
    carried?: RuntimeProcessCarry,
  ): RuntimeProcess {
    if (process.execId !== "") return { pid: process.pid };
    const output = carried?.descriptors?.waitOutput;
    const errors = carried?.descriptors?.waitErrors;
    if (output !== undefined && errors !== undefined) {
      // The previous code's `wait` still runs (a second one would race it for the one exit
      // status the runtime hands out): read its answer from its output, kept across execve.
      const exited = this.#waitAnswer(id, output, errors);
      exited.catch(() => {});
      return { pid: process.pid, exited };
    }
    const init = this.#init(id, process.pid);
    if (!process.created) this.#waitInit(id);
    return init;
  }

  /**
   * Before a live upgrade: what the next code needs to report this process's exit: the
   * output of the `wait` command running for it, kept open across execve.
   *
   * @param id Container id.
   * @param process the process
   * @example Usage
   * ```ts
   * import { strictEqual } from "node:assert/strict";
   * import { OciRuntimeCli } from "@skiff/shim";
   * // No wait runs for it: nothing to carry.
   * strictEqual(new OciRuntimeCli({ binary: "runsc" }).carryProcess("web", { execId: "" }), undefined);
   * ```
   */
  carryProcess(id: string, process: { execId: string }): RuntimeProcessCarry | undefined {
    if (process.execId !== "") return undefined;
    // A wait this code took over from its own previous code: hand the same output on.
    const answer = this.#answers.get(id);
    if (answer) return { descriptors: { waitOutput: answer.fd, waitErrors: answer.errors } };
    for (const [pid, waited] of this.#waiting) {
      if (waited.id !== id) continue;
      // Its stderr too: a command whose stderr reader is gone dies on its next message.
      const fd = parentEndOf(pid, 1);
      const errors = parentEndOf(pid, 2);
      if (fd === undefined || errors === undefined) {
        throw new Error(`the output of "${this.#o.binary} wait ${id}" (pid ${pid}) is not found`);
      }
      return { descriptors: { waitOutput: fd, waitErrors: errors } };
    }
    return undefined;
  }

  /** The exit status in a carried `wait` command's output, read to its end. */
  async #waitAnswer(id: string, fd: number, errors: number): Promise<number> {
    const answer = { fd, errors, read: false };
    this.#answers.set(id, answer);
    const what = `"${this.#o.binary} wait ${id}"`;
    let text = "";
    let said = "";
    try {
      const { FdStream } = await import("../linux/fd_stream.ts");
      const readAll = async (stream: InstanceType<typeof FdStream>, into: (t: string) => void) => {
        try {
          const buf = new Uint8Array(4096);
          for (let n; (n = await stream.read(buf)) !== null;) {
            answer.read = true; // from now on the answer is this code's to give
            into(new TextDecoder().decode(buf.subarray(0, n)));
          }
        } finally {
          await stream.close();
        }
      };
      await Promise.all([
        readAll(new FdStream(fd, `output of ${what}`), (t) => text += t),
        readAll(new FdStream(errors, `errors of ${what}`), (t) => said += t),
      ]);
    } finally {
      this.#answers.delete(id);
    }
    if (text.trim() === "") {
      throw new Error(
        `${what} (started before a live upgrade) ended without an answer: ${said.trim()}`,
      );
    }
    return this.#json<{ exitStatus: number }>(
      "wait",
      id,
      text,
      (v) => typeof (v as { exitStatus?: unknown } | null)?.exitStatus === "number",
    ).exitStatus;
  }

  /** With `initExit: "wait"`: runs `wait` for the init `create` or `restore` reported. */
  #waitInit(id: string): void {
    const exit = this.#exits.get(id);
    if (!exit) return;
    this.#exits.delete(id);
    this.wait(id).then(exit.resolve, exit.reject);
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
    this.#waitInit(id);
  }

  /**
   * `state ID`, parsed.
   *
   * @param id Container id.
   * @returns The container state.
   *
   * @example Usage
   * ```ts
   * import { strictEqual } from "node:assert/strict";
   * import { OciRuntimeCli } from "@skiff/shim";
   * // A stand-in runtime that prints what `runc state web` prints.
   * const bin = await Deno.makeTempFile();
   * await Deno.writeTextFile(bin, `#!/bin/sh\necho '{"ociVersion":"1.0.2","id":"web","pid":4242,"status":"running","bundle":"/b"}'\n`);
   * await Deno.chmod(bin, 0o755);
   * const cli = new OciRuntimeCli({ binary: bin, root: "/run/containerd/runc/default" });
   * const { status, pid } = await cli.state("web");
   * strictEqual(status, "running");
   * strictEqual(pid, 4242);
   * await Deno.remove(bin);
   * ```
   */
  async state(id: string): Promise<OciState> {
    const out = await this.#run("state", id, [id]);
    return this.#json(
      "state",
      id,
      out,
      (v: Partial<Record<keyof OciState, unknown>> | null) =>
        typeof v?.id === "string" && typeof v.pid === "number" && typeof v.status === "string",
    );
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
   * ```ts
   * import { strictEqual } from "node:assert/strict";
   * import { OciRuntimeCli } from "@skiff/shim";
   * // A stand-in runtime that records its arguments in <binary>.args.
   * const bin = await Deno.makeTempFile();
   * await Deno.writeTextFile(bin, `#!/bin/sh\necho "$@" > "$0.args"\n`);
   * await Deno.chmod(bin, 0o755);
   * const cli = new OciRuntimeCli({ binary: bin, root: "/run/r", log: "/b/log.json" });
   * await cli.kill("web", 9, { all: true });
   * strictEqual(
   *   await Deno.readTextFile(`${bin}.args`),
   *   "--root /run/r --log /b/log.json --log-format json kill --all web 9\n",
   * );
   * await Deno.remove(bin);
   * await Deno.remove(`${bin}.args`);
   * ```
   */
  async kill(id: string, signal: number, options: KillOptions = {}): Promise<void> {
    const args = options.all ? ["--all", id, String(signal)] : [id, String(signal)];
    try {
      await this.#run("kill", id, args);
    } catch (e) {
      if (!(e instanceof OciRuntimeError)) throw e;
      if (saysGone(e.runtimeMessage)) throw mapKillError(e);
      // runsc words a stopped sandbox as a refused control connection; ask for the state.
      const status = await this.state(id).then((st) => st.status, (stateError) => {
        throw isNotExist(stateError) ? stateError : e;
      });
      throw status === "stopped" ? processGone(e.message, e) : e;
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
   * ```ts
   * import { strictEqual } from "node:assert/strict";
   * import { OciRuntimeCli } from "@skiff/shim";
   * import { isNotExist } from "@skiff/shim/oci";
   * // A stand-in runtime that knows no container, in runc's words.
   * const bin = await Deno.makeTempFile();
   * await Deno.writeTextFile(bin, `#!/bin/sh\necho "container does not exist" >&2; exit 1\n`);
   * await Deno.chmod(bin, 0o755);
   * const cli = new OciRuntimeCli({ binary: bin });
   * let gone = false;
   * try {
   *   await cli.delete("web", { force: true });
   * } catch (e) {
   *   if (!isNotExist(e)) throw e;
   *   gone = true; // already deleted: what Delete wants anyway
   * }
   * strictEqual(gone, true);
   * await Deno.remove(bin);
   * ```
   */
  async delete(id: string, options: DeleteOptions = {}): Promise<void> {
    await this.#run("delete", id, options.force ? ["--force", id] : [id]);
  }

  /**
   * `exec --process F --detach --pid-file P [--console-socket S] ID`, with the OCI Process
   * JSON written to a temporary file that is removed afterwards. Resolves once the runtime
   * command has exited 0, with the process read from the pid file (removed once read).
   *
   * @param id Container id.
   * @param execId The exec's id (names the default pid file).
   * @param process The OCI `process` object (args, env, cwd, user, terminal, ...).
   * @param options Pid file, console socket and stdio.
   * @returns The exec process: its host pid (the shim reaps it).
   *
   * @example Usage
   * ```ts ignore
   * const { pid } = await cli.exec("web", "e1", { args: ["sh", "-c", "echo hi"], cwd: "/", env: [] }, {
   *   io,
   *   detach: true,
   * });
   * ```
   */
  async exec(
    id: string,
    execId: string,
    process: Record<string, unknown>,
    options: ExecOptions = {},
  ): Promise<RuntimeProcess> {
    const { consoleSocket, pipes } = stdioOf(options);
    const tempDir = options.pidFile === undefined && this.#o.cwd === undefined
      ? await Deno.makeTempDir({ prefix: "skiff-exec-" })
      : undefined;
    const pidFile = options.pidFile ?? `${tempDir ?? this.#o.cwd}/${execId}.pid`;
    try {
      await withProcessFile(process, async (file) => {
        const args = ["--process", file, "--detach", "--pid-file", pidFile];
        if (consoleSocket !== undefined) args.push("--console-socket", consoleSocket);
        args.push(...(options.extraArgs ?? []), id);
        await this.#run("exec", id, args, { detaches: true, io: pipes });
      });
      return { pid: await readPidFile(pidFile) };
    } finally {
      if (tempDir) await Deno.remove(tempDir, { recursive: true }).catch(() => {});
      else if (options.pidFile === undefined) await Deno.remove(pidFile).catch(() => {});
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
   * ```ts
   * import { deepStrictEqual } from "node:assert/strict";
   * import { OciRuntimeCli } from "@skiff/shim";
   * // A stand-in for `runc ps --format json web`.
   * const bin = await Deno.makeTempFile();
   * await Deno.writeTextFile(bin, `#!/bin/sh\necho '[4242,4250]'\n`);
   * await Deno.chmod(bin, 0o755);
   * const pids = await new OciRuntimeCli({ binary: bin }).ps("web");
   * deepStrictEqual(pids, [4242, 4250]);
   * await Deno.remove(bin);
   * ```
   */
  async ps(id: string): Promise<number[]> {
    if (this.#o.psPids === "sandbox") return [];
    const out = await this.#run("ps", id, ["--format", "json", id]);
    const pids = this.#json<number[] | null>(
      "ps",
      id,
      out,
      (v: unknown) => v === null || (Array.isArray(v) && v.every((p) => typeof p === "number")),
    );
    return pids ?? [];
  }

  /**
   * `pause ID`: freezes every process of the container.
   *
   * @param id Container id.
   *
   * @example Usage
   * ```ts
   * import { strictEqual } from "node:assert/strict";
   * import { OciRuntimeCli } from "@skiff/shim";
   * // A stand-in runtime that records its arguments in <binary>.args.
   * const bin = await Deno.makeTempFile();
   * await Deno.writeTextFile(bin, `#!/bin/sh\necho "$@" > "$0.args"\n`);
   * await Deno.chmod(bin, 0o755);
   * const cli = new OciRuntimeCli({ binary: bin, root: "/run/r" });
   * await cli.pause("web");
   * strictEqual(await Deno.readTextFile(`${bin}.args`), "--root /run/r pause web\n");
   * await Deno.remove(bin);
   * await Deno.remove(`${bin}.args`);
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
   * runtime command has exited 0, with the restored init read from the pid file.
   *
   * @param id Container id.
   * @param options Bundle, image, pid file, stdio and CRIU flags.
   * @returns The restored init, as {@link OciRuntimeCli.create} reports one (already running).
   *
   * @example Usage
   * ```ts ignore
   * const { pid } = await cli.restore("web", { bundle, imagePath: "/var/ckpt", io });
   * ```
   */
  async restore(id: string, options: RestoreOptions): Promise<RuntimeProcess> {
    const pidFile = options.pidFile ?? `${options.bundle}/init.pid`;
    const { consoleSocket, pipes } = stdioOf(options);
    const args = ["--bundle", options.bundle, "--image-path", options.imagePath];
    if (options.workPath !== undefined) args.push("--work-path", options.workPath);
    args.push("--detach", "--pid-file", pidFile);
    if (consoleSocket !== undefined) args.push("--console-socket", consoleSocket);
    if (options.noPivot ?? this.#o.noPivot) args.push("--no-pivot");
    if (options.noSubreaper) args.push("--no-subreaper");
    args.push(...criuFlags(options), ...(options.extraArgs ?? []), id);
    await this.#run("restore", id, args, {
      detaches: true,
      io: pipes,
      addressesContainer: false,
      cwd: this.#o.cwd ?? options.bundle,
    });
    const init = this.#init(id, await readPidFile(pidFile));
    this.#waitInit(id);
    return init;
  }

  /**
   * `wait ID` (runsc): blocks until the container's init exits and returns its exit status.
   * runc and crun have no such command. With `initExit: "wait"`, the init's
   * {@link RuntimeProcess.exited} is this command, run from `start` (or `restore`) on.
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
    let pid = 0;
    const waiting = { id, answered: false };
    const spawn = (cmd: Deno.Command) => {
      const child = (this.#o.spawn ?? ((c: Deno.Command) => c.spawn()))(cmd);
      pid = child.pid;
      this.#waiting.set(pid, waiting);
      return child;
    };
    let out: string;
    try {
      out = await this.#run("wait", id, [id], {
        spawn,
        onOutput: () => waiting.answered = true,
      });
    } finally {
      this.#waiting.delete(pid);
    }
    const value = this.#json<{ exitStatus: number }>(
      "wait",
      id,
      out,
      (v) => typeof (v as { exitStatus?: unknown } | null)?.exitStatus === "number",
    );
    return value.exitStatus;
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
    return this.#json(
      "events",
      id,
      out,
      (v: { type?: unknown } | null) => typeof v?.type === "string",
    );
  }

  /**
   * `--version`: the version token of the first line ("1.1.5+ds1" from "runc version
   * 1.1.5+ds1"), or the whole first line when it has no such token.
   *
   * @returns The runtime version.
   *
   * @example Usage
   * ```ts
   * import { strictEqual } from "node:assert/strict";
   * import { OciRuntimeCli } from "@skiff/shim";
   * // A stand-in for `runsc --version`.
   * const bin = await Deno.makeTempFile();
   * await Deno.writeTextFile(bin, `#!/bin/sh\necho "runsc version release-20240513.0"; echo "spec: 1.1.0-rc.1"\n`);
   * await Deno.chmod(bin, 0o755);
   * strictEqual(await new OciRuntimeCli({ binary: bin }).version(), "release-20240513.0");
   * await Deno.remove(bin);
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
   * ```ts
   * import { strictEqual } from "node:assert/strict";
   * import { OciRuntimeCli } from "@skiff/shim";
   * // A stand-in for `runc features` (runc 1.1 and later).
   * const bin = await Deno.makeTempFile();
   * await Deno.writeTextFile(bin, `#!/bin/sh\necho '{"ociVersionMin":"1.0.0","ociVersionMax":"1.2.0","mountOptions":["ro","rro"]}'\n`);
   * await Deno.chmod(bin, 0o755);
   * const f = await new OciRuntimeCli({ binary: bin }).features();
   * strictEqual(f.mountOptions?.includes("rro"), true);
   * await Deno.remove(bin);
   * ```
   */
  async features(): Promise<OciFeatures> {
    const out = await this.#run("features", undefined, [], { global: false });
    try {
      return parseOciFeatures(out);
    } catch (e) {
      throw new OciRuntimeError({
        binary: this.#o.binary,
        command: "features",
        args: ["features"],
        exitCode: 0,
        runtimeMessage: (e as Error).message,
      });
    }
  }

  #json<T>(command: string, id: string, out: string, valid: (v: never) => boolean): T {
    return outputJson<T>(this.#o.binary, command, id, out, valid);
  }

  /**
   * False while a `wait` command has begun to answer or has ended and its answer is not yet
   * taken in (its exit delivered, or the carried output read to its end): a live upgrade
   * replaces the process image only when it is true, so an exit that `wait` reports is never
   * lost with the old code.
   *
   * @example Usage
   * ```ts
   * import { strictEqual } from "node:assert/strict";
   * import { OciRuntimeCli } from "@skiff/shim";
   * strictEqual(new OciRuntimeCli({ binary: "runsc" }).settled, true); // no wait running
   * ```
   */
  get settled(): boolean {
    // A wait that has printed its answer may still run for a moment (until it exits): the
    // answer is already read into this code, so it is not settled either.
    for (const [pid, w] of this.#waiting) if (w.answered || !stillRunning(pid)) return false;
    for (const a of this.#answers.values()) if (a.read) return false;
    return true;
  }

  #run(
    command: string,
    id: string | undefined,
    args: string[],
    opts: RunOptions & { global?: boolean; spawn?: (cmd: Deno.Command) => Deno.ChildProcess } = {},
  ): Promise<string> {
    const argv = [...(opts.global === false ? [] : this.globalArgs), command, ...args];
    // Per-container commands run in the bundle; the others where the caller is.
    const cwd = id === undefined ? undefined : opts.cwd ?? this.#o.cwd;
    const o = opts.spawn ? { ...this.#o, spawn: opts.spawn } : this.#o;
    return runCommand(o, command, id, argv, { ...opts, cwd });
  }
}

/**
 * This process's end of the pipe on descriptor `n` of child `pid` (what `/proc` links both to),
 * or undefined. Read here, not through sdk/linux/descriptors.ts: this module is in `start`'s and
 * `delete`'s lean graph.
 */
function parentEndOf(pid: number, n: number): number | undefined {
  let link: string;
  try {
    link = Deno.readLinkSync(`/proc/${pid}/fd/${n}`);
  } catch {
    return undefined;
  }
  if (!link.startsWith("pipe:")) return undefined;
  for (const e of Deno.readDirSync("/proc/self/fd")) {
    try {
      if (Deno.readLinkSync(`/proc/self/fd/${e.name}`) === link) return Number(e.name);
    } catch { /* closed meanwhile */ }
  }
  return undefined;
}

/**
 * Whether `pid` runs (not gone, not a zombie). Read here rather than through
 * sdk/linux/proc_stat.ts: this module is in `start`'s and `delete`'s lean graph.
 */
function stillRunning(pid: number): boolean {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    return stat[stat.lastIndexOf(")") + 2] !== "Z";
  } catch {
    return false;
  }
}

/**
 * The console socket and the pipes to hand the runtime command: a terminal process has only
 * the socket (its pty carries the bytes), any other only the pipes.
 */
function stdioOf(
  o: { consoleSocket?: string; io?: ProcessStdio | RuntimeStdio },
): { consoleSocket?: string; pipes?: ProcessStdio } {
  const full = o.io && "terminal" in o.io ? o.io : undefined;
  const consoleSocket = o.consoleSocket ?? full?.consoleSocket;
  const pipes = full?.terminal ? undefined : o.io;
  return {
    ...(consoleSocket === undefined ? {} : { consoleSocket }),
    ...(pipes === undefined ? {} : { pipes }),
  };
}

/**
 * Reads the pid file the runtime wrote. Loaded on first use: the short-lived actions (`start`,
 * `delete`, `-v`) load this module and never read a pid file.
 */
async function readPidFile(path: string): Promise<number> {
  return (await import("../linux/pid_file.ts")).readPidFile(path);
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
