/**
 * The server's containers and processes as they cross a live upgrade (sdk/shim/upgrade): what
 * the previous code hands over, as plain data, and how the next code takes it back. The
 * descriptors named in it (stdio) stay open across `execve`.
 *
 * @module
 */

import { type ProcessIoCarry, processIoDescriptors } from "../../linux/process_io_carry.ts";
import type { Container } from "./container.ts";
import type { ReapedExit, ShimPlatform } from "./platform.ts";
import type { ContainerRuntime, RuntimeProcess, RuntimeProcessCarry } from "../runtime.ts";
import { type ProcessState, type ProcessStdioPaths, ShimProcess } from "./process.ts";

/**
 * One process as handed over.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { ProcessCarry } from "./carry.ts";
 * const p: ProcessCarry = {
 *   execId: "", pid: 4242, startTime: 123456, state: "running",
 *   stdio: { stdin: "", stdout: "/run/x/stdout", stderr: "/run/x/stderr", terminal: false },
 *   io: { stdout: { sink: 20, pipe: 22 }, stderr: { sink: 21, pipe: 23 } },
 * };
 * strictEqual(p.state, "running");
 * ```
 */
export interface ProcessCarry {
  /** "" for the init. */
  execId: string;
  /** Stdio as containerd described it. */
  stdio: ProcessStdioPaths;
  /** The exec's OCI process spec. */
  spec?: unknown;
  /** 0 until started. */
  pid: number;
  /** Its start time in clock ticks since boot, which tells it from a later process with its pid. */
  startTime?: number;
  /** Its state. */
  state: ProcessState;
  /** Once exited: its status and when (ISO 8601). */
  exit?: { status: number; exitedAt: string };
  /** Its stdio's descriptors, while it runs. */
  io?: ProcessIoCarry;
  /** Its exit is the runtime's to report (`ContainerRuntime.resumeProcess` reports it again). */
  runtimeExit?: boolean;
  /** What the runtime hands its next code for it (`ContainerRuntime.carryProcess`). */
  runtimeCarry?: RuntimeProcessCarry;
  /** Its pid's exit as reaped, kept in case the runtime's report fails (ISO 8601 time). */
  reaped?: { status: number; exitedAt: string; startTime?: number };
}

/**
 * One container as handed over.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { ContainerCarry } from "./carry.ts";
 * const stdio = { stdin: "", stdout: "", stderr: "", terminal: false };
 * const c: ContainerCarry = {
 *   id: "web", namespace: "default", bundle: "/run/x/web", options: {}, rootfsMounted: true,
 *   init: { execId: "", stdio, pid: 4242, state: "running" }, execs: [],
 * };
 * strictEqual(c.execs.length, 0);
 * ```
 */
export interface ContainerCarry {
  /** The container id. */
  id: string;
  /** Its namespace. */
  namespace: string;
  /** Its bundle. */
  bundle: string;
  /** The runtime options in effect (JSON). */
  options: unknown;
  /** Whether create mounted the rootfs (Delete unmounts it). */
  rootfsMounted: boolean;
  /** The init. */
  init: ProcessCarry;
  /** The execs. */
  execs: ProcessCarry[];
}

/**
 * A process's state for the next code.
 *
 * @param p the process
 * @throws {Error} when it cannot be carried now, saying why
 */
export function carryProcess(
  p: ShimProcess,
  runtime?: Pick<ContainerRuntime, "resumeProcess" | "carryProcess">,
  reaped?: (p: ShimProcess) => ReapedExit | undefined,
): ProcessCarry {
  const runtimeExit = p.runtime?.exited !== undefined && p.exit === undefined;
  if (runtimeExit && !runtime?.resumeProcess) {
    throw new Error(
      `${p.describe()}: its exit is reported by a runtime that cannot report it again after an upgrade (no resumeProcess)`,
    );
  }
  const out: ProcessCarry = { execId: p.execId, stdio: p.stdio, pid: p.pid, state: p.state };
  if (runtimeExit) {
    out.runtimeExit = true;
    const carried = runtime?.carryProcess?.(p.containerId, { execId: p.execId });
    if (carried) out.runtimeCarry = carried;
    const aside = reaped?.(p);
    if (aside) {
      out.reaped = {
        status: aside.status,
        exitedAt: aside.exitedAt.toISOString(),
        ...(aside.startTime !== undefined ? { startTime: aside.startTime } : {}),
      };
    }
  }
  if (p.spec !== undefined) out.spec = p.spec;
  if (p.startTime !== undefined) out.startTime = p.startTime;
  if (p.exit) out.exit = { status: p.exit.status, exitedAt: p.exit.exitedAt.toISOString() };
  if (p.io && p.state !== "stopped") {
    if (!p.io.carry) throw new Error(`${p.describe()}: its stdio cannot be carried`);
    try {
      out.io = p.io.carry();
    } catch (e) {
      throw new Error(`${p.describe()}: ${(e as Error).message}`);
    }
  }
  return out;
}

