#!/usr/bin/env bash
# Unpacks Debian's docker-registry (the CNCF distribution registry, this machine's own suite)
# into a private cache with apt-get download + dpkg -x; nothing is installed system-wide and no
# service is started. sdk/testing/registry.ts runs the binary on 127.0.0.1 for tests.
#
# usage: registry.sh        (prints the binary's path)
# env:   SKIFF_CACHE (default ~/.cache/skiff)
set -euo pipefail
cache="${SKIFF_CACHE:-${HOME:-$(echo ~)}/.cache/skiff}"
prefix="$cache/docker-registry"
bin="$prefix/usr/bin/docker-registry"
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# apt's lists may be missing on a fresh machine: update once, then try again.
if ! (cd "$work" && apt-get -qq download docker-registry >&2 2>/dev/null); then
  apt-get -qq update >&2
  (cd "$work" && apt-get -qq download docker-registry >&2)
fi
deb=$(ls "$work"/docker-registry_*.deb)
rm -rf "$prefix.tmp" && mkdir -p "$prefix.tmp"
dpkg -x "$deb" "$prefix.tmp"
basename "$deb" >"$prefix.tmp/PACKAGE"
rm -rf "$prefix" && mv "$prefix.tmp" "$prefix"
echo "$bin"
