/**
 * `deno task critest`: runs Kubernetes' CRI validation suite (critest) on private containerd
 * 2.x builds, once per handler (the Go runc shim, skiff-runc, skiff-runsc), and prints the
 * spec × (version, handler) matrix that docs/conformance.md shows. Exits 1 when skiff fails a
 * spec the Go shim passed on the same containerd.
 *
 *   deno task critest                        # containerd 2.1 and 2.4 (what CI runs)
 *   deno task critest --containerd 2.3       # one version (repeatable: --containerd 2.2 ...)
 *   deno task critest --containerd all --handler runc --handler skiff-runc --focus execSync
 *   deno task critest --containerd 2.4 --handler runc --handler skiff-runsc   # gVisor
 *   deno task critest --out matrix.md --keep
 *
 * Needs root, `bash tests/setup/prepare.sh` (critest, registry, CNI plugins, containerd builds).
 *
 * @module
 */

import { parseArgs } from "node:util";
import { containerdVersions } from "./containerd_versions.ts";
import {
  CRITEST_SKIPS,
  critestMatrix,
  critestRegressions,
  type CritestRun,
  runCritestMatrix,
} from "./critest.ts";

/** The containerd minors CI runs critest on (the oldest and newest 2.x built here). */
export const CI_CRITEST_VERSIONS: readonly string[] = ["2.1", "2.4"];

if (import.meta.main) {
  const { values } = parseArgs({
    options: {
      containerd: { type: "string", multiple: true },
      handler: { type: "string", multiple: true },
      focus: { type: "string" },
      out: { type: "string" },
      keep: { type: "boolean" },
      "timeout-minutes": { type: "string" },
    },
  });
  const wanted = values.containerd?.length ? values.containerd : [...CI_CRITEST_VERSIONS];
  const builds = containerdVersions().filter((v) =>
    v.version.startsWith("2.") &&
    (wanted.includes("all") || wanted.some((w) => v.version === w || v.version.startsWith(`${w}.`)))
  );
  if (builds.length === 0) {
    console.error(`critest: no containerd 2.x build matches ${wanted.join(", ")}`);
    Deno.exit(2);
  }
  const groups: CritestRun[][] = [];
  const regressions: string[] = [];
  for (const b of builds) {
    console.error(`critest: containerd ${b.version} (${b.binDir})`);
    const runs = await runCritestMatrix({
      binDir: b.binDir,
      ...(values.handler?.length ? { handlers: values.handler } : {}),
      ...(values.focus ? { focus: values.focus } : {}),
      ...(values.keep ? { keep: true } : {}),
      ...(values["timeout-minutes"]
        ? { timeoutMs: Number(values["timeout-minutes"]) * 60_000 }
        : {}),
      onRun: (r) => {
        const by = (st: string) => r.specs.filter((s) => s.state === st).length;
        console.error(
          `critest: ${r.version} ${r.handler}: ${by("passed")} passed, ${by("failed")} failed,` +
            ` ${by("skipped")} skipped in ${r.seconds} s${r.timedOut ? " (TIMED OUT)" : ""}`,
        );
        for (const s of r.specs.filter((s) => !["passed", "skipped"].includes(s.state))) {
          console.error(`  ${s.state}: ${s.name}\n    ${(s.message ?? "").split("\n")[0]}`);
        }
      },
    });
    groups.push(runs);
    regressions.push(...critestRegressions(runs).map((r) => `${b.version} ${r}`));
  }
  const skips = CRITEST_SKIPS.map((s) => `- \`${s.pattern}\`: ${s.reason}`).join("\n");
  const text = `${critestMatrix(groups)}\n\nSkipped for every handler:\n\n${skips}\n`;
  if (values.out) await Deno.writeTextFile(values.out, text);
  console.log(text);
  if (regressions.length > 0) {
    console.error(`critest: skiff failed specs the Go shim passed:\n  ${regressions.join("\n  ")}`);
    Deno.exit(1);
  }
}
