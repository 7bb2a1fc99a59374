/**
 * The output and input targets of a container process's stdio as containerd names them: the
 * request's fields ({@linkcode StdioSpec}), and opening them (FIFOs, a `file://` log, a
 * `binary://` logger) for {@linkcode ProcessIo}.
 *
 * @module
 */

import { ErrnoError, O, open } from "./libc.ts";
import { FdStream } from "./fd_stream.ts";
import { BinaryLogger } from "./binary_logger.ts";
import { parseOutputTarget } from "./stdio_uri.ts";
import type { Reaper } from "./reaper.ts";

/**
 * The stdio fields of a create or exec request. Empty strings mean "none".
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { StdioSpec } from "@skiff/shim/linux";
 * // What `ctr run` without a terminal sends: FIFOs for stdout and stderr, no stdin.
 * const spec: StdioSpec = { stdin: "", stdout: "/run/x/stdout", stderr: "/run/x/stderr", terminal: false };
 * strictEqual(spec.stdin, "");
 * ```
 */
export interface StdioSpec {
  /** stdin FIFO path (containerd's client writes it). */
  stdin: string;
  /** stdout FIFO path or `file://`, `binary://`, `binary-v2://` URI. */
  stdout: string;
  /** stderr FIFO path (for `file://` and `binary://` the stdout URI decides). */
  stderr: string;
  /** The process has a terminal: stdio flows through the pty (see {@linkcode ProcessIo.attachPty}). */
  terminal: boolean;
}

/**
 * Identifies the container, for `binary://` loggers.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { ProcessIoContext } from "@skiff/shim/linux";
 * const ctx: ProcessIoContext = { containerId: "web", namespace: "default" };
 * strictEqual(ctx.reaper, undefined); // loggers are then spawned without a reaper
 * ```
 */
export interface ProcessIoContext {
  /** Exported to loggers as CONTAINER_ID. */
  containerId: string;
  /** Exported to loggers as CONTAINER_NAMESPACE. */
  namespace: string;
  /** Spawn loggers through this reaper. */
  reaper?: Reaper;
}

/** A writer for output; FIFOs, files and logger pipes are all {@linkcode FdStream}s. */
export interface Sink {
  write(data: Uint8Array): Promise<void>;
  close(): Promise<void>;
}

/**
 * Opens the output targets `spec` names (FIFOs, a `file://` log or a `binary://` logger),
 * adding each to `opened` so that a failure later in {@linkcode ProcessIo.open} closes it.
 */
export async function openOutputs(
  spec: StdioSpec,
  ctx: ProcessIoContext,
  opened: { close(): Promise<void> }[],
): Promise<{ stdout?: Sink; stderr?: Sink; logger?: BinaryLogger }> {
  let stdout: Sink | undefined;
  let stderr: Sink | undefined;
  const target = parseOutputTarget(spec.stdout, spec.stderr);
  if (target.kind === "fifo") {
    if (target.stdout !== "") {
      stdout = await openOutput("stdout", target.stdout);
      opened.push(stdout);
    }
    if (target.stderr !== "" && target.stderr === target.stdout) stderr = stdout;
    else if (target.stderr !== "") {
      stderr = await openOutput("stderr", target.stderr);
      opened.push(stderr);
    }
    return { stdout, stderr };
  }
  if (target.kind === "file") {
    try {
      // Not node:path's dirname: any node: import boots Deno's Node layer (+1.2 MiB heap).
      const dir = target.path.slice(0, target.path.lastIndexOf("/")) || "/";
      await Deno.mkdir(dir, { recursive: true });
    } catch (e) {
      throw new Error(
        `create directory for log file "${target.path}": ${(e as Error).message}`,
      );
    }
    stdout = stderr = new FdStream(
      openOrThrow("log file", target.path, O.WRONLY | O.APPEND | O.CREAT | O.NONBLOCK, 0o644),
      `log file "${target.path}"`,
    );
    opened.push(stdout);
    return { stdout, stderr };
  }
  const logger = await BinaryLogger.start({
    path: target.path,
    args: target.args,
    requireReady: target.requireReady,
    containerId: ctx.containerId,
    namespace: ctx.namespace,
    ...(ctx.reaper ? { reaper: ctx.reaper } : {}),
  });
  opened.push(logger);
  return { stdout: logger.stdout, stderr: logger.stderr, logger };
}

export function openOrThrow(what: string, path: string, flags: number, mode = 0): number {
  try {
    return open(path, flags, mode);
  } catch (e) {
    if (e instanceof ErrnoError) throw new ErrnoError(`open ${what} "${path}"`, e.errno);
    throw e;
  }
}

async function openOutput(name: "stdout" | "stderr", path: string): Promise<FdStream> {
  let isFifo: boolean;
  try {
    isFifo = (await Deno.stat(path)).isFifo ?? false;
  } catch (e) {
    throw new Error(`open ${name} "${path}": ${(e as Error).message}`);
  }
  // Read-write on a FIFO: never blocks, never EPIPE, and the client can reopen its end.
  const flags = isFifo ? O.RDWR | O.NONBLOCK : O.WRONLY | O.APPEND | O.NONBLOCK;
  const kind = isFifo ? `${name} fifo` : `${name} file`;
  return new FdStream(openOrThrow(kind, path, flags), `${kind} "${path}"`);
}
