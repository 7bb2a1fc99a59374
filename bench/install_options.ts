/**
 * The `--mode bundle|source`, `--v8-flags a,b` and `--inline` (one bundle file, no chunks) arguments the benchmarks take, as
 * `installExampleShims` options: how the measured skiff shim is installed (bench/main.ts compares them).
 *
 * @module
 */
import { parseArgs } from "node:util";
import type { ExampleInstallOptions } from "../sdk/install/examples.ts";
import type { InstallMode } from "../sdk/install/install.ts";

/**
 * Parses `--mode`, `--v8-flags` (`--v8-flags=` for none) and `--inline`; other arguments are
 * ignored.
 *
 * @example Usage
 * ```ts
 * import { benchInstallOptions } from "./install_options.ts";
 * console.assert(benchInstallOptions(["--mode", "source"]).mode === "source");
 * ```
 */
export function benchInstallOptions(args: string[]): Omit<ExampleInstallOptions, "prefix"> {
  const { values } = parseArgs({
    args,
    strict: false,
    options: {
      mode: { type: "string" },
      "v8-flags": { type: "string" },
      inline: { type: "boolean" },
    },
  });
  const out: Omit<ExampleInstallOptions, "prefix"> = {};
  if (typeof values.mode === "string") {
    if (values.mode !== "bundle" && values.mode !== "source") {
      throw new TypeError(`--mode "${values.mode}": expected bundle or source`);
    }
    out.mode = values.mode as InstallMode;
  }
  const flags = values["v8-flags"];
  if (typeof flags === "string") out.v8Flags = flags.split(",").filter((f) => f !== "");
  if (values.inline === true) out.codeSplitting = false;
  return out;
}
