/**
 * The guest's containers, run by runc inside the guest.
 *
 * Why runc: the guest sees the host's root (read-only, with a tmpfs overlay), so the host's runc
 * binary is there, and it gives each container what Kata's agent builds by hand: mount, pid,
 * uts (and whatever else the bundle's config.json asks for) namespaces, a pivot_root into the
 * bundle's rootfs, and a cgroup in the guest's pure cgroup v2 hierarchy (so stats and OOM come
 * from its cgroup files). The agent then only does what a shim does: runs `runc create` and
 * `runc exec --detach` with pipes the process inherits, reaps the processes runc leaves behind,
 * and hands their output and exits to the host.
 *
 * @module
 */

import { Code, ConnectError } from "@connectrpc/connect";
import type { Any } from "@bufbuild/protobuf/wkt";
import {
  cgroupStats,
  kill as killPid,
  type OomWatch,
  readPidFile,
  type Reaper,
  watchOom,
} from "@skiff/shim/linux";
import type { ExitTable } from "./exits.ts";
import { type Exit, GuestProcess } from "./process.ts";
import { ConsoleListener } from "./terminal.ts";

/** Which stdio streams a process gets from the host. */
export interface StdioWanted {
  stdin: boolean;
  stdout: boolean;
  stderr: boolean;
  terminal: boolean;
}

/** Where the agent keeps its state and which runc it runs. */
export interface ContainersOptions {
  /** The agent's state directory (runc's root, pid files, exec specs). */
  stateDir: string;
  /** The runc binary. Default `runc` (on PATH). */
  runc?: string;
  /** Called with the id of a container whose cgroup saw an OOM kill. */
  onOom?: (containerId: string) => void;
}

/** One container: its init, its execs and its runtime state. */
interface Container {
  id: string;
  bundle: string;
  init: GuestProcess;
  execs: Map<string, GuestProcess>;
  started: boolean;
  oom?: OomWatch;
}

/** The guest's containers and their processes. */
export class Containers {
  #containers = new Map<string, Container>();
  #reaper: Reaper;
  #exits: ExitTable;
  #stateDir: string;
  #runc: string;
  #onOom: (id: string) => void;

  /**
   * @param reaper spawns runc (so its own exit stays Deno's)
   * @param exits hands the reaped exits of container processes over
   * @param options state directory, runc binary, OOM callback
   */
  constructor(reaper: Reaper, exits: ExitTable, options: ContainersOptions) {
    this.#reaper = reaper;
    this.#exits = exits;
    this.#stateDir = options.stateDir;
    this.#runc = options.runc ?? "runc";
    this.#onOom = options.onOom ?? (() => {});
  }

  /**
   * `runc create`: the init exists (namespaces, cgroup, rootfs) and waits for Start.
   *
   * @returns the init's guest pid
   */
  async create(id: string, bundle: string, stdio: StdioWanted): Promise<number> {
    validId(id);
    if (this.#containers.has(id)) {
      throw new ConnectError(`container ${id}: already exists`, Code.AlreadyExists);
    }
    const dir = `${this.#stateDir}/${id}`;
    await Deno.mkdir(dir, { recursive: true });
    const pidFile = `${dir}/init.pid`;
    const process = new GuestProcess(`container ${id}`);
    // Reserved before runc runs, so that a second Create of the same id fails fast.
    const c: Container = { id, bundle, init: process, execs: new Map(), started: false };
    this.#containers.set(id, c);
    try {
      const cmd = ["create", "--bundle", bundle, "--pid-file", pidFile];
      await this.#launch(cmd, id, stdio, process, `runc create ${id}`);
      process.pid = await readPidFile(pidFile);
    } catch (e) {
      this.#containers.delete(id);
      await process.close();
      await this.#run(["delete", "--force", id]).catch(() => {});
      throw e;
    }
    this.#exits.exitOf(process.pid).then((e) => process.setExit(exitOf(e)));
    return process.pid;
  }

