/**
 * Internal: a Connect `HandlerContext` made without loading Connect, as its
 * `createHandlerContext` makes one: the call's deadline and the connection's end abort `signal`
 * (the deadline with `DeadlineExceeded`), `abort()` completes the call, and `values` holds
 * interceptors' context values. The server does not load Connect (see status_error.ts).
 *
 * @module
 */

import type { ContextKey, ContextValues, HandlerContext } from "@connectrpc/connect";
import { Code, statusError } from "./status_error.ts";

/** What a call's context is made from. */
export interface HandlerContextInit {
  service: HandlerContext["service"];
  method: HandlerContext["method"];
  url: string;
  /** The call's deadline from now; undefined for none. */
  timeoutMs: number | undefined;
  requestHeader: Headers;
}

/** A context and its controller: `abort` ends the call (and its deadline timer). */
export type ControlledHandlerContext = HandlerContext & { abort(reason?: unknown): void };

function contextValues(): ContextValues {
  const values: Record<symbol, unknown> = {};
  const cv: ContextValues = {
    get<T>(key: ContextKey<T>): T {
      return (key.id in values ? values[key.id] : key.defaultValue) as T;
    },
    set<T>(key: ContextKey<T>, value: T) {
      values[key.id] = value;
      return cv;
    },
    delete(key: ContextKey<unknown>) {
      delete values[key.id];
      return cv;
    },
  };
  return cv;
}

/**
 * Makes one call's context.
 *
 * @param init the call's service, method, URL, deadline and metadata
 * @returns the context, with `abort`
 */
export function handlerContext(init: HandlerContextInit): ControlledHandlerContext {
  const controller = new AbortController();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = init.timeoutMs === undefined ? undefined : Date.now() + init.timeoutMs;
  if (init.timeoutMs !== undefined) {
    timer = setTimeout(() => {
      controller.abort(statusError("the operation timed out", Code.DeadlineExceeded));
    }, init.timeoutMs);
  }
  return {
    service: init.service,
    method: init.method,
    protocolName: "ttrpc",
    requestMethod: "POST",
    url: init.url,
    signal: controller.signal,
    timeoutMs: () => deadline === undefined ? undefined : deadline - Date.now(),
    requestHeader: init.requestHeader,
    responseHeader: new Headers(),
    responseTrailer: new Headers(),
    values: contextValues(),
    abort(reason?: unknown) {
      clearTimeout(timer);
      controller.abort(reason);
    },
  } as ControlledHandlerContext;
}
