/**
 * The conformance report: its JSON shape, the Markdown matrix (scenario × containerd version),
 * and the comparison with an earlier report (regressions).
 *
 * @module
 */

/**
 * One scenario's outcome under one containerd version.
 *
 * @example Usage
 * ```ts
 * import type { ScenarioResult } from "@skiff/shim/testing";
 * const r: ScenarioResult = { scenario: "oom", containerd: "2.1.9", status: "pass" };
 * ```
 */
export interface ScenarioResult {
  /** Scenario id. */
  scenario: string;
  /** containerd version, e.g. `2.1.9`. */
  containerd: string;
  /** `pass`, `fail`, or `skip` (requirement unmet, with the reason). */
  status: "pass" | "fail" | "skip";
  /** Why it failed or was skipped (one line). */
  reason?: string;
  /** How long the check ran (informational). */
  ms?: number;
  /**
   * With a neighbour (`ConformanceOptions.neighbour`): the shared server's pid and how many of
   * the scenario's tasks it served beside the neighbour.
   */
  shared?: { server: number; joined: number };
}

/**
 * A whole run, as `--json` writes it.
 *
 * @example Usage
 * ```ts
 * import { deepStrictEqual } from "node:assert/strict";
 * import type { ConformanceReport } from "@skiff/shim/testing";
 * const report: ConformanceReport = {
 *   runtime: "io.containerd.skiff-runc.v2",
 *   shim: "/usr/local/bin/containerd-shim-skiff-runc-v2",
 *   date: "2026-01-01T00:00:00Z",
 *   containerd: ["2.1.9"],
 *   scenarios: [{ id: "oom", title: "OOM", standsFor: "/tasks/oom" }],
 *   results: [{ scenario: "oom", containerd: "2.1.9", status: "fail", reason: "no /tasks/oom" }],
 *   notCovered: [],
 * };
 * // What --json writes and a later run reads back as its baseline:
 * deepStrictEqual(JSON.parse(JSON.stringify(report)) as ConformanceReport, report);
 * ```
 */
export interface ConformanceReport {
  /** Runtime type under test. */
  runtime: string;
  /** Path of the shim binary. */
  shim: string;
  /** When the run started (ISO 8601). */
  date: string;
  /** containerd versions, in column order. */
  containerd: string[];
  /** The scenarios run, in row order. */
  scenarios: { id: string; title: string; standsFor: string }[];
  /** Every outcome. */
  results: ScenarioResult[];
  /** What the catalogue does not cover yet. */
  notCovered: string[];
}

function cell(r: ScenarioResult | undefined): string {
  if (!r) return "–";
  const reason = (r.reason ?? "").replaceAll("|", "\\|").replaceAll("\n", " ");
  if (r.status === "pass") return "pass";
  if (r.status === "fail") return `**FAIL**: ${reason}`;
  // A trait declared not applicable already says so (see `Trait`); no "skip:" in front.
  return reason.startsWith("not applicable: ") ? reason : `skip: ${reason}`;
}

/**
 * Renders the matrix as Markdown: one row per scenario, one column per containerd version.
 *
 * @param r a report
 * @returns Markdown text ending in a newline
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { markdownReport } from "@skiff/shim/testing";
 * const md = markdownReport({
 *   runtime: "io.containerd.runc.v2", shim: "/usr/bin/containerd-shim-runc-v2", date: "",
 *   containerd: ["2.1.9"], scenarios: [{ id: "oom", title: "OOM", standsFor: "" }],
 *   results: [{ scenario: "oom", containerd: "2.1.9", status: "pass" }], notCovered: [],
 * });
 * strictEqual(md.includes("| `oom` OOM | pass |"), true);
 * ```
 */
