/**
 * The reliability soak, run on demand: `deno task soak [flags]` (as root). Runs each phase
 * against skiff's runc shim and containerd's Go runc shim on the same private containerd and
 * prints a side-by-side table; exits 1 when any figure is a failure. See docs/reliability.md.
 *
 * Flags: `--versions 2.1,1.6` `--execs N` `--in-flight N` `--containers N`
 * `--burst-containers N` `--burst-execs N` `--only skiff` `--json <file>`; `--shared-pods N`
 * (skiff's shim in shared servers of up to N pods, beside `--neighbours N` pods, default 2;
 * no live-upgrade phase for it: a shared server refuses live upgrade).
 *
 * @module
 */

import { parseArgs } from "node:util";
import { runSoak, soakErrors, soakTable } from "./soak/run.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    versions: { type: "string", default: "2.1" },
    execs: { type: "string", default: "10000" },
    "in-flight": { type: "string", default: "8" },
    containers: { type: "string", default: "200" },
    "burst-containers": { type: "string", default: "40" },
    "burst-execs": { type: "string", default: "1000" },
    "upgrade-execs": { type: "string", default: "2000" },
    "upgrade-every-ms": { type: "string", default: "2000" },
    only: { type: "string" },
    "shared-pods": { type: "string" },
    neighbours: { type: "string", default: "2" },
    json: { type: "string" },
  },
});

function count(name: string, v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new Error(`--${name} wants a count, got "${v}"`);
  return n;
}

if (values.only !== undefined && values.only !== "skiff") {
  throw new Error(`--only accepts "skiff", got "${values.only}"`);
}
const t0 = Date.now();
const rows = await runSoak({
  versions: values.versions.split(",").map((s) => s.trim()).filter(Boolean),
  execs: count("execs", values.execs),
  inFlight: count("in-flight", values["in-flight"]),
  containers: count("containers", values.containers),
  burstContainers: count("burst-containers", values["burst-containers"]),
  burstExecs: count("burst-execs", values["burst-execs"]),
  upgradeExecs: count("upgrade-execs", values["upgrade-execs"]),
  upgradeEveryMs: count("upgrade-every-ms", values["upgrade-every-ms"]),
  ...(values.only === "skiff" ? { only: "skiff" as const } : {}),
  ...(values["shared-pods"] !== undefined
    ? {
      sharedPods: count("shared-pods", values["shared-pods"]),
      neighbours: count("neighbours", values.neighbours),
    }
    : {}),
  log: (line) => console.error(`[${((Date.now() - t0) / 1000).toFixed(0)}s] ${line}`),
});
console.log(soakTable(rows));
if (values.json) await Deno.writeTextFile(values.json, JSON.stringify(rows, null, 2));
Deno.exit(rows.some((r) => soakErrors(r) > 0) ? 1 : 0);
