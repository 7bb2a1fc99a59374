// tests/setup/ci_times.ts: a deno test log's time by file, as .ci/run prints it.
import assert from "node:assert/strict";
import { durationSeconds, secondsByFile } from "../../setup/ci_times.ts";

Deno.test("ci_times: durations in deno's spelling", () => {
  assert.equal(durationSeconds("123ms"), 0.123);
  assert.equal(durationSeconds("4s"), 4);
  assert.equal(durationSeconds("1m2s"), 62);
  assert.equal(durationSeconds("1h0m3s"), 3603);
});

Deno.test("ci_times: top-level tests add up per file; steps and other output do not", () => {
  const log = [
    "running 2 tests from ./tests/integration/a_test.ts",
    "first ... ok (1m2s)",
    "  a step ... ok (50s)",
    "------- output -------",
    "ok | 3 passed | 0 failed (9s)",
    "second ... FAILED (due to 1 failed step) (500ms)",
    "running 1 test from ./tests/external/b_test.ts",
    "third ... ok (5s)",
  ].join("\n");
  assert.deepEqual([...secondsByFile(log)], [
    ["./tests/integration/a_test.ts", 62.5],
    ["./tests/external/b_test.ts", 5],
  ]);
});