export function markdownReport(r: ConformanceReport): string {
  const lines = [
    `Runtime \`${r.runtime}\` (\`${r.shim}\`)`,
    "",
    `| scenario | ${r.containerd.map((v) => `containerd ${v}`).join(" | ")} |`,
    `| --- | ${r.containerd.map(() => "---").join(" | ")} |`,
  ];
  for (const s of r.scenarios) {
    const cells = r.containerd.map((v) =>
      cell(r.results.find((x) => x.scenario === s.id && x.containerd === v))
    );
    lines.push(`| \`${s.id}\` ${s.title} | ${cells.join(" | ")} |`);
  }
  const count = (st: string) => r.results.filter((x) => x.status === st).length;
  lines.push("", `${count("pass")} passed, ${count("fail")} failed, ${count("skip")} skipped.`);
  if (r.notCovered.length > 0) lines.push("", `Not covered yet: ${r.notCovered.join("; ")}.`);
  return lines.join("\n") + "\n";
}

/**
 * True when any scenario failed.
 *
 * @param r a report
 * @returns whether the run should exit non-zero
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { type ConformanceReport, hasFailures } from "@skiff/shim/testing";
 * const report: ConformanceReport = {
 *   runtime: "io.containerd.skiff-runc.v2",
 *   shim: "/usr/local/bin/containerd-shim-skiff-runc-v2",
 *   date: "2026-01-01T00:00:00Z",
 *   containerd: ["2.1.9"],
 *   scenarios: [{ id: "oom", title: "OOM", standsFor: "/tasks/oom" }],
 *   results: [{ scenario: "oom", containerd: "2.1.9", status: "fail", reason: "no /tasks/oom" }],
 *   notCovered: [],
 * };
 * strictEqual(hasFailures(report), true); // the CLI then exits 1
 * report.results[0] = { scenario: "oom", containerd: "2.1.9", status: "skip", reason: "no cgroup" };
 * strictEqual(hasFailures(report), false); // a skip is no failure
 * ```
 */
export function hasFailures(r: ConformanceReport): boolean {
  return r.results.some((x) => x.status === "fail");
}

/**
 * A change between a baseline and a new run, for one scenario under one containerd version.
 *
 * @example Usage
 * ```ts
 * import type { Regression } from "@skiff/shim/testing";
 * const g: Regression = { scenario: "oom", containerd: "2.1.9", was: "pass", now: "fail" };
 * ```
 */
export interface Regression {
  /** Scenario id. */
  scenario: string;
  /** containerd version. */
  containerd: string;
  /** Status in the baseline (`pass`). */
  was: "pass";
  /** Status now: `fail`, `skip` (coverage lost) or `missing` (not run). */
  now: "fail" | "skip" | "missing";
  /** The new reason, if any. */
  reason?: string;
}

/**
 * Compares a run with a baseline: every scenario that passed there and does not pass now
 * (under a containerd version both runs have) is a regression.
 *
 * @param baseline an earlier report
 * @param current this run's report
 * @returns the regressions, empty when none
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { compareReports, type ConformanceReport } from "@skiff/shim/testing";
 * const base = (status: "pass" | "fail"): ConformanceReport => ({
 *   runtime: "r", shim: "s", date: "", containerd: ["2.1.9"], scenarios: [], notCovered: [],
 *   results: [{ scenario: "oom", containerd: "2.1.9", status }],
 * });
 * strictEqual(compareReports(base("pass"), base("fail")).length, 1);
 * ```
 */
export function compareReports(
  baseline: ConformanceReport,
  current: ConformanceReport,
): Regression[] {
  const out: Regression[] = [];
  const ran = new Set(current.scenarios.map((s) => s.id));
  for (const b of baseline.results) {
    if (b.status !== "pass" || !current.containerd.includes(b.containerd)) continue;
    if (!ran.has(b.scenario) && current.scenarios.length > 0) continue;
    const now = current.results.find((x) =>
      x.scenario === b.scenario && x.containerd === b.containerd
    );
    if (now?.status === "pass") continue;
    out.push({
      scenario: b.scenario,
      containerd: b.containerd,
      was: "pass",
      now: now?.status ?? "missing",
      ...(now?.reason ? { reason: now.reason } : {}),
    });
  }
  return out;
}
