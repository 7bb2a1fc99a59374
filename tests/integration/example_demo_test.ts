// `deno task example` runs examples/demo.ts: the runc example shim end to end under the
// harness. This test runs it exactly so and checks what it prints.
import assert from "node:assert/strict";
import { integrationTest } from "../_integration.ts";

integrationTest(
  "deno task example prints the container's output and the events in order",
  { root: true, binaries: ["runc", "busybox"] },
  async () => {
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["task", "example"],
      cwd: new URL("../..", import.meta.url).pathname,
      stdout: "piped",
      stderr: "piped",
    }).output();
    const text = new TextDecoder().decode(out.stdout);
    assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
    assert.match(text, /hello from a skiff-managed container/);
    assert.match(text, /hello from an exec/);
    assert.match(text, /exec exit status 7, container exit status 3/);
    const topics = [...text.matchAll(/^(\/tasks\/[a-z-]+)/gm)].map((m) => m[1]);
    assert.deepEqual(topics, [
      "/tasks/create",
      "/tasks/start",
      "/tasks/exec-added",
      "/tasks/exec-started",
      "/tasks/exit",
      "/tasks/exit",
      "/tasks/delete",
    ]);
  },
);
