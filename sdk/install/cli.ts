/**
 * `deno task install [--prefix DIR]`: installs the example shims' launchers into
 * `<prefix>/bin` (default `/usr/local/bin`).
 *
 * @example Usage
 * ```sh
 * deno task install --prefix /opt/skiff
 * ```
 *
 * @module
 */

import { EXAMPLE_SHIMS, installShims } from "./install.ts";

const USAGE = `usage: deno task install [--prefix DIR]

Writes launchers for skiff's example shims into DIR/bin (default /usr/local/bin):
${Object.entries(EXAMPLE_SHIMS).map(([n, e]) => `  ${n}  →  ${e}`).join("\n")}
`;

/**
 * Parses the command line.
 *
 * @param args `Deno.args`
 * @returns the prefix, or `help: true`
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { parseInstallArgs } from "./cli.ts";
 * strictEqual(parseInstallArgs(["--prefix", "/opt"]).prefix, "/opt");
 * ```
 */
export function parseInstallArgs(args: string[]): { prefix: string; help: boolean } {
  let prefix = "/usr/local";
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (a === "-h" || a === "--help") return { prefix, help: true };
    if (a === "--prefix") {
      const v = args[++i];
      if (!v) throw new TypeError("--prefix needs a directory");
      prefix = v;
    } else if (a.startsWith("--prefix=")) {
      prefix = a.slice("--prefix=".length);
    } else {
      throw new TypeError(`unknown argument: "${a}"`);
    }
  }
  return { prefix, help: false };
}

if (import.meta.main) {
  let parsed: { prefix: string; help: boolean };
  try {
    parsed = parseInstallArgs(Deno.args);
  } catch (e) {
    console.error(`${(e as Error).message}\n\n${USAGE}`);
    Deno.exit(2);
  }
  if (parsed.help) {
    console.log(USAGE);
    Deno.exit(0);
  }
  const paths = await installShims({ prefix: parsed.prefix });
  for (const p of paths) {
    const entry = (await Deno.readTextFile(p)).match(/'([^']+\.ts)' "\$@"/)?.[1];
    const missing = entry && !(await Deno.stat(entry).then(() => true, () => false));
    console.log(`installed ${p}${missing ? ` (warning: ${entry} does not exist yet)` : ""}`);
  }
  console.log(
    `containerd finds them on its PATH; runtime names: io.containerd.skiff-runc.v2, ` +
      `io.containerd.skiff-runsc.v2, io.containerd.skiff-crun.v2`,
  );
}
