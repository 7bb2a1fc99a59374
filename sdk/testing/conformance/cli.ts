/**
 * `deno task conformance`: runs the conformance catalogue against a shim and prints the
 * matrix. Exit status 1 when a scenario fails or, with `--baseline`, regressed; 2 on bad usage.
 *
 * ```sh
 * deno task conformance --runtime io.containerd.runc.v2 --shim /usr/bin --containerd 2.1
 * ```
 *
 * @module
 */

import { parseArgs } from "node:util";
import { runConformance, SHARED_NO_UPGRADE } from "./runner.ts";
import { RUNTIME_TRAITS, type RuntimeTraits } from "./scenario.ts";
import { compareReports, type ConformanceReport, hasFailures, markdownReport } from "./report.ts";

const USAGE = `usage: deno task conformance --runtime io.containerd.X.v2 [--shim DIR] [options]

Runs skiff's conformance catalogue against the shim DIR/containerd-shim-X-v2 under each
containerd version available (those tests/setup/prepare.sh installs), each in a private,
throw-away containerd, and prints a Markdown matrix on stdout.

options:
  --runtime TYPE        runtime type under test (required), e.g. io.containerd.runc.v2
  --shim DIR            directory holding the shim binary (default: each containerd's own
                        bin dir, i.e. the Go runc shim shipped with that containerd)
  --containerd LIST     versions to use, comma-separated prefixes (e.g. 1.6,2.1); default all
  --containerd-dir DIR  also run under the containerd build in DIR (repeatable)
  --only PATTERN        run only scenarios whose id matches PATTERN (a regular expression)
  --json FILE           also write the report as JSON
  --baseline FILE       compare with an earlier --json report; regressions fail the run
  --no-runc-options     send no containerd.runc.v1.Options with tasks (for non-runc shims)
  --no-grouping         the shim does not honour io.containerd.runc.v2.group (skip grouping)
  --no-sandbox-api      the shim serves no Sandbox API (skip sandbox-api; the Go runc shim)
  --neighbour           the shim's servers serve several pods (skiff's SKIFF_SHARED_PODS):
                        run each scenario beside a neighbour container in the same server,
                        and fail it unless its tasks joined that server and the neighbour ran
                        on (live-upgrade: not applicable)
  --not-applicable TRAIT=REASON
                        the scenarios needing TRAIT do not apply to this runtime, reported as
                        "not applicable: REASON" (repeatable); TRAIT is one of
                        ${RUNTIME_TRAITS.join(", ")}
  --help                this text
`;

/**
 * Parses the command line and runs the catalogue.
 *
 * @param args command-line arguments
 * @returns the exit status
 *
 * @example Usage
 * ```ts ignore
 * Deno.exit(await main(["--runtime", "io.containerd.runc.v2", "--shim", "/usr/bin"]));
 * ```
 */
export async function main(args: string[]): Promise<number> {
  // long: one flag table and its checks, then the run; each check reads best beside its flag
  let v;
  try {
    v = parseArgs({
      args,
      options: {
        runtime: { type: "string" },
        shim: { type: "string" },
        containerd: { type: "string" },
        "containerd-dir": { type: "string", multiple: true },
        only: { type: "string" },
        json: { type: "string" },
        baseline: { type: "string" },
        "no-runc-options": { type: "boolean" },
        "no-grouping": { type: "boolean" },
        "no-sandbox-api": { type: "boolean" },
        neighbour: { type: "boolean" },
        "not-applicable": { type: "string", multiple: true },
        help: { type: "boolean", short: "h" },
      },
    }).values;
  } catch (e) {
    console.error(`${(e as Error).message}\n\n${USAGE}`);
    return 2;
  }
  if (v.help) {
    console.log(USAGE);
    return 0;
  }
  if (!v.runtime) {
    console.error(`--runtime is required\n\n${USAGE}`);
    return 2;
  }
  const traits: RuntimeTraits = {
    grouping: !v["no-grouping"],
    sandboxApi: !v["no-sandbox-api"],
    ...(v.neighbour ? { liveUpgrade: { notApplicable: SHARED_NO_UPGRADE } } : {}),
  };
  for (const na of v["not-applicable"] ?? []) {
    const eq = na.indexOf("=");
    const name = na.slice(0, eq) as keyof RuntimeTraits;
    if (eq < 1 || !RUNTIME_TRAITS.includes(name) || na.slice(eq + 1).trim() === "") {
      console.error(`--not-applicable ${na}: not TRAIT=REASON with a known TRAIT\n\n${USAGE}`);
      return 2;
    }
    traits[name] = { notApplicable: na.slice(eq + 1).trim() };
  }
  const baseline: ConformanceReport | undefined = v.baseline
    ? JSON.parse(await Deno.readTextFile(v.baseline))
    : undefined;
  const report = await runConformance({
    runtime: v.runtime,
    ...(v.shim ? { shimDir: v.shim } : {}),
    ...(v.containerd ? { containerd: v.containerd.split(",").map((s) => s.trim()) } : {}),
    ...(v["containerd-dir"] ? { containerdDirs: v["containerd-dir"] } : {}),
    ...(v.only ? { only: v.only } : {}),
    runcOptions: !v["no-runc-options"],
    ...(v.neighbour ? { neighbour: true } : {}),
    traits,
    onResult: (r) =>
      console.error(
        `containerd ${r.containerd} ${r.scenario}: ${r.status}${r.reason ? ` (${r.reason})` : ""}`,
      ),
  });
  console.log(markdownReport(report));
  if (v.json) await Deno.writeTextFile(v.json, JSON.stringify(report, null, 2) + "\n");
  let status = hasFailures(report) ? 1 : 0;
  if (baseline) {
    const regressions = compareReports(baseline, report);
    if (regressions.length > 0) {
      status = 1;
      console.log(`Regressions against ${v.baseline}:\n`);
      for (const g of regressions) {
        console.log(
          `- \`${g.scenario}\` on containerd ${g.containerd}: pass → ${g.now}` +
            (g.reason ? ` (${g.reason})` : ""),
        );
      }
    } else {
      console.log(`No regressions against ${v.baseline}.`);
    }
  }
  return status;
}

if (import.meta.main) Deno.exit(await main(Deno.args));
