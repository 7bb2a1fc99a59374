/**
 * Waiting on a promise for as long as an RPC's caller still wants the answer.
 *
 * @module
 */

import { asStatusError, Code } from "../../ttrpc/status_error.ts";

/**
 * Resolves like `p`, or rejects with Canceled (or the reason's own code) once `signal` aborts,
 * removing its listener either way.
 *
 * @example Usage
 * ```ts
 * import { rejects } from "node:assert/strict";
 * import { Code } from "@connectrpc/connect";
 * import { abortable } from "./abortable.ts";
 * const ac = new AbortController();
 * const waiting = abortable(new Promise(() => {}), ac.signal);
 * ac.abort();
 * await rejects(waiting, { code: Code.Canceled });
 * ```
 */
export function abortable<V>(p: Promise<V>, signal: AbortSignal | undefined): Promise<V> {
  if (!signal) return p;
  return new Promise<V>((resolve, reject) => {
    if (signal.aborted) return reject(asStatusError(signal.reason ?? "aborted", Code.Canceled));
    const onAbort = () => reject(asStatusError(signal.reason ?? "aborted", Code.Canceled));
    signal.addEventListener("abort", onAbort, { once: true });
    p.then((v) => {
      signal.removeEventListener("abort", onAbort);
      resolve(v);
    }, reject);
  });
}
