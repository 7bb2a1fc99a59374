/**
 * Connect-compatible errors without loading Connect. `@connectrpc/connect` (and through it
 * protobuf-es's reflection) costs a short-lived action about 50 ms of start-up, yet the runtime
 * and options code that the actions share with the server must throw errors the ttrpc server
 * answers with a status code. The server uses them too: Connect's error module imports
 * protobuf-es's root, and in a code-split bundle that drags the descriptor boot of any lazily
 * loaded service (the Sandbox API) into the server's start (docs/performance.md). Connect's `ConnectError` recognises, by shape, errors from another
 * copy of itself (`instanceof` checks name, code, metadata, details, rawMessage and cause); the
 * errors made here have that shape, so the server, `ConnectError.from` and `instanceof
 * ConnectError` treat them as Connect's own.
 *
 * @module
 */

import type { Code as ConnectCode, ConnectError } from "@connectrpc/connect";

/**
 * gRPC status codes, the same numbers as Connect's `Code` enum.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { Code } from "@skiff/shim";
 * strictEqual(Code.NotFound, 5);
 * ```
 */
export const Code = {
  Canceled: 1,
  Unknown: 2,
  InvalidArgument: 3,
  DeadlineExceeded: 4,
  NotFound: 5,
  AlreadyExists: 6,
  PermissionDenied: 7,
  ResourceExhausted: 8,
  FailedPrecondition: 9,
  Aborted: 10,
  OutOfRange: 11,
  Unimplemented: 12,
  Internal: 13,
  Unavailable: 14,
  DataLoss: 15,
  Unauthenticated: 16,
} as const satisfies Record<string, ConnectCode>;

const NAMES = [
  "",
  "canceled",
  "unknown",
  "invalid_argument",
  "deadline_exceeded",
  "not_found",
  "already_exists",
  "permission_denied",
  "resource_exhausted",
  "failed_precondition",
  "aborted",
  "out_of_range",
  "unimplemented",
  "internal",
  "unavailable",
  "data_loss",
  "unauthenticated",
];

class LightConnectError extends Error {
  override name = "ConnectError";
  readonly rawMessage: string;
  readonly code: number;
  readonly metadata: Headers = new Headers();
  readonly details: unknown[] = [];
  override readonly cause: unknown;
  constructor(message: string, code: number, cause?: unknown) {
    super(`[${NAMES[code] ?? code}] ${message}`);
    this.rawMessage = message;
    this.code = code;
    this.cause = cause;
  }
}

/**
 * How the ttrpc package's own Unavailable errors begin, for a caller that must tell them apart:
 * a server draining answers a new call with {@linkcode TTRPC_SHUTTING_DOWN}, and a client whose
 * connect failed (the call never reached a server) says {@linkcode TTRPC_DIAL_FAILED} first.
 */
export const TTRPC_SHUTTING_DOWN = "ttrpc server is shutting down";
/** See {@linkcode TTRPC_SHUTTING_DOWN}. */
export const TTRPC_DIAL_FAILED = "dial ttrpc socket";

/**
 * An error with a gRPC status code that Connect and skiff's ttrpc server take for a
 * `ConnectError` (only `findDetails` is missing: these errors carry no details).
 *
 * @param message what failed, with which value
 * @param code the status code
 * @param cause the underlying error, if any
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { Code, statusError } from "@skiff/shim";
 * const e = statusError(`container "c1" not found`, Code.NotFound);
 * strictEqual(e.code, Code.NotFound);
 * strictEqual(e.rawMessage, `container "c1" not found`);
 * ```
 */
export function statusError(message: string, code: ConnectCode, cause?: unknown): ConnectError {
  return new LightConnectError(message, code, cause) as unknown as ConnectError;
}

/**
 * True for a `ConnectError`, Connect's own or one made by {@link statusError} (the same shape
 * test as Connect's `instanceof`).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { Code, isStatusError, statusError } from "@skiff/shim";
 * strictEqual(isStatusError(statusError("x", Code.Internal)), true);
 * strictEqual(isStatusError(new Error("x")), false);
 * ```
 */
export function isStatusError(e: unknown): e is ConnectError {
  if (!(e instanceof Error) || e.name !== "ConnectError") return false;
  const v = e as unknown as Record<string, unknown>;
  return typeof v.code === "number" && "metadata" in v && Array.isArray(v.details) &&
    typeof v.rawMessage === "string" && "cause" in v;
}

/**
 * Any thrown value as a `ConnectError`-shaped error, as Connect's `ConnectError.from` makes it:
 * a `ConnectError` (Connect's or one of these) as it is; an `AbortError` or `TimeoutError` as
 * `Canceled`; any other `Error` with its message and `code`; anything else by its string form.
 *
 * @param reason the thrown value
 * @param code the code for a plain error (default `Unknown`)
 * @returns the error
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { asStatusError, Code } from "./status_error.ts";
 * strictEqual(asStatusError(new Error("boom")).code, Code.Unknown);
 * strictEqual(asStatusError(new DOMException("stop", "AbortError")).code, Code.Canceled);
 * ```
 */
export function asStatusError(reason: unknown, code: ConnectCode = Code.Unknown): ConnectError {
  if (isStatusError(reason)) return reason;
  if (reason instanceof Error) {
    if (reason.name === "AbortError" || reason.name === "TimeoutError") {
      return statusError(reason.message, Code.Canceled);
    }
    return statusError(reason.message, code, reason);
  }
  return statusError(String(reason), code, reason);
}
