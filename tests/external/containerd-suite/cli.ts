/**
 * `deno task containerd-suite`: containerd's own integration/client suite (its runtime tests)
 * against containerd's Go runc shim and skiff's runc example, on each containerd version built
 * from Go modules; prints, per run, `containerd <v> <shim>: N passed, M failed, K skipped`,
 * then the Go-vs-skiff table of docs/conformance.md.
 *
 * usage: deno task containerd-suite [--versions 2.2.9,2.3.7,2.4.2] [--shims go,skiff]
 *          [--run 'TestIssue10589|TestContainerExec'] [--logs DIR] [--timeout-minutes 15]
 *
 * Exit status 1 when skiff fails a test or passes fewer than the Go shim on a version.
 *
 * @module
 */

import { parseArgs } from "node:util";
import { countRun, matrix, regressions, runMatrix, type SuiteShim } from "./suite.ts";

/** The versions the suite is built for by default: the Go-module builds. */
export const SUITE_VERSIONS: readonly string[] = ["2.2.9", "2.3.7", "2.4.2"];

const { values } = parseArgs({
  options: {
    versions: { type: "string", default: SUITE_VERSIONS.join(",") },
    shims: { type: "string", default: "go,skiff" },
    run: { type: "string" },
    logs: { type: "string" },
    "timeout-minutes": { type: "string", default: "15" },
  },
});

const shims = values.shims!.split(",").filter(Boolean) as SuiteShim[];
for (const s of shims) {
  if (s !== "go" && s !== "skiff") throw new Error(`--shims: unknown shim "${s}" (go, skiff)`);
}
const logs = values.logs ?? await Deno.makeTempDir({ prefix: "skiff-containerd-suite-logs-" });
await Deno.mkdir(logs, { recursive: true });
const runs = await runMatrix({
  versions: values.versions!.split(",").filter(Boolean),
  shims,
  ...(values.run ? { filter: new RegExp(values.run) } : {}),
  logs,
  timeoutMs: Number(values["timeout-minutes"]) * 60_000,
  onRun(run) {
    const c = countRun(run);
    console.log(
      `containerd ${run.version} ${run.shim}: ${c.passed} passed, ${c.failed} failed, ` +
        `${c.skipped} skipped (${Math.round(run.ms / 1000)} s${run.timedOut ? ", timed out" : ""})`,
    );
    for (const [name, text] of run.failures) console.log(`  FAIL ${name}\n${text}`);
  },
});
console.log(`\n${matrix(runs)}\n\nlogs: ${logs}`);
const bad = regressions(runs);
for (const b of bad) console.log(`REGRESSION: ${b}`);
Deno.exit(bad.length > 0 ? 1 : 0);
