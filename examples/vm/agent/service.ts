/**
 * The agent's `skiff.agent.v1.Agent` implementation: each RPC mapped onto the guest's
 * containers ({@linkcode Containers}).
 *
 * @module
 */

import type { ServiceImpl } from "@connectrpc/connect";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { Agent } from "../proto/agent_pb.ts";
import type { Containers, StdioWanted } from "./containers.ts";
import { type LongPolls, unlessAborted } from "./long_polls.ts";

/** The agent's version, as Ping reports it. */
export const AGENT_VERSION = "0.1.0";

/** What the service needs besides the containers. */
export interface AgentServiceOptions {
  /** Called (after Shutdown was answered) to power the guest off. */
  shutdown: () => void;
  /** OOM events not yet handed to the host, oldest first. */
  oomEvents: OomQueue;
  /** The long polls being held, which Release answers. */
  longPolls: LongPolls;
}

/** Container ids whose cgroup saw an OOM kill, for the host's `OomEvent` long polls. */
export class OomQueue {
  #ids: string[] = [];
  #waiters: (() => void)[] = [];

  /** Queues an event. */
  push(containerId: string): void {
    this.#ids.push(containerId);
    const w = this.#waiters;
    this.#waiters = [];
    for (const wake of w) wake();
  }

  /** The next event; `undefined` when `signal` aborted first. */
  async next(signal: AbortSignal): Promise<string | undefined> {
    while (this.#ids.length === 0) {
      if (signal.aborted) return undefined;
      await new Promise<void>((resolve) => {
        const wake = () => {
          signal.removeEventListener("abort", wake);
          resolve();
        };
        this.#waiters.push(wake);
        signal.addEventListener("abort", wake, { once: true });
      });
    }
    return this.#ids.shift();
  }
}

function stdioOf(
  s: { stdin: boolean; stdout: boolean; stderr: boolean; terminal: boolean } | undefined,
): StdioWanted {
  return {
    stdin: s?.stdin ?? false,
    stdout: s?.stdout ?? false,
    stderr: s?.stderr ?? false,
    terminal: s?.terminal ?? false,
  };
}

/**
 * The service's handlers.
 *
 * @param containers the guest's containers
 * @param options shutdown and OOM events
 */
export function agentService(
  containers: Containers,
  options: AgentServiceOptions,
): Partial<ServiceImpl<typeof Agent>> {
  const polls = options.longPolls;
  // A read answered with nothing and no end: what Output.read answers once its signal aborts.
  const emptyRead = (r: { data: Uint8Array; eof: boolean }) => r.data.length === 0 && !r.eof;
  return {
    ping: () => ({
      version: AGENT_VERSION,
      kernel: Deno.osRelease(),
      uptimeSeconds: Number(Deno.readTextFileSync("/proc/uptime").split(" ")[0]),
    }),
    create: async (req) => ({
      pid: await containers.create(req.containerId, req.bundle, stdioOf(req.stdio)),
    }),
    start: async (req) => {
      await containers.start(req.containerId);
      return {};
    },
    exec: async (req) => ({
      pid: await containers.exec(req.containerId, req.execId, req.process, stdioOf(req.stdio)),
    }),
    kill: async (req) => {
      await containers.kill(req.containerId, req.execId, req.signal, req.all);
      return {};
    },
    wait: (req, ctx) => {
      const p = containers.process(req.containerId, req.execId);
      return polls.hold(async (release) => {
        // An exit that came first wins over the release: it is never lost.
        const exit = await unlessAborted(p.wait(), AbortSignal.any([ctx.signal, release])) ??
          p.exited;
        if (exit) {
          return {
            exitStatus: exit.status,
            exitedAt: timestampFromDate(exit.exitedAt),
            pid: p.pid,
          };
        }
        // The call ended (its connection, its deadline): its own error, not a released answer.
        if (ctx.signal.aborted) throw ctx.signal.reason;
        return { released: true, pid: p.pid };
      }, (r) => r.released === true);
    },
    ps: async (req) => ({ pids: await containers.ps(req.containerId) }),
    stats: async (req) => ({ stats: await containers.stats(req.containerId) }),
    pause: async (req) => {
      await containers.pause(req.containerId);
      return {};
    },
    resume: async (req) => {
      await containers.resume(req.containerId);
      return {};
    },
    closeStdin: async (req) => {
      await containers.process(req.containerId, req.execId).closeStdin();
      return {};
    },
    resize: (req) => {
      containers.process(req.containerId, req.execId).resize(req.width, req.height);
      return {};
    },
    readStdout: (req, ctx) => {
      const out = containers.process(req.containerId, req.execId).stdout;
      return polls.hold(
        (release) => out.read(req.maxBytes, AbortSignal.any([ctx.signal, release])),
        emptyRead,
      );
    },
    readStderr: (req, ctx) => {
      const out = containers.process(req.containerId, req.execId).stderr;
      return polls.hold(
        (release) => out.read(req.maxBytes, AbortSignal.any([ctx.signal, release])),
        emptyRead,
      );
    },
    writeStdin: async (req) => ({
      written: await containers.process(req.containerId, req.execId).writeStdin(req.data),
    }),
    oomEvent: (_req, ctx) =>
      polls.hold(async (release) => {
        const id = await options.oomEvents.next(AbortSignal.any([ctx.signal, release]));
        // An event is taken only when it is returned: a released call leaves it queued.
        if (id !== undefined) return { containerId: id };
        return { containerId: "", released: release.aborted };
      }, (r) => r.released === true),
    delete: async (req) => {
      const { exit, pid } = await containers.delete(req.containerId);
      return {
        exitStatus: exit?.status ?? 0,
        exitedAt: exit ? timestampFromDate(exit.exitedAt) : undefined,
        pid,
      };
    },
    release: async () => ({ released: await polls.release() }),
    shutdown: () => {
      // Answered first: the power-off ends the connection that would carry the answer.
      setTimeout(options.shutdown, 100);
      return {};
    },
  };
}
