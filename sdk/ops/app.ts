/**
 * The shim's operations endpoint as a Hono app: `/metrics`, `/healthz`, `/debug/state`,
 * `/debug/events`. Every route reads; none can change a task.
 *
 * @module
 */

import { Hono } from "hono";
import { EXPOSITION_CONTENT_TYPE, mountGetRoutes } from "./_routes.ts";

/** Most events `/debug/events` returns by default. */
const DEFAULT_EVENT_LIMIT = 100;

/**
 * What the endpoint serves.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { OpsAppSource } from "@skiff/shim/ops";
 * const src: OpsAppSource = { metrics: () => "", state: () => ({}), events: () => [], maxEvents: 10 };
 * strictEqual(src.maxEvents, 10);
 * ```
 */
export interface OpsAppSource {
  /** The text exposition for `/metrics`. */
  metrics(): string;
  /** A JSON-serialisable snapshot for `/debug/state`. */
  state(): unknown;
  /** The most recent `limit` events, oldest first, for `/debug/events`. */
  events(limit: number): unknown[];
  /** The largest `limit` accepted (the size of the event history). */
  maxEvents: number;
}

function json(value: unknown): Response {
  // Indented: people read this with curl more often than programs do.
  return new Response(JSON.stringify(value, null, 2) + "\n", {
    headers: { "content-type": "application/json; charset=utf-8" },
  });
}

/**
 * Builds the endpoint. Unknown paths get 404 naming the real ones, other methods 405 with
 * `Allow: GET, HEAD`, and a bad `limit` on `/debug/events` 400.
 *
 * @param source what to serve
 * @returns the app; serve its `fetch` (see `serveUnixHttp`)
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { createOpsApp } from "@skiff/shim/ops";
 * const app = createOpsApp({ metrics: () => "up 1\n", state: () => ({}), events: () => [], maxEvents: 1 });
 * const res = await app.request("/metrics", { method: "POST" });
 * strictEqual(res.status, 405);
 * ```
 */
export function createOpsApp(source: OpsAppSource): Hono {
  return mountGetRoutes(new Hono(), {
    "/metrics": () =>
      new Response(source.metrics(), { headers: { "content-type": EXPOSITION_CONTENT_TYPE } }),
    "/healthz": (c) => c.text("ok\n"),
    "/debug/state": () => json(source.state()),
    "/debug/events": (c) => {
      const raw = c.req.query("limit");
      let limit = Math.min(DEFAULT_EVENT_LIMIT, source.maxEvents);
      if (raw !== undefined) {
        limit = /^[0-9]+$/.test(raw) ? Number(raw) : NaN;
        if (!(limit >= 1 && limit <= source.maxEvents)) {
          return c.text(
            `invalid limit "${raw}": it must be an integer from 1 to ${source.maxEvents}\n`,
            400,
          );
        }
      }
      return json(source.events(limit));
    },
  });
}
