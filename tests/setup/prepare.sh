#!/usr/bin/env bash
# Makes this machine ready for skiff's integration tests; `deno task test` runs it first.
#
#  1. Debian packages: containerd (1.6 on bookworm), runc, runsc, crun, busybox-static,
#     protobuf-compiler, libprotobuf-dev (the well-known google/protobuf/*.proto that
#     proto/gen.sh imports; protobuf-compiler does not ship them), util-linux, bsdutils (script),
#     iproute2, prometheus (promtool, for the docs/operations.md check), criu (runc checkpoint;
#     where criu cannot dump, the test checks the error), containernetworking-plugins (CNI's
#     bridge, host-local, loopback and portmap for critest's pod networks). Installed with apt-get when missing
#     (apt-get update runs only then). A policy-rc.d guard keeps apt from starting the
#     system containerd service: the tests only ever run private containerds.
#  2. containerd 1.7 (trixie) and 2.1 (sid) unpacked into $SKIFF_CACHE by fetch_containerd.sh;
#     containerd 2.2, 2.3 and 2.4 (no Debian package) built from their Go modules by
#     build_containerd.sh (a few minutes each on a fresh machine, cached afterwards).
#  3. $SKIFF_CACHE/env: SKIFF_CONTAINERD_<major>_<minor>=<bin dir> per containerd build
#     (read by containerdVersions() in sdk/testing/containerd.ts).
#  4. deno's dependency cache, filled from deno.lock (`deno install --frozen`).
#  5. `deno bundle`'s esbuild in deno's cache (installShims bundles every shim it installs; deno
#     fetches esbuild on its first bundle): one bundle of an empty module.
#  6. Debian's docker-registry (registry.sh), 7. critest and crictl built from their Go module
#     (critest.sh).
#  Not here: rust-extensions' runc shim (rust_shim.sh, ~9 minutes to build once), which only the
#  benchmarks use: `deno task bench` builds it when it is missing.
#  8. The cgroup v2 test guest (sdk/testing/guest.ts): qemu-system-x86 and kmod from step 1, a
#     Debian kernel (downloaded and unpacked into $SKIFF_CACHE/guest, not installed: this
#     machine's boot is untouched) and a busybox initramfs, by guest.sh (cached afterwards).
#  9. trixie's crun (1.21) with trixie's libc6 in $SKIFF_CACHE/crun-trixie, patched with patchelf
#     from step 1 to use that libc (fetch_crun.sh): the guest's crun for containerd 2.x.
#
# Not root or not Debian: it says exactly what is missing and carries on, so the tests skip
# (or fail, under SKIFF_REQUIRE_INTEGRATION=1). Silent and fast when nothing needs doing.
#
# env: SKIFF_CACHE (default ~/.cache/skiff)
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache="${SKIFF_CACHE:-${HOME:-$(echo ~)}/.cache/skiff}"
export SKIFF_CACHE="$cache"

say() { echo "prepare: $*" >&2; }

is_root=false
[ "$(id -u)" = 0 ] && is_root=true
is_debian=false
[ -r /etc/debian_version ] && command -v apt-get >/dev/null && command -v dpkg-query >/dev/null &&
  is_debian=true

# --- 1. packages -----------------------------------------------------------------------------
packages=(containerd runc runsc crun busybox-static protobuf-compiler libprotobuf-dev util-linux bsdutils
  iproute2 prometheus criu containernetworking-plugins qemu-system-x86 kmod patchelf)
