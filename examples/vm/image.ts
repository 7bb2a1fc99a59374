/**
 * The VM's boot image: a Debian kernel, a small initramfs (Debian's static busybox, the
 * kernel's virtio modules and an init that ends in the agent) and the agent bundled into one
 * JavaScript file. Built on the host at set-up time and cached; nothing is downloaded here.
 *
 * The kernel comes unpacked (not installed) from `linux-image-amd64`, as tests/setup/guest.sh
 * leaves it in `$SKIFF_CACHE/guest/kernel` (tests/setup/prepare.sh runs it); any unpacked
 * kernel tree with `boot/vmlinuz-<release>` and `lib/modules/<release>` will do. The init mounts
 * the host's root read-only over virtio-9p with a tmpfs overlay on top (so the host's deno and
 * runc run in the guest), a writable 9p share for the pod's bundles, a pure cgroup v2 hierarchy,
 * and opens the virtio-serial port named `skiff.agent` as the agent's stdin and stdout.
 *
 * @module
 */

/** Where the VM's image was built. */
export interface VmImage {
  /** The kernel (bzImage). */
  kernel: string;
  /** The initramfs (gzip'd newc cpio). */
  initrd: string;
  /** The kernel's release, e.g. `6.1.0-57-amd64`. */
  kernelRelease: string;
  /** The bundled agent (examples/vm/agent/main.ts), one file, run by the host's deno. */
  agent: string;
}

/** Options of {@linkcode buildVmImage}. */
export interface VmImageOptions {
  /** An unpacked kernel package. Default `$SKIFF_CACHE/guest/kernel`. */
  kernelDir?: string;
  /** Where images are cached. Default `$SKIFF_CACHE/vm`. */
  cacheDir?: string;
  /** The static busybox to put in the initramfs. Default `/bin/busybox`. */
  busybox?: string;
}

/** Where the guest mounts the pod's share (the host's `VmOptions.shared`). */
export const GUEST_SHARED = "/run/skiff-vm/shared";

/** The modules the init loads, with their dependencies, in this order. */
const MODULES = ["virtio_pci", "9pnet_virtio", "9p", "overlay", "virtio_console"];

/** The virtio-serial port's name; the host's QEMU options give it. */
export const AGENT_PORT = "skiff.agent";

/** Bump when the init or the module list changes, so cached images are rebuilt. */
const RECIPE = 1;

/** The skiff cache: `$SKIFF_CACHE`, else `~/.cache/skiff`. */
export function skiffCache(): string {
  return Deno.env.get("SKIFF_CACHE") ?? `${Deno.env.get("HOME") ?? "/root"}/.cache/skiff`;
}

/**
 * Why the VM cannot boot here, or undefined when it can.
 *
 * @param options where the kernel is
 * @returns what is missing, e.g. `qemu-system-x86_64 (apt-get install qemu-system-x86)`
 */
export function vmUnavailable(options: VmImageOptions = {}): string | undefined {
  if (Deno.build.os !== "linux" || Deno.build.arch !== "x86_64") return "an x86_64 Linux host";
  for (const [bin, pkg] of [["qemu-system-x86_64", "qemu-system-x86"], ["modprobe", "kmod"]]) {
    if (!onPath(bin)) return `${bin} (apt-get install ${pkg})`;
  }
  const busybox = options.busybox ?? "/bin/busybox";
  if (!isFile(busybox)) return `${busybox} (apt-get install busybox-static)`;
  if (!kernelRelease(options.kernelDir ?? defaultKernelDir())) {
    return `an unpacked kernel in ${
      options.kernelDir ?? defaultKernelDir()
    } (run tests/setup/guest.sh)`;
  }
  return undefined;
}

/**
 * Builds the image, or finds it in the cache: the initramfs is keyed by the kernel and the
 * recipe, the agent bundle by its own content.
 *
 * @param options kernel, cache and busybox
 * @returns the image's paths
 */
export async function buildVmImage(options: VmImageOptions = {}): Promise<VmImage> {
  const kernelDir = options.kernelDir ?? defaultKernelDir();
  const release = kernelRelease(kernelDir);
  if (!release) throw new Error(`buildVmImage: no unpacked kernel in ${kernelDir}`);
  const cache = options.cacheDir ?? `${skiffCache()}/vm`;
  await Deno.mkdir(cache, { recursive: true });
  const initrd = `${cache}/initramfs-${release}-r${RECIPE}.gz`;
  if (!isFile(initrd)) await buildInitramfs(kernelDir, release, options.busybox, initrd);
  const image: VmImage = {
    kernel: `${kernelDir}/boot/vmlinuz-${release}`,
    initrd,
    kernelRelease: release,
    agent: await bundleAgent(cache),
  };
  await Deno.writeTextFile(`${cache}/${CURRENT}`, JSON.stringify(image, null, 2) + "\n");
  return image;
}

