// compose.ts: server extensions joined; one that fails is logged and skipped, never fatal.
import assert from "node:assert/strict";
import { composeExtensions } from "../../../../sdk/shim/server/compose.ts";
import type { ServerExtension, ServerSetup } from "../../../../sdk/shim/server/extension.ts";
import { Logger } from "../../../../sdk/shim/logger.ts";

function setup(lines: string[]): ServerSetup {
  const logger = new Logger({ sink: (l: string) => void lines.push(l), level: "debug" });
  return { logger } as unknown as ServerSetup;
}

Deno.test("composeExtensions: hooks in order; a failing setup or hook is logged and skipped", async () => {
  const calls: string[] = [];
  const lines: string[] = [];
  const ext = (name: string, fail?: "setup" | "serving"): ServerExtension => ({
    name,
    setup: () => {
      if (fail === "setup") throw new Error(`${name} cannot`);
      return {
        interceptors: [(next) => next],
        onEvent: (e) => void calls.push(`${name} event ${(e as { topic: string }).topic}`),
        onServing: () => {
          calls.push(`${name} serving`);
          if (fail === "serving") throw new Error(`${name} broke`);
        },
        onShutdown: () => void calls.push(`${name} shutdown`),
      };
    },
  });
  const hooks = await composeExtensions(
    [ext("a"), ext("b", "setup"), ext("c", "serving")],
    setup(lines),
  );
  assert.equal(hooks.interceptors.length, 2);
  hooks.onEvent({ topic: "/tasks/exit" } as never);
  await hooks.onServing({} as never);
  await hooks.onShutdown();
  assert.deepEqual(calls, [
    "a event /tasks/exit",
    "c event /tasks/exit",
    "a serving",
    "c serving",
    "a shutdown",
    "c shutdown",
  ]);
  const text = lines.join("\n");
  assert.match(text, /failed to set up/);
  assert.match(text, /b cannot/);
  assert.match(text, /failed once serving/);
  assert.match(text, /c broke/);
});
