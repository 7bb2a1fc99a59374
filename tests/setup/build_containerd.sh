#!/usr/bin/env bash
# Builds containerd releases that Debian does not package (2.2, 2.3, 2.4) from their Go modules
# into a private cache: `containerd`, `ctr` and `containerd-shim-runc-v2` of each version land in
# $SKIFF_CACHE/containerd-v<version>/bin. Nothing is installed system-wide.
#
# One `go install` per version (a go install of several packages must name one version), all
# sharing Go's module and build caches, so the second and third versions reuse most of the
# first's compiled dependencies. A version whose three binaries are there is skipped.
#
# no_btrfs: the btrfs snapshotter needs cgo and btrfs headers, and the tests never use it.
# CGO_ENABLED=0 gives static binaries that also run inside the cgroup v2 test guest.
#
# usage: build_containerd.sh VERSION [VERSION...]   (prints "<version> <bin dir>" per version)
# env:   SKIFF_CACHE (default ~/.cache/skiff)
set -euo pipefail
cache="${SKIFF_CACHE:-${HOME:-$(echo ~)}/.cache/skiff}"
command -v go >/dev/null || { echo "build_containerd: go not found on PATH" >&2; exit 2; }
module=github.com/containerd/containerd/v2
for version in "$@"; do
  prefix="$cache/containerd-v$version"
  if [ -x "$prefix/bin/containerd" ] && [ -x "$prefix/bin/ctr" ] &&
    [ -x "$prefix/bin/containerd-shim-runc-v2" ]; then
    echo "$version $prefix/bin"
    continue
  fi
  rm -rf "$prefix.tmp" && mkdir -p "$prefix.tmp/bin"
  # Outside any module, so `go install pkg@version` resolves the release's own go.mod.
  (cd / && GOBIN="$prefix.tmp/bin" CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local \
    go install -tags no_btrfs -trimpath \
    "$module/cmd/containerd@v$version" "$module/cmd/ctr@v$version" \
    "$module/cmd/containerd-shim-runc-v2@v$version" >&2)
  "$prefix.tmp/bin/containerd" --version >"$prefix.tmp/VERSION"
  rm -rf "$prefix" && mv "$prefix.tmp" "$prefix"
  echo "$version $prefix/bin"
done
