#!/usr/bin/env bash
# Builds tests/fixtures/go-client (a test helper: containerd's own Go client driving a pod
# through the `shim` sandboxer) against each named containerd release's Go module, into
# $SKIFF_CACHE/go-client-v<version>/skiff-go-client. A build whose sources have not changed
# since (same hash of the fixture's files) is kept.
#
# Each version is built in a temp copy whose go.mod requires only that release, resolved by
# `go mod tidy`: the client code and its dependencies are the release's own, not those the
# fixture's go.mod pins for editors (2.4.2). Shares Go's module and build caches with
# build_containerd.sh.
#
# usage: build_go_client.sh VERSION [VERSION...]   (prints "<version> <binary>" per version)
# env:   SKIFF_CACHE (default ~/.cache/skiff)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src="$here/../fixtures/go-client"
cache="${SKIFF_CACHE:-${HOME:-$(echo ~)}/.cache/skiff}"
# The machines' Go lives in /usr/local/go; a login shell's PATH may not name it.
command -v go >/dev/null || { [ -x /usr/local/go/bin/go ] && export PATH="$PATH:/usr/local/go/bin"; }
hash=$(sha256sum <"$src/main.go" | cut -c1-16)
for version in "$@"; do
  out="$cache/go-client-v$version"
  if [ -x "$out/skiff-go-client" ] && [ "$(cat "$out/SOURCE" 2>/dev/null)" = "$hash" ]; then
    echo "$version $out/skiff-go-client"
    continue
  fi
  command -v go >/dev/null || { echo "build_go_client: go not found on PATH" >&2; exit 2; }
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  cp "$src/main.go" "$tmp/"
  printf 'module skiff.test/go-client\n\ngo 1.26\n\nrequire github.com/containerd/containerd/v2 v%s\n' \
    "$version" >"$tmp/go.mod"
  (cd "$tmp" && export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0 &&
    go mod tidy >&2 && go build -trimpath -o "$tmp/skiff-go-client" . >&2)
  rm -rf "$out.tmp" && mkdir -p "$out.tmp"
  mv "$tmp/skiff-go-client" "$tmp/go.mod" "$tmp/go.sum" "$out.tmp/"
  echo "$hash" >"$out.tmp/SOURCE"
  rm -rf "$out" && mv "$out.tmp" "$out"
  rm -rf "$tmp"
  trap - EXIT
  echo "$version $out/skiff-go-client"
done