/** The last image {@linkcode buildVmImage} built, in its cache directory. */
const CURRENT = "image.json";

/**
 * The image a shim boots: built (or found in the cache) from the checkout when this module
 * runs from its sources; from an installed bundle, where the agent's sources are not at hand,
 * the last one built (`deno task vm-image`).
 *
 * @returns the image's paths
 * @throws {Error} when there are no sources and no image was built
 */
export async function currentVmImage(): Promise<VmImage> {
  const source = new URL("./agent/main.ts", import.meta.url);
  if (source.protocol === "file:" && isFile(source.pathname)) return await buildVmImage();
  const path = `${skiffCache()}/vm/${CURRENT}`;
  try {
    return JSON.parse(await Deno.readTextFile(path)) as VmImage;
  } catch (e) {
    throw new Error(`no VM image at ${path} (run \`deno task vm-image\`): ${(e as Error).message}`);
  }
}

function defaultKernelDir(): string {
  return `${skiffCache()}/guest/kernel`;
}

function kernelRelease(kernelDir: string): string | undefined {
  try {
    for (const e of Deno.readDirSync(`${kernelDir}/lib/modules`)) {
      if (e.isDirectory && isFile(`${kernelDir}/boot/vmlinuz-${e.name}`)) return e.name;
    }
  } catch { /* no kernel there */ }
  return undefined;
}

async function run(cmd: string, args: string[], opts: { cwd?: string } = {}): Promise<string> {
  const out = await new Deno.Command(cmd, { args, cwd: opts.cwd, stdin: "null" }).output();
  if (!out.success) {
    const err = new TextDecoder().decode(out.stderr).trim();
    throw new Error(`${cmd} ${args.join(" ")}: exited ${out.code}: ${err}`);
  }
  return new TextDecoder().decode(out.stdout);
}

/** The agent as one minified file, cached under its content's hash. */
async function bundleAgent(cache: string): Promise<string> {
  const entry = new URL("./agent/main.ts", import.meta.url).pathname;
  // Bundled from here: deno finds the project's deno.json (its import map) above this folder.
  const here = new URL(".", import.meta.url).pathname;
  const tmp = await Deno.makeTempFile({ dir: cache, prefix: "agent-", suffix: ".js" });
  try {
    await run(Deno.execPath(), [
      "bundle",
      "--quiet",
      "--platform",
      "deno",
      "--minify",
      "-o",
      tmp,
      entry,
    ], { cwd: here });
    const code = await Deno.readFile(tmp);
    const hash = Array.from(new Uint8Array(await crypto.subtle.digest("SHA-256", code)))
      .slice(0, 8).map((b) => b.toString(16).padStart(2, "0")).join("");
    const path = `${cache}/agent-${hash}.js`;
    if (!isFile(path)) await Deno.rename(tmp, path);
    return path;
  } finally {
    await Deno.remove(tmp).catch(() => {});
  }
}

