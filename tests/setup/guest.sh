#!/usr/bin/env bash
# Prepares the cgroup v2 test guest (sdk/testing/guest.ts): a Debian kernel and a tiny
# initramfs, cached in $SKIFF_CACHE/guest. The guest boots that kernel under QEMU (TCG: no KVM
# needed), sees this machine's root read-only over virtio-9p with a tmpfs overlay on top, and
# runs one command of the checkout there on a pure cgroup2 hierarchy.
#
# - qemu-system-x86 and kmod (modprobe/depmod, to resolve module dependencies) come from apt
#   when missing (the caller, prepare.sh, installs packages; this script only checks them).
# - The kernel is NOT installed: bookworm's linux-image-amd64 is resolved to its versioned
#   package, downloaded with `apt-get download` and unpacked with dpkg -x into the cache, so
#   nothing in /boot, /lib/modules or the boot loader of this machine changes.
# - The initramfs holds Debian's static busybox, an /init script and the modules that mounting
#   the host's root needs (virtio_pci, 9pnet_virtio, 9p, overlay), in the order
#   `modprobe --show-depends` gives.
#
# Prints the cache directory on success. Silent and fast when everything is there.
#
# usage: guest.sh
# env:   SKIFF_CACHE (default ~/.cache/skiff)
set -euo pipefail
cache="${SKIFF_CACHE:-${HOME:-$(echo ~)}/.cache/skiff}"
dir="$cache/guest"
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

fail() { echo "guest.sh: $*" >&2; exit 2; }
for c in qemu-system-x86_64 depmod modprobe dpkg apt-get; do
  command -v "$c" >/dev/null || fail "missing $c (apt-get install qemu-system-x86 kmod)"
done
[ -x /bin/busybox ] || fail "missing /bin/busybox (apt-get install busybox-static)"

# Layout version: bump when the initramfs recipe below changes, so caches are rebuilt.
readonly RECIPE=1
if [ -r "$dir/READY" ] && [ "$(cat "$dir/READY")" = "$RECIPE" ] && [ -r "$dir/initramfs.gz" ]; then
  echo "$dir"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# --- the kernel: linux-image-amd64 -> linux-image-<kver>, downloaded and unpacked ----------
pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-/ { print $2; exit }')
[ -n "$pkg" ] || fail "apt-cache cannot resolve linux-image-amd64 (apt-get update?)"
if ! (cd "$work" && apt-get download -qq "$pkg" >/dev/null 2>&1); then
  apt-get update -qq >/dev/null 2>&1 || true
  (cd "$work" && apt-get download -qq "$pkg" >/dev/null 2>&1) || fail "apt-get download $pkg failed"
fi
rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
dpkg -x "$work"/"$pkg"_*.deb "$dir.tmp/kernel"
kver=$(ls "$dir.tmp/kernel/lib/modules")
[ -r "$dir.tmp/kernel/boot/vmlinuz-$kver" ] || fail "no vmlinuz-$kver in $pkg"
depmod -b "$dir.tmp/kernel" "$kver"
echo "$kver" >"$dir.tmp/KVER"
echo "$pkg" >"$dir.tmp/PACKAGE"
ln -s "kernel/boot/vmlinuz-$kver" "$dir.tmp/vmlinuz"

# --- the initramfs -----------------------------------------------------------------------
root="$work/initramfs"
mkdir -p "$root/bin" "$root/mods" "$root/proc" "$root/sys" "$root/dev" "$root/lower" "$root/rw" \
  "$root/newroot"
cp /bin/busybox "$root/bin/busybox"
: >"$root/modules.list"
for m in virtio_pci 9pnet_virtio 9p overlay; do
  modprobe -d "$dir.tmp/kernel" -S "$kver" --show-depends "$m" | awk '$1 == "insmod" { print $2 }' |
    while read -r ko; do
      name=$(basename "$ko")
      grep -qx "$name" "$root/modules.list" && continue
      cp "$ko" "$root/mods/$name"
      echo "$name" >>"$root/modules.list"
    done
done
# The guest's first process. The host's root comes read-only over 9p (tag hostroot); a tmpfs
# overlay makes it writable in the guest only; the run's own share (tag skiffrun, writable)
# carries the command in and the exit status out. Its stage2.sh (written by guest.ts) runs
# with the host's own bash after switch_root.
cat >"$root/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t devtmpfs devtmpfs /dev
for m in $(cat /modules.list); do insmod "/mods/$m" 2>/dev/null; done
o=trans=virtio,version=9p2000.L,msize=512000
mount -t 9p -o "$o,ro,cache=loose" hostroot /lower || { echo "guest: mount hostroot failed"; poweroff -f; }
mount -t tmpfs -o mode=755 tmpfs /rw
mkdir -p /rw/upper /rw/work
mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work overlay /newroot ||
  { echo "guest: overlay mount failed"; poweroff -f; }
mkdir -p /newroot/skiff-guest
mount -t 9p -o "$o" skiffrun /newroot/skiff-guest || { echo "guest: mount skiffrun failed"; poweroff -f; }
umount /dev /proc
exec switch_root /newroot /bin/bash /skiff-guest/stage2.sh
EOF
chmod 755 "$root/init"
(cd "$root" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1 >"$dir.tmp/initramfs.gz")
echo "$RECIPE" >"$dir.tmp/READY"
rm -rf "$dir" && mv "$dir.tmp" "$dir"
echo "$dir"
