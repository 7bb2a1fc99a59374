/**
 * How a failed runtime command is reported: {@link OciRuntimeError} with the runtime's own last
 * error line, and the mapping to the Task API's codes that containerd expects (a missing
 * container is NotFound, a kill of a finished process is NotFound).
 *
 * @module
 */

import type { ConnectError } from "@connectrpc/connect";
// Light Connect-shaped errors: `delete` and `-info` build this runtime without loading Connect.
import { Code, isStatusError, statusError } from "../ttrpc/status_error.ts";

/**
 * Details of a failed runtime command.
 *
 * @example Usage
 * ```ts
 * import type { OciRuntimeErrorInit } from "@skiff/shim/oci";
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
 * import { strictEqual } from "node:assert/strict";
 * import { OciRuntimeError } from "@skiff/shim/oci";
 * const e = new OciRuntimeError({
 *   binary: "runc",
 *   command: "start",
 *   id: "web",
 *   args: ["start", "web"],
 *   exitCode: 1,
 *   runtimeMessage: "container not running",
 * });
 * strictEqual(e.message, 'runc start "web" failed (exit status 1): container not running');
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
 * True when a kill's failure text says the process has already gone (see {@link mapKillError}).
 *
 * @param text The runtime's message.
 * @returns Whether the text names a finished process.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { saysGone } from "@skiff/shim/oci";
 * strictEqual(saysGone("container not running"), true);
 * ```
 */
export function saysGone(text: string): boolean {
  return GONE_PATTERNS.some((p) => p.test(text));
}

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
 * import { strictEqual } from "node:assert/strict";
 * import { Code } from "@connectrpc/connect";
 * import { mapKillError } from "@skiff/shim/oci";
 * const e = mapKillError(new Error("container not running"));
 * strictEqual(e.code, Code.NotFound);
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
  if (saysGone(text)) {
    return processGone(message, e);
  }
  return statusError(
    `kill failed: ${message}`,
    Code.FailedPrecondition,
    e,
  );
}

/**
 * The NotFound a kill of a finished process reports (containerd's `errdefs.ErrNotFound`).
 *
 * @param message What the runtime said.
 * @param cause The runtime's error.
 * @returns The ConnectError to throw.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { Code } from "@connectrpc/connect";
 * import { processGone } from "@skiff/shim/oci";
 * strictEqual(processGone("connection refused").code, Code.NotFound);
 * ```
 */
export function processGone(message: string, cause?: unknown): ConnectError {
  return statusError(`kill failed: process already finished: ${message}`, Code.NotFound, cause);
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
 * import { strictEqual } from "node:assert/strict";
 * import { isNotExist, OciRuntimeError } from "@skiff/shim/oci";
 * const e = new OciRuntimeError({
 *   binary: "runc",
 *   command: "delete",
 *   id: "web",
 *   args: ["delete", "web"],
 *   exitCode: 1,
 *   runtimeMessage: "container does not exist",
 * });
 * strictEqual(isNotExist(e), true);
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