# command → package, for machines where dpkg cannot tell us (and to catch a broken install).
declare -A provides=(
  [containerd]=containerd [ctr]=containerd [containerd-shim-runc-v2]=containerd
  [runc]=runc [runsc]=runsc [crun]=crun [busybox]=busybox-static [protoc]=protobuf-compiler
  [unshare]=util-linux [nsenter]=util-linux [mountpoint]=util-linux [script]=bsdutils
  [ip]=iproute2 [promtool]=prometheus [criu]=criu [qemu-system-x86_64]=qemu-system-x86
  [modprobe]=kmod [depmod]=kmod [patchelf]=patchelf
)
find_cmd() { PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin" command -v "$1" >/dev/null; }

missing_pkgs=()
if $is_debian; then
  installed=$(dpkg-query -W -f='${Package} ${Status}\n' "${packages[@]}" 2>/dev/null |
    awk '$NF == "installed" { print $1 }')
  for p in "${packages[@]}"; do
    grep -qx "$p" <<<"$installed" || missing_pkgs+=("$p")
  done
fi
for cmd in "${!provides[@]}"; do
  if ! find_cmd "$cmd"; then
    p=${provides[$cmd]}
    [[ " ${missing_pkgs[*]} " == *" $p "* ]] || missing_pkgs+=("$p")
  fi
done
# file → package, for what is not a command: protoc finds these through its own ../include.
declare -A provides_file=([/usr/include/google/protobuf/timestamp.proto]=libprotobuf-dev
  [/usr/lib/cni/bridge]=containernetworking-plugins)
for f in "${!provides_file[@]}"; do
  if [ ! -r "$f" ]; then
    p=${provides_file[$f]}
    [[ " ${missing_pkgs[*]} " == *" $p "* ]] || missing_pkgs+=("$p")
  fi
done

if [ ${#missing_pkgs[@]} -gt 0 ]; then
  if $is_root && $is_debian; then
    say "installing ${missing_pkgs[*]}"
    guard=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      # exit 101 = "action forbidden": apt must not start services (no system containerd).
      printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d &&
        guard=/usr/sbin/policy-rc.d
    fi
    if DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing_pkgs[@]}" >&2; then
      say "installed ${missing_pkgs[*]}"
    else
      say "FAILED: apt-get install ${missing_pkgs[*]}"
    fi
    [ -n "$guard" ] && rm -f "$guard"
  else
    why="not root"
    $is_debian || why="not Debian"
    say "missing packages: ${missing_pkgs[*]} ($why; as root on Debian run:" \
      "apt-get install --no-install-recommends ${missing_pkgs[*]})"
  fi
fi

# --- 2. containerd 1.7 and 2.x from newer Debian suites --------------------------------------
suites=(trixie sid)
need_fetch=()
for s in "${suites[@]}"; do
  [ -x "$cache/containerd-$s/usr/bin/containerd" ] || need_fetch+=("$s")
done
if [ ${#need_fetch[@]} -gt 0 ]; then
  if $is_debian && [ -r /etc/apt/sources.list.d/debian.sources ]; then
    say "fetching containerd from Debian ${need_fetch[*]} into $cache"
    if ! bash "$here/fetch_containerd.sh" "${need_fetch[@]}" >/dev/null; then
      say "FAILED: tests/setup/fetch_containerd.sh ${need_fetch[*]}"
    fi
  else
    say "missing containerd from Debian ${need_fetch[*]} (needs Debian with" \
      "/etc/apt/sources.list.d/debian.sources: bash tests/setup/fetch_containerd.sh ${need_fetch[*]})"
  fi
fi

# Releases that carry containerd PR #13360 (the task-API endpoint in CreateTaskRequest: 2.3.1+)
# and the one before them. Debian has none of them; the Go module proxy has all three.
go_versions=(2.2.9 2.3.7 2.4.2)
# The machines' Go lives in /usr/local/go; a login shell's PATH may not name it.
command -v go >/dev/null || { [ -x /usr/local/go/bin/go ] && export PATH="$PATH:/usr/local/go/bin"; }
need_build=()
for v in "${go_versions[@]}"; do
  [ -x "$cache/containerd-v$v/bin/containerd" ] || need_build+=("$v")
done
if [ ${#need_build[@]} -gt 0 ]; then
  if command -v go >/dev/null; then
    say "building containerd ${need_build[*]} from Go modules into $cache (minutes on a fresh machine)"
    if ! bash "$here/build_containerd.sh" "${need_build[@]}" >/dev/null; then
      say "FAILED: tests/setup/build_containerd.sh ${need_build[*]}"
    fi
  else
    say "missing go: cannot build containerd ${need_build[*]} (bash tests/setup/build_containerd.sh ${need_build[*]})"
  fi
fi

# --- 3. the env file naming each containerd build --------------------------------------------
env_text="# written by tests/setup/prepare.sh: containerd builds for the integration tests"
declare -A seen=()
go_dirs=()
for v in "${go_versions[@]}"; do go_dirs+=("$cache/containerd-v$v/bin"); done
for dir in /usr/bin "$cache"/containerd-trixie/usr/bin "$cache"/containerd-sid/usr/bin "${go_dirs[@]}"; do
  [ -x "$dir/containerd" ] || continue
  # "containerd github.com/containerd/containerd/v2 2.1.9+unknown": take the first x.y.z.
  v=$("$dir/containerd" --version 2>/dev/null | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | head -n1)
  [ -n "$v" ] || { say "cannot run $dir/containerd --version"; continue; }
  key="SKIFF_CONTAINERD_$(cut -d. -f1 <<<"$v")_$(cut -d. -f2 <<<"$v")"
  [ -n "${seen[$key]:-}" ] && continue
  seen[$key]=1
  env_text+=$'\n'"$key=$dir"
done
if [ "$(cat "$cache/env" 2>/dev/null)" != "$env_text" ]; then
  mkdir -p "$cache" && printf '%s\n' "$env_text" >"$cache/env.tmp" && mv "$cache/env.tmp" "$cache/env"
  say "wrote $cache/env: $(grep -c '^SKIFF_CONTAINERD_' "$cache/env") containerd build(s)"
fi

# --- 3b. the Go client test helper, built against containerd 2.3.7 and 2.4.2 ----------------
# tests/fixtures/go-client (containerd's own Go client driving a pod; see build_go_client.sh).
if $is_root && command -v go >/dev/null; then
  for v in 2.3.7 2.4.2; do
    [ -x "$cache/go-client-v$v/skiff-go-client" ] &&
      [ "$(cat "$cache/go-client-v$v/SOURCE" 2>/dev/null)" = \
        "$(sha256sum <"$repo/tests/fixtures/go-client/main.go" | cut -c1-16)" ] && continue
    bash "$here/build_go_client.sh" "$v" >/dev/null ||
      say "FAILED: tests/setup/build_go_client.sh $v"
  done
fi

# --- 4. deno dependencies from the lock file -------------------------------------------------
if command -v deno >/dev/null; then
  if ! out=$(cd "$repo" && deno install --frozen 2>&1); then
    say "FAILED: deno install --frozen (dependency cache not filled):"
    echo "$out" >&2
  fi
else
  say "missing deno (npm install -g deno@2.9.6)"
fi

# --- 5. deno bundle's esbuild ----------------------------------------------------------------
if command -v deno >/dev/null; then
  tmp=$(mktemp -d)
  echo 'export {};' >"$tmp/empty.ts"
  if ! out=$(deno bundle --quiet --no-config -o "$tmp/empty.js" "$tmp/empty.ts" 2>&1); then
    say "FAILED: deno bundle (installShims cannot bundle shims):"
    echo "$out" >&2
  fi
  rm -rf "$tmp"
fi

# --- 6. Debian's docker-registry, unpacked privately (sdk/testing/registry.ts runs it) ------
if [ ! -x "$cache/docker-registry/usr/bin/docker-registry" ]; then
  if $is_root && $is_debian; then
    bash "$here/registry.sh" >/dev/null || say "FAILED: tests/setup/registry.sh (docker-registry)"
  else
    say "missing docker-registry (as root on Debian run: bash tests/setup/registry.sh)"
  fi
fi

# --- 7. critest (Kubernetes' CRI validation suite), built from its Go module -----------------
# Only as root: critest runs only as root, and a non-root run must not spend minutes compiling.
if [ ! -x "$cache/critest-v1.37.0/critest" ] || [ ! -x "$cache/critest-v1.37.0/crictl" ]; then
  if ! $is_root; then
    say "missing critest (as root run: bash tests/setup/critest.sh 1.37.0)"
  elif command -v go >/dev/null; then
    say "building critest 1.37.0 from its Go module into $cache"
    bash "$here/critest.sh" 1.37.0 >/dev/null || say "FAILED: tests/setup/critest.sh 1.37.0"
  else
    say "missing go: cannot build critest (bash tests/setup/critest.sh 1.37.0)"
  fi
fi

# --- 8. the cgroup v2 test guest -------------------------------------------------------------
if [ ! -r "$cache/guest/READY" ]; then
  if $is_root && $is_debian; then
    say "preparing the cgroup v2 test guest in $cache/guest"
    bash "$here/guest.sh" >/dev/null || say "FAILED: tests/setup/guest.sh"
  else
    say "missing the cgroup v2 test guest (as root on Debian: bash tests/setup/guest.sh)"
  fi
fi

# --- 9. trixie's crun for the guest ----------------------------------------------------------
if ! "$cache/crun-trixie/bin/crun" --version >/dev/null 2>&1; then
  if $is_debian && [ -r /etc/apt/sources.list.d/debian.sources ]; then
    say "fetching crun from Debian trixie into $cache/crun-trixie"
    bash "$here/fetch_crun.sh" >/dev/null || say "FAILED: tests/setup/fetch_crun.sh"
  else
    say "missing trixie's crun (needs Debian with /etc/apt/sources.list.d/debian.sources:" \
      "bash tests/setup/fetch_crun.sh)"
  fi
fi
exit 0
