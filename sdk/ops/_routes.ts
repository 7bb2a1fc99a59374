/**
 * Read-only routing shared by the shim endpoint and the node monitor: GET (and HEAD) on a
 * fixed set of paths, 405 with an `Allow` header for any other method there, 404 naming the
 * paths that exist for anything else. Neither server has a route that changes state.
 *
 * @module
 */

import type { Context, Hono } from "hono";

/** A read-only handler. */
export type GetHandler = (c: Context) => Response | Promise<Response>;

/** Text content type of the Prometheus exposition format. */
export const EXPOSITION_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

/** Registers `routes` on `app` as GET-only, plus the 404 and error answers. */
export function mountGetRoutes(app: Hono, routes: Record<string, GetHandler>): Hono {
  const paths = Object.keys(routes);
  for (const [path, handler] of Object.entries(routes)) {
    app.get(path, handler);
    // Registered after the GET route, so it only sees the other methods.
    app.all(path, (c) =>
      c.text(
        `method ${c.req.method} is not allowed on ${path}: this endpoint is read-only, use GET\n`,
        405,
        { Allow: "GET, HEAD" },
      ));
  }
  app.notFound((c) =>
    c.text(`no such path "${c.req.path}": the paths are ${paths.join(", ")}\n`, 404)
  );
  app.onError((err, c) => c.text(`internal error: ${err.message}\n`, 500));
  return app;
}
