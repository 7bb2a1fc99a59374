/**
 * The format in which a process's stdio crosses a live upgrade ({@linkcode ProcessIoCarry}),
 * and the descriptors in it that must stay open across `execve`.
 *
 * @module
 */

import type { BinaryLoggerCarry } from "./binary_logger.ts";

/**
 * A process's stdio as it crosses a live upgrade: the descriptors the next code continues with
 * (each kept open across `execve`). A part that has ended (a pipe at end of file, a target
 * closed, stdin after CloseIO) is absent.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { ProcessIoCarry } from "@skiff/shim/linux";
 * const carry: ProcessIoCarry = { stdout: { sink: 12, pipe: 14 }, stderr: { sink: 13, pipe: 15 } };
 * strictEqual(carry.stdin, undefined);
 * ```
 */
export interface ProcessIoCarry {
  /** The stdin FIFO (read end), its keep-alive writer, and the pipe into the process. */
  stdin?: { fifo: number; keepAlive?: number; pipe?: number };
  /** The terminal's master, when the process has one (then there are no pipes). */
  pty?: number;
  /** The stdout target and the pipe from the process. */
  stdout?: { sink: number; pipe?: number };
  /** The stderr target (the same descriptor as stdout's for a `file://` log) and its pipe. */
  stderr?: { sink: number; pipe?: number };
  /**
   * The `binary://` logger the targets belong to (its pipes are the stdout and stderr sinks):
   * the process, which stays the shim's child. Holds no descriptor.
   */
  logger?: BinaryLoggerCarry;
  /**
   * The runtime took the targets as web streams (`ProcessIo.streams`): there are no pipes, and
   * the next code hands the targets to the runtime as streams again.
   */
  streams?: { terminal: boolean };
}

/**
 * Every descriptor in `carry`: what must stay open (close-on-exec cleared) across `execve`.
 * Listed here, next to the format, so a part added to it is added here too.
 *
 * @param carry a process's carried stdio
 * @returns its descriptors, each once
 * @example Usage
 * ```ts
 * import { deepStrictEqual } from "node:assert/strict";
 * import { processIoDescriptors } from "@skiff/shim/linux";
 * // A file:// log: stdout and stderr write the same descriptor.
 * deepStrictEqual(processIoDescriptors({ stdout: { sink: 9, pipe: 10 }, stderr: { sink: 9, pipe: 11 } }), [9, 10, 11]);
 * ```
 */
export function processIoDescriptors(carry: ProcessIoCarry): number[] {
  const fds = [
    carry.stdin?.fifo,
    carry.stdin?.keepAlive,
    carry.stdin?.pipe,
    carry.pty,
    carry.stdout?.sink,
    carry.stdout?.pipe,
    carry.stderr?.sink,
    carry.stderr?.pipe,
  ];
  return [...new Set(fds.filter((fd): fd is number => fd !== undefined))];
}
