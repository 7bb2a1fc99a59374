/**
 * The VM shim's `ContainerRuntime`: each call of the seam made on the pod's guest agent. The
 * processes it reports are guest processes: their pids are the guest's, their exits come from
 * the agent's Wait (never from the shim's reaper), their stdio moves through the agent
 * ({@linkcode pumpStdio}), signals to execs and terminal sizes go to the agent, and stats and
 * OOM kills come from the container's cgroup in the guest.
 *
 * @module
 */

import { Code, ConnectError } from "@connectrpc/connect";
import type { Any } from "@bufbuild/protobuf/wkt";
import type {
  ContainerRuntime,
  RuntimeCreateOptions,
  RuntimeExecOptions,
  RuntimeProcess,
  RuntimeProcessCarry,
  RuntimeStreams,
} from "@skiff/shim/seam";
import type { Pod } from "./pod.ts";
import { guestProcess } from "./spec.ts";
import { pumpStdio, wanted } from "./stdio.ts";
import type { Vm } from "./vm.ts";

/** How long a forced delete waits for the killed container to exit in the guest. */
const FORCE_EXIT_MS = 10_000;

/** One container of the pod, run by the agent in the pod's VM. */
export class AgentRuntime implements ContainerRuntime {
  #pod: Pod;
  #vm: Vm | undefined;
  /** The processes (exec ids, "" for the init) with a terminal. */
  #terminals = new Set<string>();

  /** @param pod the shim's pod (its VM boots at the first container's create) */
  constructor(pod: Pod) {
    this.#pod = pod;
  }

  /** Logs a stdio copy that ended on an error (the VM or containerd's end gone): output was cut. */
  #pumpEnded(id: string, execId: string): (stream: string, e: unknown) => void {
    return (stream, e) =>
      this.#pod.logger.warn("stdio copy ended", {
        id,
        exec: execId,
        stream,
        error: e instanceof Error ? e.message : String(e),
      });
  }

  get #agent(): Vm["agent"] {
    if (!this.#vm) throw new ConnectError("the container has no VM", Code.FailedPrecondition);
    return this.#vm.agent;
  }

  async create(id: string, opts: RuntimeCreateOptions): Promise<RuntimeProcess> {
    const vm = this.#vm = await this.#pod.enter(id);
    try {
      const bundle = await this.#pod.share(vm, id, opts.bundle);
      const s = opts.io.streams();
      const { pid } = await vm.agent.create({
        containerId: id,
        bundle,
        stdio: wanted(s, opts.io.terminal),
      });
      pumpStdio(vm.agent, id, "", s, this.#pumpEnded(id, ""), vm.gate);
      return this.#process(id, "", pid, opts.io.terminal);
    } catch (e) {
      await this.#pod.leave(id);
      throw e;
    }
  }

  async start(id: string): Promise<void> {
    await this.#agent.start({ containerId: id });
  }

  async kill(id: string, signal: number, opts?: { all?: boolean }): Promise<void> {
    await this.#agent.kill({ containerId: id, execId: "", signal, all: opts?.all ?? false });
  }

  async delete(id: string, opts?: { force?: boolean }): Promise<void> {
    const vm = this.#vm;
    if (!vm) return;
    try {
      if (opts?.force) {
        await vm.agent.kill({ containerId: id, signal: 9, all: true }).catch(() => {});
        await vm.agent.wait({ containerId: id }, { timeoutMs: FORCE_EXIT_MS }).catch(() => {});
      }
      await vm.agent.delete({ containerId: id }).catch((e) => {
        // A VM that died took its containers with it: nothing is left to delete in it.
        if (vm.running) throw e;
      });
    } finally {
      await this.#pod.leave(id);
    }
  }

  async exec(
    id: string,
    execId: string,
    process: unknown,
    opts: RuntimeExecOptions,
  ): Promise<RuntimeProcess> {
    const s = opts.io.streams();
    const spec = guestProcess(process as Record<string, unknown>);
    const { pid } = await this.#agent.exec({
      containerId: id,
      execId,
      process: new TextEncoder().encode(JSON.stringify(spec)),
      stdio: wanted(s, opts.io.terminal),
    });
    pumpStdio(this.#agent, id, execId, s, this.#pumpEnded(id, execId), this.#vm!.gate);
    return this.#process(id, execId, pid, opts.io.terminal);
  }

  async ps(id: string): Promise<number[]> {
    return (await this.#agent.ps({ containerId: id })).pids;
  }

  async pause(id: string): Promise<void> {
    await this.#agent.pause({ containerId: id });
  }

  async resume(id: string): Promise<void> {
    await this.#agent.resume({ containerId: id });
  }

  update(id: string): Promise<void> {
    return Promise.reject(
      new ConnectError(`update of container ${id}: not supported in the VM`, Code.Unimplemented),
    );
  }

  checkpoint(id: string): Promise<void> {
    return Promise.reject(
      new ConnectError(
        `checkpoint of container ${id}: not supported in the VM`,
        Code.Unimplemented,
      ),
    );
  }

  async stats(id: string): Promise<Any> {
    const { stats } = await this.#agent.stats({ containerId: id });
    if (!stats) throw new ConnectError(`container ${id}: the agent sent no stats`, Code.NotFound);
    return stats;
  }

  watchOom(id: string, onOom: () => void): Promise<{ close(): void }> {
    return Promise.resolve(this.#pod.watchOom(id, onOom));
  }

  /** No agent call in flight (a live upgrade waits for that, after `Shim.prepareUpgrade`). */
  get settled(): boolean {
    return this.#pod.settled;
  }

  /**
   * After a live upgrade: a guest process the previous code ran, its exit and stdio through the
   * agent again (the pod's VM was adopted first, by the shim's `adoptUpgrade`).
   */
  resumeProcess(
    id: string,
    process: { execId: string; pid: number; streams?: () => RuntimeStreams },
    carried?: RuntimeProcessCarry,
  ): RuntimeProcess {
    const vm = this.#vm = this.#pod.vm;
    if (!vm) {
      throw new ConnectError(
        `container ${id}: its pod has no VM to resume`,
        Code.FailedPrecondition,
      );
    }
    const s = process.streams?.();
    if (s) pumpStdio(vm.agent, id, process.execId, s, this.#pumpEnded(id, process.execId), vm.gate);
    const terminal = (carried?.data as { terminal?: boolean } | undefined)?.terminal === true;
    return this.#process(id, process.execId, process.pid, terminal);
  }

  /** Before a live upgrade: whether the process has a terminal (the agent owns it). */
  carryProcess(_id: string, process: { execId: string }): RuntimeProcessCarry {
    return { data: { terminal: this.#terminals.has(process.execId) } };
  }

  /** A guest process as the seam reports it: exit, signals and terminal through the agent. */
  #process(id: string, execId: string, pid: number, terminal: boolean): RuntimeProcess {
    const vm = this.#vm!;
    const agent = vm.agent;
    const req = { containerId: id, execId };
    if (terminal) this.#terminals.add(execId);
    return {
      pid,
      exited: waitExit(vm, req),
      kill: async (signal) => void await agent.kill({ ...req, signal }),
      ...(terminal
        ? { resize: async (width, height) => void await agent.resize({ ...req, width, height }) }
        : {}),
    };
  }
}

/** The agent's Wait, asked again while a live upgrade paused it (Release answers it early). */
async function waitExit(vm: Vm, req: { containerId: string; execId: string }): Promise<number> {
  for (;;) {
    await vm.gate.open();
    const w = await vm.agent.wait(req);
    if (!w.released) return w.exitStatus;
  }
}
