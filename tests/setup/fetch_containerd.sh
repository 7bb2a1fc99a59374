#!/usr/bin/env bash
# Fetches Debian's containerd packages for other suites (trixie → 1.7.x, sid → 2.1.x)
# into a private cache and unpacks them with dpkg -x; nothing is installed system-wide.
# The apt sources are derived from this machine's own debian.sources: only the suite changes.
#
# usage: fetch_containerd.sh SUITE [SUITE...]     (prints "<suite> <prefix>" per suite)
# env:   SKIFF_CACHE (default ~/.cache/skiff)
set -euo pipefail
cache="${SKIFF_CACHE:-${HOME:-$(echo ~)}/.cache/skiff}"
src=/etc/apt/sources.list.d/debian.sources
[ -r "$src" ] || { echo "fetch_containerd: $src not found; cannot derive apt sources" >&2; exit 2; }
for suite in "$@"; do
  prefix="$cache/containerd-$suite"
  if [ -x "$prefix/usr/bin/containerd" ]; then echo "$suite $prefix"; continue; fi
  work=$(mktemp -d)
  mkdir -p "$work/parts" "$work/lists/partial" "$work/cache/archives/partial"
  # Keep only the first stanza (the main archive) and swap its suites for ours.
  awk -v s="$suite" 'BEGIN{RS="";ORS="\n\n"} NR==1{ gsub(/Suites:[^\n]*/, "Suites: " s); print }' "$src" > "$work/parts/debian.sources"
  opts=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$work/parts"
        -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o "APT::Get::List-Cleanup=0"
        -o "Debug::NoLocking=1" -o "APT::Sandbox::User=root")
  apt-get "${opts[@]}" -qq update >&2
  (cd "$work" && apt-get "${opts[@]}" -qq download containerd >&2)
  deb=$(ls "$work"/containerd_*.deb)
  rm -rf "$prefix.tmp" && mkdir -p "$prefix.tmp"
  dpkg -x "$deb" "$prefix.tmp"
  basename "$deb" > "$prefix.tmp/PACKAGE"
  rm -rf "$prefix" && mv "$prefix.tmp" "$prefix"
  rm -rf "$work"
  echo "$suite $prefix"
done
