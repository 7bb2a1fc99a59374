#!/usr/bin/env bash
# Fetches Debian trixie's crun (1.21) into a private prefix for the cgroup v2 test guest:
# bookworm's crun 1.8.1 refuses the specs containerd 2.x generates ("unknown version
# specified"). trixie's crun needs glibc 2.38 (bookworm has 2.36), so trixie's libc6 comes too,
# and the crun binary is pointed at it with patchelf (its ELF interpreter and an RPATH into the
# prefix): crun re-executes /proc/self/exe, so a wrapper running it through another ld.so would
# not survive. Its other libraries (libseccomp, libcap, libyajl, libsystemd) are bookworm's own,
# new enough for it. Nothing is installed system-wide; the apt sources are derived from this
# machine's debian.sources as fetch_containerd.sh does (only the suite changes).
#
# usage: fetch_crun.sh          (prints the crun path: $SKIFF_CACHE/crun-trixie/bin/crun)
# env:   SKIFF_CACHE (default ~/.cache/skiff)
set -euo pipefail
cache="${SKIFF_CACHE:-${HOME:-$(echo ~)}/.cache/skiff}"
prefix="$cache/crun-trixie"
if [ -x "$prefix/bin/crun" ] && "$prefix/bin/crun" --version >/dev/null 2>&1; then
  echo "$prefix/bin/crun"; exit 0
fi
src=/etc/apt/sources.list.d/debian.sources
[ -r "$src" ] || { echo "fetch_crun: $src not found; cannot derive apt sources" >&2; exit 2; }
command -v patchelf >/dev/null || { echo "fetch_crun: patchelf missing (apt-get install patchelf)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/parts" "$work/lists/partial" "$work/cache/archives/partial"
awk 'BEGIN{RS="";ORS="\n\n"} NR==1{ gsub(/Suites:[^\n]*/, "Suites: trixie"); print }' "$src" > "$work/parts/debian.sources"
opts=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$work/parts"
      -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o "APT::Get::List-Cleanup=0"
      -o "Debug::NoLocking=1" -o "APT::Sandbox::User=root")
apt-get "${opts[@]}" -qq update >&2
(cd "$work" && apt-get "${opts[@]}" -qq download crun libc6 >&2)
rm -rf "$prefix.tmp" && mkdir -p "$prefix.tmp/bin"
for deb in "$work"/crun_*.deb "$work"/libc6_*.deb; do
  dpkg -x "$deb" "$prefix.tmp"
  basename "$deb" >> "$prefix.tmp/PACKAGES"
done
# The paths patchelf writes are the final ones (the prefix is renamed into place below).
lib="$prefix/usr/lib/x86_64-linux-gnu"
cp "$prefix.tmp/usr/bin/crun" "$prefix.tmp/bin/crun"
patchelf --set-interpreter "$lib/ld-linux-x86-64.so.2" --force-rpath --set-rpath "$lib" \
  "$prefix.tmp/bin/crun"
rm -rf "$prefix" && mv "$prefix.tmp" "$prefix"
"$prefix/bin/crun" --version >/dev/null || { echo "fetch_crun: $prefix/bin/crun does not run" >&2; exit 1; }
echo "$prefix/bin/crun"
