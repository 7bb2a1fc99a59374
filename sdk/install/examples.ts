/**
 * skiff's own example shims, installed from this checkout: what `deno task install`, the demo,
 * the benchmarks and the repository's tests install. Not part of the published installer
 * (`@skiff/shim/install`), which installs a runtime author's shims from their own project.
 *
 * @module
 */

import { installShims, type InstallShimsOptions } from "./install.ts";

/**
 * The example shims: launcher name → entry point relative to the checkout root.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { EXAMPLE_SHIMS } from "./examples.ts";
 * strictEqual(EXAMPLE_SHIMS["containerd-shim-skiff-crun-v2"], "examples/crun/main.ts");
 * ```
 */
export const EXAMPLE_SHIMS: Readonly<Record<string, string>> = {
  "containerd-shim-skiff-runc-v2": "examples/runc/main.ts",
  "containerd-shim-skiff-runsc-v2": "examples/runsc/main.ts",
  "containerd-shim-skiff-crun-v2": "examples/crun/main.ts",
  "containerd-shim-skiff-vm-v2": "examples/vm/main.ts",
};

/**
 * The root of the checkout this module lives in (two levels above `sdk/install`).
 *
 * @returns an absolute path
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { checkoutRoot } from "./examples.ts";
 * strictEqual(Deno.statSync(`${checkoutRoot()}/sdk/install/install.ts`).isFile, true);
 * ```
 */
export function checkoutRoot(): string {
  const url = new URL("../../", import.meta.url);
  if (url.protocol !== "file:") {
    throw new Error(
      `skiff's examples install from a checkout, and this module runs from ${url.href}: ` +
        `install your own shims with installShims({ root, shims }) from @skiff/shim/install`,
    );
  }
  return decodeURIComponent(url.pathname).replace(/\/$/, "");
}

/** {@linkcode installExampleShims}'s options: {@linkcode installShims}'s, with both defaults. */
export type ExampleInstallOptions = Omit<InstallShimsOptions, "shims"> & {
  /** Launchers to write (name → entry relative to `root`). Default {@linkcode EXAMPLE_SHIMS}. */
  shims?: Record<string, string>;
};

/**
 * {@linkcode installShims} with this checkout as `root` and the examples as `shims`, unless
 * given.
 *
 * @param opts where to install, and any of {@linkcode installShims}'s options
 * @returns the absolute paths of the launchers written
 *
 * @example Usage
 * ```ts
 * import { deepStrictEqual } from "node:assert/strict";
 * import { installExampleShims } from "./examples.ts";
 * const prefix = await Deno.realPath(await Deno.makeTempDir());
 * const paths = await installExampleShims({ prefix, mode: "source" });
 * deepStrictEqual(paths, [
 *   `${prefix}/bin/containerd-shim-skiff-runc-v2`,
 *   `${prefix}/bin/containerd-shim-skiff-runsc-v2`,
 *   `${prefix}/bin/containerd-shim-skiff-crun-v2`,
 *   `${prefix}/bin/containerd-shim-skiff-vm-v2`,
 * ]);
 * await Deno.remove(prefix, { recursive: true });
 * ```
 */
export function installExampleShims(opts: ExampleInstallOptions): Promise<string[]> {
  return installShims({ root: checkoutRoot(), ...opts, shims: opts.shims ?? EXAMPLE_SHIMS });
}

/**
 * `deno task install [options]`: the published installer's command line applied to the examples,
 * then the VM example's boot image (kernel, initramfs and the agent's bundle, which an installed
 * bundle cannot build: it has no agent sources), so every installed example runs.
 */
async function main(): Promise<number> {
  const { runInstallCli } = await import("./cli.ts");
  const pairs = Object.entries(EXAMPLE_SHIMS).map(([name, entry]) => `${name}=${entry}`);
  const args = Deno.args.includes("--root") ? Deno.args : [...Deno.args, "--root", checkoutRoot()];
  const code = await runInstallCli([...args, ...pairs]);
  if (code !== 0 || Deno.args.includes("--help") || Deno.args.includes("-h")) return code;
  // A child process: sdk/ imports nothing from examples/.
  const image = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", `${checkoutRoot()}/examples/vm/image.ts`],
    stdout: "null",
    stderr: "piped",
  }).output();
  if (image.success) console.log("built the VM example's boot image (examples/vm/image.ts)");
  else {
    console.log(
      `note: containerd-shim-skiff-vm-v2 cannot boot a VM until its image is built ` +
        `(deno task vm-image): ${new TextDecoder().decode(image.stderr).trim()}`,
    );
  }
  return 0;
}

if (import.meta.main) Deno.exit(await main());