/**
 * A container's state for the next code.
 *
 * @param c the container
 * @throws {Error} when it cannot be carried now, saying why
 */
export function carryContainer(
  c: Container,
  reaped?: (p: ShimProcess) => ReapedExit | undefined,
): ContainerCarry {
  const why = c.uncarriable();
  if (why) throw new Error(why);
  return {
    id: c.id,
    namespace: c.namespace,
    bundle: c.bundle,
    options: c.options,
    rootfsMounted: c.rootfsMounted,
    init: carryProcess(c.init, c.runtime, reaped),
    execs: [...c.execs.values()].map((p) => carryProcess(p, c.runtime, reaped)),
  };
}

/**
 * True when no process of `containers` holds a chunk of stdio read and not yet written.
 *
 * @param containers the containers
 */
export function stdioSettled(containers: Iterable<Container>): boolean {
  for (const c of containers) {
    for (const p of [c.init, ...c.execs.values()]) if (p.io?.inHand?.()) return false;
  }
  return true;
}

/**
 * A process the previous code handed over, continued here.
 *
 * @param containerId its container
 * @param carried its state
 * @param platform adopts its stdio
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { adoptProcess } from "./carry.ts";
 * const stdio = { stdin: "", stdout: "", stderr: "", terminal: false };
 * const p = adoptProcess("web", {
 *   execId: "", stdio, pid: 4242, state: "stopped",
 *   exit: { status: 3, exitedAt: "2026-12-05T12:00:00.000Z" },
 * }, {});
 * strictEqual(p.pid, 4242);
 * strictEqual((await p.exited).status, 3);
 * ```
 */
export function adoptProcess(
  containerId: string,
  carried: ProcessCarry,
  platform: Pick<ShimPlatform, "adoptIo">,
  runtime?: Pick<ContainerRuntime, "resumeProcess">,
): ShimProcess {
  const p = new ShimProcess(containerId, carried.execId, carried.stdio, carried.spec);
  let io;
  if (carried.io) {
    if (!platform.adoptIo) {
      throw new Error(`${p.describe()}: this platform cannot adopt carried stdio`);
    }
    io = platform.adoptIo(carried.io);
  }
  let reported: RuntimeProcess | undefined;
  if (carried.runtimeExit) {
    if (!runtime?.resumeProcess) {
      throw new Error(`${p.describe()}: the runtime cannot report its exit again`);
    }
    const streams = carried.io?.streams && io?.streams ? io.streams.bind(io) : undefined;
    reported = runtime.resumeProcess(containerId, {
      execId: carried.execId,
      pid: carried.pid,
      created: carried.state === "created",
      ...(streams ? { streams } : {}),
    }, carried.runtimeCarry);
  }
  p.resume(
    {
      pid: carried.pid,
      state: carried.state,
      ...(carried.startTime !== undefined ? { startTime: carried.startTime } : {}),
      ...(carried.exit
        ? { exit: { status: carried.exit.status, exitedAt: new Date(carried.exit.exitedAt) } }
        : {}),
    },
    io,
    reported,
  );
  return p;
}

/**
 * Every descriptor a carried container keeps open across `execve`.
 *
 * @param containers the carried containers
 * @example Usage
 * ```ts
 * import { deepStrictEqual } from "node:assert/strict";
 * import { carriedDescriptors } from "./carry.ts";
 * const stdio = { stdin: "", stdout: "", stderr: "", terminal: false };
 * deepStrictEqual(carriedDescriptors([{
 *   id: "web", namespace: "default", bundle: "/b", options: {}, rootfsMounted: false,
 *   init: { execId: "", stdio, pid: 1, state: "running", io: { stdout: { sink: 20, pipe: 22 } } },
 *   execs: [],
 * }]), [20, 22]);
 * ```
 */
export function carriedDescriptors(containers: readonly ContainerCarry[]): number[] {
  const fds = new Set<number>();
  for (const c of containers) {
    for (const p of [c.init, ...c.execs]) {
      for (const fd of p.io ? processIoDescriptors(p.io) : []) fds.add(fd);
      for (const fd of Object.values(p.runtimeCarry?.descriptors ?? {})) fds.add(fd);
    }
  }
  return [...fds].sort((a, b) => a - b);
}
