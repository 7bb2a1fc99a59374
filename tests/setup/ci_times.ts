// Where a `deno test` run's time went, by test file: reads a run's plain output (NO_COLOR), adds
// up the top-level tests' durations under each "running N tests from <file>" line, and prints the
// files, longest first, with their share. `.ci/run` prints it after its summary, so every CI log
// says which files to look at when the run grows (the target: a quiet run within 40 minutes).
//
// usage: deno run -A tests/setup/ci_times.ts LOG [--most N]

import { parseArgs } from "node:util";

/** Seconds in a deno test duration: "123ms", "4s", "1m2s", "1h0m3s". */
export function durationSeconds(text: string): number {
  let s = 0;
  for (const [, n, unit] of text.matchAll(/(\d+)(ms|h|m|s)/g)) {
    const v = Number(n);
    s += unit === "h" ? v * 3600 : unit === "m" ? v * 60 : unit === "s" ? v : v / 1000;
  }
  return s;
}

/** Seconds per test file in a log, in the order the files ran. */
export function secondsByFile(log: string): Map<string, number> {
  const out = new Map<string, number>();
  let file: string | undefined;
  for (const line of log.split("\n")) {
    const running = line.match(/^running \d+ tests? from (\S+)$/);
    if (running) {
      file = running[1]!;
      out.set(file, out.get(file) ?? 0);
      continue;
    }
    // A top-level test's last line (steps are indented): "name ... ok (1m2s)".
    const done = line.match(
      /^\S.* \.\.\. (?:ok|FAILED|ignored)(?: \(due to .*\))? \(([\dhms]+)\)$/,
    );
    if (done && file) out.set(file, out.get(file)! + durationSeconds(done[1]!));
  }
  return out;
}

if (import.meta.main) {
  const { positionals, values } = parseArgs({
    args: Deno.args,
    allowPositionals: true,
    options: { most: { type: "string", default: "25" } },
  });
  if (positionals.length !== 1) {
    console.error("usage: deno run -A tests/setup/ci_times.ts LOG [--most N]");
    Deno.exit(2);
  }
  const byFile = secondsByFile(await Deno.readTextFile(positionals[0]!));
  const total = [...byFile.values()].reduce((a, b) => a + b, 0);
  const rows = [...byFile].sort((a, b) => b[1] - a[1]).slice(0, Number(values.most));
  console.log(`ci-times: ${Math.round(total)} s in ${byFile.size} test files; the longest:`);
  for (const [f, s] of rows) {
    console.log(
      `ci-times: ${String(Math.round(s)).padStart(5)} s ${
        (100 * s / total).toFixed(1).padStart(5)
      }%  ${f}`,
    );
  }
}
