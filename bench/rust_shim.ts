/**
 * The Rust peer of the benchmarks: rust-extensions' runc shim (crates.io `containerd-runc-shim`),
 * built by tests/setup/rust_shim.sh into the skiff cache. The benchmarks add its column when the
 * binary is there and say how to build it when it is not.
 *
 * @module
 */
import { skiffCacheDir } from "../sdk/testing/containerd.ts";

/** Its runtime type: containerd runs `containerd-shim-runc-v2-rs` for it. */
export const RUST_RUNTIME = "io.containerd.runc.v2-rs";

/** What the benchmarks print instead of the column when the binary is missing. */
export const RUST_MISSING =
  "Rust runc shim not built (bash tests/setup/rust_shim.sh): its column is left out";

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
