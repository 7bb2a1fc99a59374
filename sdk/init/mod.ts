/**
 * Starts a runtime project: a shim, its deno.json (install, test and conformance tasks), a test
 * on skiff's testing kit and a conformance script, in a new directory.
 *
 * ```sh
 * deno run -A jsr:@skiff/shim/init my-runtime            # a shim for a runc-compatible CLI
 * deno run -A jsr:@skiff/shim/init --kind custom my-vm   # a shim with a runtime of its own
 * cd my-runtime && deno task test
 * ```
 *
 * The runtime's name is the directory's: `my-runtime` serves `io.containerd.my-runtime.v1` as
 * `containerd-shim-my-runtime-v1`.
 *
 * @example Usage
 * ```ts
 * import { ok } from "node:assert/strict";
 * import { initProject } from "@skiff/shim/init";
 * const dir = `${await Deno.makeTempDir()}/mine`;
 * const written = await initProject({ dir, kind: "oci", skiff: { jsr: "jsr:@skiff/shim@^0.1.0" } });
 * ok(written.includes(`${dir}/main.ts`));
 * await Deno.remove(dir, { recursive: true });
 * ```
 *
 * @module
 */

import { parseArgs } from "node:util";
import { projectFiles, type SkiffSource } from "./template.ts";

export { projectFiles, type SkiffSource, type TemplateOptions } from "./template.ts";

/** What {@linkcode initProject} writes. */
export interface InitOptions {
  /** The new project's directory (created; it must not exist, or be empty). */
  dir: string;
  /** `oci` (default): `OciShim` for a runc-compatible CLI; `custom`: `Shim` with its own runtime. */
  kind?: "oci" | "custom";
  /** Where the project gets skiff from. Default: this package ({@linkcode defaultSkiffSource}). */
  skiff?: SkiffSource;
}

/**
 * Where a project written by this module gets skiff from: `jsr:@skiff/shim@^<version>` when the
 * module runs from JSR, this package's directory when it runs from a local copy.
 *
 * @example Usage
 * ```ts
 * import { ok } from "node:assert/strict";
 * import { defaultSkiffSource } from "@skiff/shim/init";
 * const s = await defaultSkiffSource();
 * ok("jsr" in s || s.exports["."] === "./mod.ts");
 * ```
 */
export async function defaultSkiffSource(): Promise<SkiffSource> {
  const url = new URL("../../", import.meta.url);
  if (url.protocol !== "file:") {
    const version = /\/@skiff\/shim\/([^/]+)\//.exec(import.meta.url)?.[1];
    return { jsr: version ? `jsr:@skiff/shim@^${version}` : "jsr:@skiff/shim" };
  }
  return await localSkiff(decodeURIComponent(url.pathname).replace(/\/$/, ""));
}

/** The package at `dir`: its declared exports, read from its deno.json. */
async function localSkiff(dir: string): Promise<SkiffSource> {
  const config = JSON.parse(await Deno.readTextFile(`${dir}/deno.json`)) as {
    name?: string;
    exports?: Record<string, string>;
  };
  if (config.name !== "@skiff/shim" || !config.exports) {
    throw new TypeError(`${dir}/deno.json is not @skiff/shim's (no name and exports)`);
  }
  return { dir, exports: config.exports };
}

/**
 * Writes a new runtime project into `o.dir`. Refuses a name containerd cannot run and a directory
 * that holds anything.
 *
 * @param o the directory, the kind of shim, where skiff comes from
 * @returns the paths written
 */
export async function initProject(o: InitOptions): Promise<string[]> {
  const dir = o.dir.replace(/\/+$/, "");
  const name = dir.slice(dir.lastIndexOf("/") + 1);
  if (!/^[a-z0-9][a-z0-9-]*$/.test(name)) {
    throw new TypeError(
      `"${name}": a runtime's name is lower-case letters, digits and dashes ` +
        `(containerd runs io.containerd.<name>.v1 as containerd-shim-<name>-v1)`,
    );
  }
  const entries = await Array.fromAsync(Deno.readDir(dir)).catch((e) => {
    if (e instanceof Deno.errors.NotFound) return [];
    throw e;
  });
  if (entries.length > 0) throw new TypeError(`${dir} is not empty: nothing written`);
  const files = projectFiles({
    name,
    kind: o.kind ?? "oci",
    skiff: o.skiff ?? await defaultSkiffSource(),
  });
  await Deno.mkdir(dir, { recursive: true });
  const written: string[] = [];
  for (const [file, text] of Object.entries(files)) {
    await Deno.writeTextFile(`${dir}/${file}`, text);
    written.push(`${dir}/${file}`);
  }
  return written;
}

/** `--help`'s text. */
export const INIT_USAGE = `usage: init [--kind oci|custom] [--from DIR|jsr:SPEC] DIRECTORY

Writes a new runtime project into DIRECTORY, whose name is the runtime's:
io.containerd.<name>.v1, run by containerd as containerd-shim-<name>-v1.
  --kind oci      a shim for a runc-compatible runtime CLI, on OciShim (default)
  --kind custom   a shim with a runtime of its own, on Shim
  --from          where the project gets skiff: a JSR specifier, or a directory holding the package
`;

/**
 * The command line: writes the project and prints what to run next. Returns the exit code.
 *
 * @param args the arguments, e.g. `Deno.args`
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { runInitCli } from "@skiff/shim/init";
 * strictEqual(await runInitCli([]), 2); // no directory: the usage on stderr
 * ```
 */
export async function runInitCli(args: string[]): Promise<number> {
  let values: { kind?: string; from?: string; help?: boolean };
  let positionals: string[];
  try {
    ({ values, positionals } = parseArgs({
      args,
      allowPositionals: true,
      options: {
        kind: { type: "string" },
        from: { type: "string" },
        help: { type: "boolean", short: "h" },
      },
    }));
    if (values.help) {
      console.log(INIT_USAGE);
      return 0;
    }
    if (positionals.length !== 1) throw new TypeError("name one directory");
    if (values.kind !== undefined && values.kind !== "oci" && values.kind !== "custom") {
      throw new TypeError(`--kind "${values.kind}": expected oci or custom`);
    }
  } catch (e) {
    console.error(`init: ${(e as Error).message}\n\n${INIT_USAGE}`);
    return 2;
  }
  try {
    const from = values.from;
    const skiff = from === undefined
      ? undefined
      : from.startsWith("jsr:")
      ? { jsr: from }
      : await localSkiff(await Deno.realPath(from));
    const dir = positionals[0]!;
    await initProject({ dir, kind: values.kind as "oci" | "custom" | undefined, skiff });
    const name = dir.replace(/\/+$/, "").split("/").at(-1);
    console.log(
      `wrote ${dir}: the shim for io.containerd.${name}.v1 (main.ts), its test and tasks\n` +
        `next: cd ${dir} && deno task test && deno task install --prefix /usr/local`,
    );
    return 0;
  } catch (e) {
    console.error(`init: ${(e as Error).message}`);
    return 1;
  }
}

if (import.meta.main) Deno.exit(await runInitCli(Deno.args));