async function buildInitramfs(
  kernelDir: string,
  release: string,
  busybox = "/bin/busybox",
  out: string,
): Promise<void> {
  const root = await Deno.makeTempDir({ prefix: "skiff-vm-initramfs-" });
  try {
    for (const d of ["bin", "mods", "proc", "sys", "dev", "lower", "rw", "newroot"]) {
      await Deno.mkdir(`${root}/${d}`);
    }
    await Deno.copyFile(busybox, `${root}/bin/busybox`);
    await Deno.chmod(`${root}/bin/busybox`, 0o755);
    const names: string[] = [];
    for (const m of MODULES) {
      const deps = await run("modprobe", [
        "-d",
        kernelDir,
        "-S",
        release,
        "--show-depends",
        m,
      ]);
      for (const line of deps.split("\n")) {
        const [verb, path] = line.trim().split(/\s+/);
        if (verb !== "insmod" || !path) continue;
        const name = path.slice(path.lastIndexOf("/") + 1);
        if (names.includes(name)) continue;
        await Deno.copyFile(path, `${root}/mods/${name}`);
        names.push(name);
      }
    }
    await Deno.writeTextFile(`${root}/modules.list`, names.join("\n") + "\n");
    await Deno.writeTextFile(`${root}/init`, INIT, { mode: 0o755 });
    await Deno.chmod(`${root}/init`, 0o755);
    const tmp = `${out}.tmp-${Deno.pid}`;
    await run("/bin/sh", [
      "-c",
      `cd "$1" && find . | "$2" cpio -o -H newc 2>/dev/null | gzip -1 >"$3"`,
      "sh",
      root,
      busybox,
      tmp,
    ]);
    await Deno.rename(tmp, out);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
}

/**
 * The guest's first process (busybox sh). The kernel command line names the agent bundle and
 * the deno binary (`skiff.agent=`, `skiff.deno=`: paths on the host's root, seen read-only);
 * the agent becomes PID 1 after switch_root, with the port as its stdin and stdout and the
 * console as its stderr. Anything that fails powers the guest off, which ends QEMU: a VM that
 * cannot start its agent is an exited sandbox.
 */
const INIT = `#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
fail() { echo "skiff-vm init: $*"; poweroff -f; }
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in $(cat /modules.list); do insmod "/mods/$m" 2>/dev/null; done
for w in $(cat /proc/cmdline); do
  case "$w" in
    skiff.agent=*) agent="\${w#skiff.agent=}" ;;
    skiff.deno=*) deno="\${w#skiff.deno=}" ;;
  esac
done
o=trans=virtio,version=9p2000.L,msize=512000
mount -t 9p -o "$o,ro,cache=loose" hostroot /lower || fail "mount hostroot failed"
mount -t tmpfs -o mode=755 tmpfs /rw
mkdir -p /rw/upper /rw/work
mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work overlay /newroot ||
  fail "overlay mount failed"
n=/newroot
mount -t tmpfs -o mode=755 tmpfs $n/run
mount -t tmpfs tmpfs $n/tmp
mkdir -p $n${GUEST_SHARED}
mount -t 9p -o "$o" skiffshare $n${GUEST_SHARED} || fail "mount skiffshare failed"
mount -t proc proc $n/proc
mount -t sysfs sysfs $n/sys
mount -t cgroup2 -o nsdelegate cgroup2 $n/sys/fs/cgroup
echo "+cpuset +cpu +io +memory +pids" >$n/sys/fs/cgroup/cgroup.subtree_control
mount -t devtmpfs devtmpfs $n/dev
mkdir -p $n/dev/pts $n/dev/shm
mount -t devpts -o newinstance,ptmxmode=0666 devpts $n/dev/pts
mount -t tmpfs tmpfs $n/dev/shm
port=""
i=0
while [ -z "$port" ] && [ $i -lt 100 ]; do
  for f in /sys/class/virtio-ports/*/name; do
    [ -r "$f" ] && [ "$(cat "$f")" = ${AGENT_PORT} ] && port=$(basename "$(dirname "$f")")
  done
  [ -n "$port" ] || { sleep 0.1; i=$((i + 1)); }
done
[ -n "$port" ] || fail "no virtio-serial port named ${AGENT_PORT}"
while [ ! -e $n/dev/$port ]; do sleep 0.1; done
hostname skiff-vm
echo "skiff-vm init: starting the agent on /dev/$port at $(cut -d' ' -f1 /proc/uptime) s"
umount /dev /sys /proc
export HOME=/root DENO_DIR=/tmp/deno NO_COLOR=1 DENO_NO_UPDATE_CHECK=1
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
exec switch_root /newroot "$deno" run -A --no-config --no-lock "$agent" \\
  0<>$n/dev/$port 1>&0 2>$n/dev/console
`;

function isFile(path: string): boolean {
  try {
    return Deno.statSync(path).isFile;
  } catch {
    return false;
  }
}

function onPath(name: string): boolean {
  const dirs = (Deno.env.get("PATH") ?? "").split(":").concat(["/usr/sbin", "/sbin"]);
  return dirs.filter(Boolean).some((d) => isFile(`${d}/${name}`));
}

if (import.meta.main) {
  const why = vmUnavailable();
  if (why) {
    console.error(`the VM image needs ${why}`);
    Deno.exit(1);
  }
  console.log(JSON.stringify(await buildVmImage(), null, 2));
}
