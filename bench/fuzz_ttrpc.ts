/**
 * `deno task fuzz-ttrpc`: the seeded hostile-peer fuzz against a real shim serving a real
 * container under a private containerd (bench/fuzz/shim_fuzz.ts), printing a table.
 *
 *     deno task fuzz-ttrpc --frames 100000 --seed 1 --containerd 2.4 --shims skiff,go
 *     deno task fuzz-ttrpc --target ops --frames 5000
 *
 * @module
 */

import { parseArgs } from "node:util";
import { containerdVersions } from "../sdk/testing/containerd.ts";
import { fuzzShims, fuzzTable, type FuzzTarget } from "./fuzz/shim_fuzz.ts";

const { values } = parseArgs({
  options: {
    frames: { type: "string", default: "10000" },
    seed: { type: "string", default: "1" },
    containerd: { type: "string", default: "2." },
    shims: { type: "string", default: "skiff" },
    target: { type: "string", default: "ttrpc" },
    settle: { type: "string", default: "60000" },
    hold: { type: "string", default: "0" },
    debug: { type: "boolean", default: false },
    cold: { type: "boolean", default: false },
  },
});
const version = containerdVersions().filter((v) => v.version.startsWith(values.containerd!))
  .at(-1);
if (!version) throw new Error(`no containerd ${values.containerd} (run tests/setup/prepare.sh)`);
const target = values.target as FuzzTarget;
const rows = await fuzzShims({
  binDir: version.binDir,
  frames: Number(values.frames),
  seed: Number(values.seed),
  shims: values.shims!.split(",") as ("skiff" | "go")[],
  target,
  ...(target === "ops" ? { shimEnv: { SKIFF_OPS: "1" } } : {}),
  settleMs: Number(values.settle),
  ...(Number(values.hold) > 0 ? { hold: { chance: 0.02, max: Number(values.hold) } } : {}),
  debug: values.debug,
  adopted: !values.cold,
  log: (line) => console.log(line),
});
console.log(`\ncontainerd ${version.version}, seed ${values.seed}\n`);
console.log(fuzzTable(rows));
for (const r of rows) for (const p of r.problems) console.log(`${r.shim}: ${p}`);
