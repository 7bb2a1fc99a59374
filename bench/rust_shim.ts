/**
 * The Rust peer of the benchmarks: rust-extensions' runc shim (the Rust crate
 * `containerd-runc-shim`), built by tests/setup/rust_shim.sh into the skiff cache: by the
 * benchmark itself when it is missing (minutes, once; no test needs it, so prepare.sh does not).
 *
 * @module
 */
import { skiffCacheDir } from "../sdk/testing/containerd.ts";
import { checkoutRoot } from "../sdk/install/examples.ts";

/** Its runtime type: containerd runs `containerd-shim-runc-v2-rs` for it. */
export const RUST_RUNTIME = "io.containerd.runc.v2-rs";

/** What the benchmarks print instead of the column when the binary is missing. */
export const RUST_MISSING =
  "Rust runc shim not built (tests/setup/rust_shim.sh failed; see above): its column is left out";

/**
 * The Rust runc shim binary, when tests/setup/rust_shim.sh has built it.
 *
 * @returns its path, or undefined
 *
 * @example Usage
 * ```ts
 * import { rustShim } from "./rust_shim.ts";
 * const bin = rustShim();
 * console.assert(bin === undefined || bin.endsWith("/containerd-shim-runc-v2-rs"));
 * ```
 */
export function rustShim(): string | undefined {
  const bin = `${skiffCacheDir()}/rust-shim/bin/containerd-shim-runc-v2-rs`;
  try {
    return (Deno.statSync(bin).mode! & 0o111) ? bin : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The Rust runc shim binary, built first (tests/setup/rust_shim.sh, its progress on stderr) when
 * it is missing.
 *
 * @returns its path, or undefined when it cannot be built here
 *
 * @example Usage
 * ```ts ignore
 * const bin = await ensureRustShim();
 * ```
 */
export async function ensureRustShim(): Promise<string | undefined> {
  const have = rustShim();
  if (have) return have;
  console.error("building the Rust runc shim for its benchmark column (minutes, once)");
  const out = await new Deno.Command("bash", {
    args: [`${checkoutRoot()}/tests/setup/rust_shim.sh`],
    stdin: "null",
    stdout: "null",
    stderr: "inherit",
  }).output();
  if (!out.success) console.error(`tests/setup/rust_shim.sh exited with ${out.code}`);
  return rustShim();
}
