#!/usr/bin/env bash
# Builds containerd's own integration suite for each given containerd version: the test binary
# of package github.com/containerd/containerd/v2/integration/client (`go test -c`) and the
# failpoint runc it drives (integration/failpoint/cmd/runc-fp), both from the Go module of that
# containerd release. Output: $SKIFF_CACHE/containerd-suite-v<version>/{client.test,runc-fp}.
#
# The module in tests/external/containerd-suite is copied to a temp dir and its containerd
# requirement pinned to the version (go mod tidy then takes containerd's own dependency
# versions), so each build sees exactly that release's go.mod. Cached: a version whose two
# binaries are there is skipped.
#
# usage: build_containerd_suite.sh VERSION [VERSION...]  (prints "<version> <dir>" per version)
# env:   SKIFF_CACHE (default ~/.cache/skiff)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src="$here/../external/containerd-suite"
cache="${SKIFF_CACHE:-${HOME:-$(echo ~)}/.cache/skiff}"
command -v go >/dev/null || { [ -x /usr/local/go/bin/go ] && export PATH="$PATH:/usr/local/go/bin"; }
command -v go >/dev/null || { echo "build_containerd_suite: go not found on PATH" >&2; exit 2; }
module=github.com/containerd/containerd/v2
for version in "$@"; do
  out="$cache/containerd-suite-v$version"
  if [ -x "$out/client.test" ] && [ -x "$out/runc-fp" ]; then
    echo "$version $out"
    continue
  fi
  work=$(mktemp -d)
  cp "$src/go.mod" "$src/suite.go" "$work/"
  rm -rf "$out.tmp" && mkdir -p "$out.tmp"
  (
    cd "$work"
    export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0
    go mod edit -require="$module@v$version"
    go mod tidy >&2
    go test -c -trimpath -tags no_btrfs -o "$out.tmp/client.test" "$module/integration/client" >&2
    go build -trimpath -o "$out.tmp/runc-fp" "$module/integration/failpoint/cmd/runc-fp" >&2
  ) || { rm -rf "$work" "$out.tmp"; echo "build_containerd_suite: $version failed" >&2; exit 1; }
  rm -rf "$work"
  echo "v$version" >"$out.tmp/VERSION"
  rm -rf "$out" && mv "$out.tmp" "$out"
  echo "$version $out"
done
