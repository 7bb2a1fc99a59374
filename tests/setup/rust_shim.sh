#!/usr/bin/env bash
# Builds rust-extensions' runc shim, the Rust crate containerd-runc-shim (from
# Cargo's default registry), into a private
# cache: $SKIFF_CACHE/rust-shim/bin/containerd-shim-runc-v2-rs (runtime type
# io.containerd.runc.v2-rs by containerd's naming rule). It is a peer for `deno task bench` and
# a row of docs/conformance.md; nothing is installed system-wide.
#
# --locked builds with the crate's own Cargo.lock, so every machine compiles the same
# dependency versions. The first build takes minutes (about 9 on two busy cores); a binary that
# is there is kept.
#
# usage: rust_shim.sh   (prints the bin dir)
# env:   SKIFF_CACHE (default ~/.cache/skiff)
set -euo pipefail
cache="${SKIFF_CACHE:-${HOME:-$(echo ~)}/.cache/skiff}"
crate=containerd-runc-shim
version=0.2.0
prefix="$cache/rust-shim"
bin="$prefix/bin/containerd-shim-runc-v2-rs"
built() { [ -x "$bin" ] && [ "$(cat "$prefix/VERSION" 2>/dev/null)" = "$crate $version" ]; }
if built; then
  echo "$prefix/bin"
  exit 0
fi
# Two preparing runs at once (two `deno task test`s) must not build into the same directory:
# the second waits for the first, then finds the binary.
mkdir -p "$cache"
exec 9>"$prefix.lock"
flock 9
if built; then
  echo "$prefix/bin"
  exit 0
fi
command -v cargo >/dev/null || { echo "rust_shim: cargo not found on PATH" >&2; exit 2; }
echo "rust_shim: building $crate $version with cargo install into $prefix (minutes on a fresh machine)" >&2
rm -rf "$prefix.tmp" && mkdir -p "$prefix.tmp"
cargo install --quiet --locked --root "$prefix.tmp" "$crate" --version "$version" >&2
rm -f "$prefix.tmp/.crates.toml" "$prefix.tmp/.crates2.json"
echo "$crate $version" >"$prefix.tmp/VERSION"
rm -rf "$prefix" && mv "$prefix.tmp" "$prefix"
echo "$prefix/bin"
