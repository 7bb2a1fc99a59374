// The server's extension seam (sdk/shim/server/compose.ts): hooks are joined in the extensions'
// order, an extension that declines or fails to set up is left out, and a failing hook is
// logged without keeping the next one from running.
import assert from "node:assert/strict";
import { composeExtensions } from "../../../../sdk/shim/server/compose.ts";
import type { ServerExtension, ServerState } from "../../../../sdk/shim/server/extension.ts";
import { Logger } from "../../../../sdk/shim/logger.ts";
import { parseShimFlags } from "../../../../sdk/shim/contract/flags.ts";

Deno.test("composeExtensions() joins hooks in order and survives extensions that fail", async () => {
  const lines: string[] = [];
  const logger = new Logger({ sink: (l) => lines.push(l) });
  const calls: string[] = [];
  const recorder = (name: string): ServerExtension => ({
    name,
    setup: () => ({
      interceptors: [(next) => next],
      onEvent: (e) => calls.push(`${name} event ${e.topic}`),
      onServing: (s) => void calls.push(`${name} serving ${s.sandboxes()}`),
      onShutdown: () => {
        calls.push(`${name} shutdown`);
        if (name === "a") throw new Error("a cannot stop");
      },
    }),
  });
  const hooks = await composeExtensions([
    recorder("a"),
    { name: "off", setup: () => undefined },
    {
      name: "broken",
      setup: () => {
        throw new Error("no way");
      },
    },
    recorder("b"),
  ], {
    shim: { runtimeName: "rt", version: "1" },
    flags: parseShimFlags(["-namespace", "n", "-id", "i", "-address", "/a"]),
    logger,
    origin: "cold",
    socket: "/nonexistent/s",
    bundle: "/nonexistent",
  });
  assert.equal(hooks.interceptors.length, 2);
  hooks.onEvent({ topic: "/tasks/exit" } as Parameters<typeof hooks.onEvent>[0]);
  await hooks.onServing({ sandboxes: () => 3 } as unknown as ServerState);
  await hooks.onShutdown();
  assert.deepEqual(calls, [
    "a event /tasks/exit",
    "b event /tasks/exit",
    "a serving 3",
    "b serving 3",
    "a shutdown",
    "b shutdown",
  ]);
  const log = lines.join("");
  assert.match(log, /server extension failed to set up.*extension=broken.*no way/);
  assert.match(log, /server extension failed on shutdown.*extension=a.*a cannot stop/);
});
