/**
 * Installs a runtime author's shims for containerd: each as a small `#!/bin/sh` launcher in
 * `<prefix>/bin`, named as containerd looks for it (`containerd-shim-<name>-<version>` for the
 * runtime `io.containerd.<name>.<version>`), running a bundle of the shim made at install time,
 * so nothing at run time needs the project or deno's cache.
 *
 * As a command, from the project that holds the shim's `deno.json` and main module:
 *
 * ```sh
 * deno run -A jsr:@skiff/shim/install --prefix /usr/local containerd-shim-mine-v1=main.ts
 * ```
 *
 * `--help` lists the options (`--root`, `--source`, `--no-spare`). From code, {@linkcode
 * installShims} does the same, e.g. in a test that installs the shim under a temporary prefix and
 * starts a private containerd with that prefix's `bin` on its PATH (`@skiff/shim/testing`).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { installShims } from "@skiff/shim/install";
 *
 * const root = await Deno.realPath(await Deno.makeTempDir());
 * await Deno.writeTextFile(`${root}/deno.json`, "{}");
 * await Deno.writeTextFile(`${root}/main.ts`, "// await runShim(new MyShim());\n");
 * const [launcher] = await installShims({
 *   prefix: `${root}/usr`,
 *   root,
 *   shims: { "containerd-shim-mine-v1": "main.ts" },
 *   mode: "source",
 * });
 * strictEqual(launcher, `${root}/usr/bin/containerd-shim-mine-v1`);
 * await Deno.remove(root, { recursive: true });
 * ```
 *
 * @module
 */

export {
  DEFAULT_SHIM_V8_FLAGS,
  type InstallMode,
  installShims,
  type InstallShimsOptions,
  SHIM_MALLOC_ARENA_MAX,
} from "./install.ts";
export { INSTALL_USAGE, type InstallCommand, parseInstallArgs, runInstallCli } from "./cli.ts";

if (import.meta.main) {
  const { runInstallCli } = await import("./cli.ts");
  Deno.exit(await runInstallCli(Deno.args));
}
