#!/usr/bin/env bash
# Builds Kubernetes' CRI validation suite, critest (sigs.k8s.io/cri-tools), from its Go module
# into a private cache: $SKIFF_CACHE/critest-v<version>/critest, and the same module's crictl
# beside it (kubectl's `exec -i` path through CRI's streaming server, for
# tests/integration/exec_stdin_cri_test.ts). Nothing is installed system-wide. critest is a compiled Go test binary (cri-tools builds it with `go test -c`), so
# `go install` cannot build it: the module is downloaded into Go's module cache and its
# cmd/critest package compiled there, with the module's own go.mod and go.sum. Cached: a version
# whose binary is there is skipped.
#
# usage: critest.sh [VERSION]   (default 1.37.0; prints the binary's path)
# env:   SKIFF_CACHE (default ~/.cache/skiff)
set -euo pipefail
version=${1:-1.37.0}
cache="${SKIFF_CACHE:-${HOME:-$(echo ~)}/.cache/skiff}"
out="$cache/critest-v$version/critest"
crictl="$(dirname "$out")/crictl"
if [ -x "$out" ] && [ -x "$crictl" ]; then
  echo "$out"
  exit 0
fi
command -v go >/dev/null || { [ -x /usr/local/go/bin/go ] && export PATH="$PATH:/usr/local/go/bin"; }
command -v go >/dev/null || { echo "critest.sh: go not found on PATH" >&2; exit 2; }
module=sigs.k8s.io/cri-tools
# `go mod download -json` prints the module's source dir in the module cache.
src=$(cd / && GOFLAGS=-mod=mod go mod download -json "$module@v$version" |
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$src/cmd/critest" ] || { echo "critest.sh: no cmd/critest in \"$src\"" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
if [ ! -x "$out" ]; then
  (cd "$src" && CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=mod \
    go test -c -trimpath -o "$out.tmp" ./cmd/critest >&2)
  mv "$out.tmp" "$out"
fi
if [ ! -x "$crictl" ]; then
  (cd "$src" && CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=mod \
    go build -trimpath -o "$crictl.tmp" ./cmd/crictl >&2)
  mv "$crictl.tmp" "$crictl"
fi
echo "$out"