  /** `runc start`, then watches the container's cgroup for OOM kills. */
  async start(id: string): Promise<void> {
    const c = this.#get(id);
    if (c.started) {
      throw new ConnectError(`container ${id}: already started`, Code.FailedPrecondition);
    }
    await this.#run(["start", id]);
    c.started = true;
    try {
      c.oom = await watchOom(c.init.pid, () => this.#onOom(id));
    } catch {
      // It may have exited already: no cgroup, no OOM to watch.
    }
  }

  /**
   * `runc exec --detach`: runs `process` (an OCI Process as JSON) in the container, started.
   *
   * @returns the exec's guest pid
   */
  async exec(id: string, execId: string, process: Uint8Array, stdio: StdioWanted): Promise<number> {
    const c = this.#get(id);
    validId(execId);
    if (c.execs.has(execId)) {
      throw new ConnectError(
        `exec ${execId} of container ${id}: already exists`,
        Code.AlreadyExists,
      );
    }
    const dir = `${this.#stateDir}/${id}`;
    const spec = `${dir}/exec-${execId}.json`;
    const pidFile = `${dir}/exec-${execId}.pid`;
    await Deno.writeFile(spec, process);
    const p = new GuestProcess(`exec ${execId} of container ${id}`);
    c.execs.set(execId, p);
    try {
      const cmd = ["exec", "--detach", "--pid-file", pidFile, "--process", spec];
      await this.#launch(cmd, id, stdio, p, `runc exec ${id} (${execId})`);
      p.pid = await readPidFile(pidFile);
    } catch (e) {
      c.execs.delete(execId);
      await p.close();
      throw e;
    }
    this.#exits.exitOf(p.pid).then((e) => p.setExit(exitOf(e)));
    return p.pid;
  }

  /** Signals the init (`runc kill`, with `all` every process) or an exec (kill(2)). */
  async kill(id: string, execId: string, signal: number, all: boolean): Promise<void> {
    const c = this.#get(id);
    if (execId === "") {
      if (c.init.exited && !all) {
        throw new ConnectError(`container ${id}: process already finished`, Code.NotFound);
      }
      await this.#run(["kill", ...(all ? ["--all"] : []), id, String(signal)]);
      return;
    }
    const p = this.process(id, execId);
    if (p.exited) {
      throw new ConnectError(`exec ${execId} of ${id}: process already finished`, Code.NotFound);
    }
    killPid(p.pid, signal);
  }

  /** The process `execId` (empty: the init) of container `id`. */
  process(id: string, execId: string): GuestProcess {
    const c = this.#get(id);
    if (execId === "") return c.init;
    const p = c.execs.get(execId);
    if (!p) throw new ConnectError(`exec ${execId} of container ${id}: not found`, Code.NotFound);
    return p;
  }

  /** The guest pids in the container (`runc ps`). */
  async ps(id: string): Promise<number[]> {
    this.#get(id);
    const out = await this.#run(["ps", "--format", "json", id]);
    const pids: unknown = JSON.parse(out || "[]");
    return Array.isArray(pids) ? pids.map(Number) : [];
  }

  /** The container's cgroup v2 statistics, packed as containerd's StatsResponse carries them. */
  stats(id: string): Promise<Any> {
    const c = this.#get(id);
    if (c.init.exited) {
      throw new ConnectError(`container ${id}: process already finished`, Code.NotFound);
    }
    return cgroupStats(c.init.pid);
  }

  /** `runc pause`. */
  async pause(id: string): Promise<void> {
    this.#get(id);
    await this.#run(["pause", id]);
  }

  /** `runc resume`. */
  async resume(id: string): Promise<void> {
    this.#get(id);
    await this.#run(["resume", id]);
  }

  /** `runc delete --force` of an exited (or never started) container; forgets it. */
  async delete(id: string): Promise<{ exit: Exit | undefined; pid: number }> {
    const c = this.#get(id);
    if (c.started && !c.init.exited) {
      throw new ConnectError(
        `container ${id}: cannot delete a running container`,
        Code.FailedPrecondition,
      );
    }
    await this.#run(["delete", "--force", id]);
    c.oom?.close();
    for (const p of [c.init, ...c.execs.values()]) await p.close();
    this.#containers.delete(id);
    await Deno.remove(`${this.#stateDir}/${id}`, { recursive: true }).catch(() => {});
    return { exit: c.init.exited, pid: c.init.pid };
  }

  #get(id: string): Container {
    const c = this.#containers.get(id);
    if (!c) throw new ConnectError(`container ${id}: not found`, Code.NotFound);
    return c;
  }

