/**
 * The installer's command line: `deno run -A jsr:@skiff/shim/install [options] NAME=ENTRY...`
 * installs a runtime author's shims (here, `deno task install` installs skiff's examples).
 *
 * @module
 */

import { parseArgs } from "node:util";
import { installShims, type InstallShimsOptions } from "./install.ts";

/** What the installer prints for `--help` and after a usage error. */
export const INSTALL_USAGE = `usage: install [options] NAME=ENTRY...

Installs each shim as a launcher DIR/bin/NAME that containerd runs, bundled (deno bundle) into
DIR/lib/skiff/NAME/<hash>/ unless --source is given.
  NAME    the binary containerd looks for: containerd-shim-<name>-<version> serves the
          runtime io.containerd.<name>.<version> (e.g. containerd-shim-mine-v1)
  ENTRY   the shim's main module (the one that calls runShim), relative to --root

options:
  --prefix DIR   install under DIR (launchers in DIR/bin); default /usr/local
  --root DIR     the project holding deno.json (its import map); default: the current directory
  --source       launchers that run the sources through deno's cache instead of a bundle
  --no-spare     launchers that never keep a warm spare server
  --shared N     shared servers: up to N pods (2 or more) per shim server process; install
                 these launchers under their own names or --prefix, for one runtime handler
  -h, --help     this text
`;

/** A parsed command line: the options for {@linkcode installShims}, or a request for help. */
export type InstallCommand = { help: true } | { help: false; options: InstallShimsOptions };

/**
 * Parses the installer's command line. Throws a TypeError naming the argument at fault.
 *
 * @param args the arguments, e.g. `Deno.args`
 * @example Usage
 * ```ts
 * import { deepStrictEqual } from "node:assert/strict";
 * import { parseInstallArgs } from "@skiff/shim/install";
 * const cmd = parseInstallArgs(["--prefix", "/opt", "containerd-shim-mine-v1=main.ts"]);
 * deepStrictEqual(cmd, {
 *   help: false,
 *   options: { prefix: "/opt", shims: { "containerd-shim-mine-v1": "main.ts" } },
 * });
 * ```
 */
export function parseInstallArgs(args: string[]): InstallCommand {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    strict: true,
    options: {
      prefix: { type: "string", default: "/usr/local" },
      root: { type: "string" },
      source: { type: "boolean", default: false },
      "no-spare": { type: "boolean", default: false },
      shared: { type: "string" },
      help: { type: "boolean", short: "h", default: false },
    },
  });
  if (values.help) return { help: true };
  if (!values.prefix) throw new TypeError("--prefix needs a directory");
  if (positionals.length === 0) throw new TypeError("name at least one shim: NAME=ENTRY");
  const shared = values.shared === undefined ? undefined : Number(values.shared);
  if (shared !== undefined && !(/^\d+$/.test(values.shared!) && shared >= 2)) {
    throw new TypeError(`--shared "${values.shared}": expected a whole number of pods, 2 or more`);
  }
  const shims: Record<string, string> = {};
  for (const p of positionals) {
    const eq = p.indexOf("=");
    const name = eq < 0 ? "" : p.slice(0, eq);
    const entry = eq < 0 ? "" : p.slice(eq + 1);
    if (!name || !entry) throw new TypeError(`"${p}": expected NAME=ENTRY`);
    if (!/^containerd-shim-[A-Za-z0-9_.-]+-v[0-9]+$/.test(name)) {
      throw new TypeError(
        `"${name}": containerd runs runtime io.containerd.<name>.<version> as ` +
          `containerd-shim-<name>-<version> (e.g. containerd-shim-mine-v1)`,
      );
    }
    if (name in shims) throw new TypeError(`"${name}" is named twice`);
    shims[name] = entry;
  }
  return {
    help: false,
    options: {
      prefix: values.prefix,
      shims,
      ...(values.root ? { root: values.root } : {}),
      ...(values.source ? { mode: "source" as const } : {}),
      ...(values["no-spare"] ? { spare: false } : {}),
      ...(shared !== undefined ? { sharedPods: shared } : {}),
    },
  };
}

/**
 * Runs the installer: parses `args`, checks every entry exists, installs, and prints a line per
 * launcher with the runtime name containerd's configuration uses. Returns the exit code.
 *
 * @param args the arguments, e.g. `Deno.args`
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { runInstallCli } from "@skiff/shim/install";
 * strictEqual(await runInstallCli(["--bogus"]), 2); // and the usage on stderr
 * ```
 */
export async function runInstallCli(args: string[]): Promise<number> {
  let cmd: InstallCommand;
  try {
    cmd = parseInstallArgs(args);
  } catch (e) {
    console.error(`install: ${(e as Error).message}\n\n${INSTALL_USAGE}`);
    return 2;
  }
  if (cmd.help) {
    console.log(INSTALL_USAGE);
    return 0;
  }
  const root = cmd.options.root ?? Deno.cwd();
  for (const [name, entry] of Object.entries(cmd.options.shims)) {
    const path = entry.startsWith("/") ? entry : `${root}/${entry}`;
    if (!(await Deno.stat(path).then((s) => s.isFile, () => false))) {
      console.error(`install: ${name}: its entry ${path} is not a file`);
      return 2;
    }
  }
  let paths: string[];
  try {
    paths = await installShims(cmd.options);
  } catch (e) {
    console.error(`install: ${(e as Error).message}`);
    return 1;
  }
  for (const p of paths) {
    const name = p.slice(p.lastIndexOf("/") + 1);
    const runtime = name.replace(/^containerd-shim-(.+)-(v[0-9]+)$/, "io.containerd.$1.$2");
    console.log(`installed ${p} (runtime ${runtime})`);
  }
  return 0;
}