  /**
   * Runs the runc command that creates `process` (`create` or `exec --detach`, its flags in
   * `cmd`) and attaches its stdio: the pipes runc's child inherits, or, with a terminal, the
   * pty master runc sends through a console socket (runc's own stdio is then /dev/null).
   */
  async #launch(
    cmd: string[],
    id: string,
    stdio: StdioWanted,
    process: GuestProcess,
    what: string,
  ): Promise<void> {
    const dir = `${this.#stateDir}/${id}`;
    const console = stdio.terminal ? await ConsoleListener.open(this.#stateDir) : undefined;
    const pipes = console ? { stdin: false, stdout: false, stderr: false } : stdio;
    try {
      const child = this.#reaper.spawn(
        new Deno.Command(this.#runc, {
          args: [
            ...["--root", `${this.#stateDir}/runc`, "--log", `${dir}/runc.log`, ...cmd],
            ...(console ? ["--console-socket", console.path] : []),
            id,
          ],
          stdin: pipes.stdin ? "piped" : "null",
          stdout: pipes.stdout ? "piped" : "null",
          stderr: pipes.stderr ? "piped" : "null",
        }),
      );
      if (!console) process.attachPipes(child, pipes);
      await this.#finish(child, what, dir);
      if (console) process.attachTerminal(await console.master(what), stdio.stdin);
    } finally {
      await console?.close();
    }
  }

  /** Waits for a spawning runc; a failure names what runc logged. */
  async #finish(child: Deno.ChildProcess, what: string, dir: string): Promise<void> {
    const status = await child.status;
    if (status.success) return;
    const log = await Deno.readTextFile(`${dir}/runc.log`).catch(() => "");
    throw new ConnectError(`${what}: runc exited ${status.code}: ${lastError(log)}`, Code.Internal);
  }

  /** Runs a runc command that starts no process; returns its stdout. */
  async #run(args: string[]): Promise<string> {
    const out = await this.#reaper.spawn(
      new Deno.Command(this.#runc, {
        args: ["--root", `${this.#stateDir}/runc`, ...args],
        stdin: "null",
        stdout: "piped",
        stderr: "piped",
      }),
    ).output();
    if (!out.success) {
      const err = new TextDecoder().decode(out.stderr).trim();
      const code = /does not exist|not found/.test(err) ? Code.NotFound : Code.Internal;
      throw new ConnectError(`runc ${args.join(" ")}: exited ${out.code}: ${err}`, code);
    }
    return new TextDecoder().decode(out.stdout).trim();
  }
}

/** Container and exec ids become file names: keep them to runc's alphabet. */
function validId(id: string): void {
  if (!/^[\w][\w.+-]{0,127}$/.test(id)) {
    throw new ConnectError(`invalid id ${JSON.stringify(id)}`, Code.InvalidArgument);
  }
}

function exitOf(e: { status: number; exitedAt: Date }): Exit {
  return { status: e.status, exitedAt: e.exitedAt };
}

/** The last error runc's JSON log recorded, or the log's tail. */
function lastError(log: string): string {
  const lines = log.trim().split("\n").filter(Boolean);
  for (const line of lines.reverse()) {
    try {
      const entry = JSON.parse(line) as { level?: string; msg?: string };
      if (entry.level === "error" && entry.msg) return entry.msg;
    } catch {
      return line;
    }
  }
  return lines[0] ?? "(no log)";
}
