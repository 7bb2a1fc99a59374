/**
 * A cgroup v2 test guest: runs one command of the checkout inside a QEMU virtual machine
 * (TCG, so no KVM is needed) whose kernel mounts a pure cgroup2 hierarchy, for hosts that
 * are cgroup v1 or hybrid themselves.
 *
 * The guest boots a Debian kernel and a tiny initramfs that `tests/setup/guest.sh` caches in
 * `$SKIFF_CACHE/guest`. It sees the host's root read-only over virtio-9p with a tmpfs overlay
 * on top, so the host's deno, containerd builds, runc and the checkout run there unchanged
 * and whatever the guest writes stays in the guest. A second, writable 9p share carries the
 * command in and its exit status (and any files it writes to `$SKIFF_GUEST_OUT`) out; its
 * stdout and stderr come back over the serial console. QEMU is killed when the command
 * exceeds its time bound, and the share is removed on every path.
 *
 * @example Run a command on cgroup v2
 * ```ts ignore
 * import { runInGuest } from "@skiff/shim/testing";
 *
 * const r = await runInGuest({ command: ["cat", "/sys/fs/cgroup/cgroup.controllers"] });
 * console.log(r.code, r.output); // 0 "cpuset cpu io memory hugetlb pids\n"
 * ```
 *
 * @module
 */

import { skiffCacheDir } from "./containerd_versions.ts";

/**
 * The cached guest image ({@linkcode guestImage}).
 *
 * @example Usage
 * ```ts ignore
 * const img: GuestImage | undefined = guestImage();
 * ```
 */
export interface GuestImage {
  /** The kernel image (bzImage). */
  kernel: string;
  /** The initramfs (gzip'd newc cpio). */
  initrd: string;
  /** The kernel's release, e.g. `6.1.0-57-amd64`. */
  kernelRelease: string;
  /** The kernel's module tree, bound at `/lib/modules/<release>` inside the guest. */
  modules: string;
}

/**
 * Options of {@linkcode runInGuest}.
 *
 * @example Usage
 * ```ts ignore
 * const o: GuestOptions = { command: ["deno", "--version"], timeoutMs: 120_000 };
 * ```
 */
export interface GuestOptions {
  /** The command and its arguments, run as root in the guest. */
  command: string[];
  /** Working directory in the guest (the host's paths are the guest's). Default: `Deno.cwd()`. */
  cwd?: string;
  /**
   * Environment of the command, on top of PATH, HOME, SKIFF_CACHE, SKIFF_GUEST=1 and
   * SKIFF_GUEST_OUT (and the host's NO_COLOR, DENO_DIR and SKIFF_REQUIRE_INTEGRATION when set).
   */
  env?: Record<string, string>;
  /** Bound on the whole run, boot included; QEMU is killed after it. Default 30 minutes. */
  timeoutMs?: number;
  /** Guest memory in MiB (the tmpfs overlay lives in it). Default 3072. */
  memoryMiB?: number;
  /**
   * Virtual CPUs. Default 1: with 2, a loaded host wedged the guest now and then, both vCPUs
   * spinning in the kernel under runc for minutes ("soft lockup ... stuck for 160s! [runc]" and
   * "[exe]", seen under load ~20), the signature of a cross-CPU call that never completes under
   * TCG; one vCPU has no cross-CPU calls to lose.
   */
  cpus?: number;
  /** Called with the command's console output as it arrives (e.g. to show progress). */
  onOutput?: (text: string) => void;
  /**
   * The guest's PID 1: `"shell"` (default: a script that runs the command, fastest) or
   * `"systemd"` (the host's systemd, running the command as a unit: for what needs a systemd
   * manager, such as runc's `--systemd-cgroup`).
   */
  init?: "shell" | "systemd";
  /** The guest image. Default: {@linkcode guestImage}'s. */
  image?: GuestImage;
}

/**
 * What a guest run gave back ({@linkcode runInGuest}).
 *
 * @example Usage
 * ```ts ignore
 * const r: GuestResult = await runInGuest({ command: ["true"] });
 * if (r.code !== 0) throw new Error(r.console);
 * ```
 */
export interface GuestResult {
  /** The command's exit status; -1 when the guest ended without one (timeout, panic). */
  code: number;
  /** The command's stdout and stderr, interleaved, as the serial console carried them. */
  output: string;
  /** Everything the console carried, boot included (for diagnosing a failed boot). */
  console: string;
  /** Files the command wrote directly into `$SKIFF_GUEST_OUT`, name → text. */
  files: Record<string, string>;
  /** True when the time bound killed QEMU. */
  timedOut: boolean;
  /**
   * The console's soft-lockup line when the guest's kernel was stuck for
   * {@linkcode WEDGED_SECONDS} or more and QEMU was killed then, rather than at the time bound.
   */
  wedged?: string;
  /** Wall-clock seconds from QEMU's start to its end. */
  seconds: number;
}

/**
 * A soft lockup this long is a wedged guest, not a slow one: a vCPU starved by a busy host
 * recovers within a minute or two, while a wedge (seen under TCG with 2 vCPUs) goes on until the
 * time bound, which the run need not wait for.
 */
export const WEDGED_SECONDS = 300;

/**
 * The first soft-lockup line of a guest's console stuck for {@linkcode WEDGED_SECONDS} or more.
 *
 * @param console the console text so far
 * @returns that line, or undefined
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { wedgedLine } from "./guest.ts";
 *
 * const slow = "[ 124.8] watchdog: BUG: soft lockup - CPU#1 stuck for 23s! [runc:246]";
 * const stuck = "[ 640.5] watchdog: BUG: soft lockup - CPU#0 stuck for 301s! [exe:247]";
 * strictEqual(wedgedLine(`${slow}\n`), undefined);
 * strictEqual(wedgedLine(`boot\n${slow}\n${stuck}\n`), stuck);
 * ```
 */
export function wedgedLine(console: string): string | undefined {
  for (const m of console.matchAll(/^.*soft lockup - CPU#\d+ stuck for (\d+)s!.*$/gm)) {
    if (Number(m[1]) >= WEDGED_SECONDS) return m[0].trim();
  }
  return undefined;
}

const START = "skiff-guest: command starts";
const END = "skiff-guest: command ended";
/** The run's share, as the guest sees it. */
const SHARE = "/skiff-guest";

/**
 * The cached guest image, or undefined when `tests/setup/guest.sh` has not made it.
 *
 * @param cache the skiff cache (default `$SKIFF_CACHE` or `~/.cache/skiff`)
 * @returns the image's paths
 *
 * @example Usage
 * ```ts ignore
 * guestImage()?.kernelRelease; // "6.1.0-57-amd64"
 * ```
 */
export function guestImage(cache: string = skiffCacheDir()): GuestImage | undefined {
  const dir = `${cache}/guest`;
  try {
    Deno.statSync(`${dir}/READY`);
    const kernelRelease = Deno.readTextFileSync(`${dir}/KVER`).trim();
    const img = {
      kernel: `${dir}/vmlinuz`,
      initrd: `${dir}/initramfs.gz`,
      kernelRelease,
      modules: `${dir}/kernel/lib/modules/${kernelRelease}`,
    };
    Deno.statSync(img.kernel);
    Deno.statSync(img.initrd);
    return img;
  } catch {
    return undefined;
  }
}

/**
 * Why the guest cannot run here, or undefined when it can: names what is missing.
 *
 * @returns a message such as `qemu-system-x86_64 (apt-get install qemu-system-x86)`
 *
 * @example Usage
 * ```ts ignore
 * const why = guestUnavailable();
 * if (why) console.log(`skipping: needs ${why}`);
 * ```
 */
export function guestUnavailable(): string | undefined {
  if (Deno.build.os !== "linux" || Deno.build.arch !== "x86_64") {
    return "an x86_64 Linux host (the guest is x86_64 under QEMU)";
  }
  if (!onPath("qemu-system-x86_64")) return "qemu-system-x86_64 (apt-get install qemu-system-x86)";
  if (!guestImage()) return "the guest image (run tests/setup/guest.sh)";
  return undefined;
}

function onPath(name: string): boolean {
  return (Deno.env.get("PATH") ?? "").split(":").filter(Boolean).some((d) => {
    try {
      return Deno.statSync(`${d}/${name}`).isFile;
    } catch {
      return false;
    }
  });
}

/** Single-quotes a word for bash. */
function quote(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`;
}

/** The command's own script: environment, directory, markers, exit status, power off. */
function runScript(cwd: string, env: Record<string, string>, command: string[]): string {
  const exports = Object.entries(env).map(([k, v]) => `export ${k}=${quote(v)}`).join("\n");
  return `# written by sdk/testing/guest.ts: the command, run by the guest's PID 1 or its unit
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
${exports}
cd ${quote(cwd)} || echo "guest: no such directory ${cwd.replaceAll("$", "")}"
echo ${quote(START)}
${command.map(quote).join(" ")} </dev/null
echo $? >${SHARE}/rc.tmp && mv ${SHARE}/rc.tmp ${SHARE}/rc
echo ${quote(END)}
sync
/bin/busybox poweroff -f
`;
}

/**
 * The unit that runs the command when systemd is the guest's PID 1. No default dependencies:
 * systemd's own manager (what runc's systemd cgroup driver talks to) is all it needs, and the
 * host's sysinit units would only slow an emulated boot.
 */
const SYSTEMD_UNIT = `[Unit]
Description=skiff guest command
DefaultDependencies=no

[Service]
Type=oneshot
ExecStart=/bin/bash ${SHARE}/run.sh
StandardOutput=tty
StandardError=tty
TTYPath=/dev/ttyS0
`;

/** The guest's second stage: the host's bash runs it as PID 1 after switch_root. */
function stage2(img: GuestImage, init: "shell" | "systemd", cwd: string): string {
  // A checkout under /tmp or /run (CI clones into a temp dir) would vanish under the fresh
  // tmpfs below: hold it on a bind mount and put it back on top.
  const hidden = /^\/(tmp|run)(\/|$)/.test(cwd);
  const hold = hidden ? `mkdir -p /.skiff-cwd && mount --bind ${quote(cwd)} /.skiff-cwd\n` : "";
  const restore = hidden
    ? `mkdir -p ${quote(cwd)} && mount --move /.skiff-cwd ${quote(cwd)}\n`
    : "";
  return `# written by sdk/testing/guest.ts: the guest's PID 1 after switch_root
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm /dev/mqueue
mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts
ln -sf pts/ptmx /dev/ptmx 2>/dev/null
mount -t tmpfs tmpfs /dev/shm
mount -t mqueue mqueue /dev/mqueue
# The pure cgroup v2 hierarchy, every controller delegated to the root's children.
mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup
echo "+cpuset +cpu +io +memory +hugetlb +pids" >/sys/fs/cgroup/cgroup.subtree_control
# A clean /tmp and /run: the host's own (seen through the overlay) hold its live state.
${hold}mount -t tmpfs tmpfs /tmp
mount -t tmpfs -o mode=755 tmpfs /run
${restore}mkdir -p /lib/modules/${img.kernelRelease}
mount --bind ${quote(img.modules)} /lib/modules/${img.kernelRelease}
mount --make-rshared /
hostname skiff-guest
ip link set lo up
stty -F /dev/ttyS0 -opost 2>/dev/null
${
    init === "systemd"
      ? `cp ${SHARE}/skiff-guest.service /etc/systemd/system/skiff-guest.service
exec /lib/systemd/systemd --unit=skiff-guest.service --show-status=no --log-level=warning`
      : `exec /bin/bash ${SHARE}/run.sh`
  }
`;
}

/**
 * Reads QEMU's console to its end: forwards the command's part (between the START and END
 * markers) to `onOutput` as it arrives, and calls `kill` at a wedge ({@linkcode wedgedLine}),
 * whatever pieces the console's lines arrive in.
 *
 * @param console QEMU's standard output (the guest's serial console)
 * @param kill ends QEMU
 * @param onOutput receives the command's output
 * @returns everything read, and the wedge's line if there was one
 * @example A wedge's line split across reads
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { readConsole } from "./guest.ts";
 * const line = "[ 640.5] watchdog: BUG: soft lockup - CPU#0 stuck for 301s! [runc:246]\n";
 * const bytes = new TextEncoder().encode(`boot\n${line}`);
 * let killed = 0;
 * const r = await readConsole(ReadableStream.from([...bytes].map((b) => Uint8Array.of(b))), () => killed++, undefined);
 * strictEqual(r.wedged, line.trim());
 * strictEqual(killed, 1);
 * ```
 */
export async function readConsole(
  console: ReadableStream<Uint8Array>,
  kill: () => void,
  onOutput: ((text: string) => void) | undefined,
): Promise<{ all: string; wedged?: string }> {
  let all = "";
  let forwarded = 0;
  let wedged: string | undefined;
  const decoder = new TextDecoder();
  for await (const chunk of console) {
    const text = decoder.decode(chunk, { stream: true }).replaceAll("\r", "");
    // The lines this chunk completes, from the start of the one it continues: a console line
    // arrives in pieces, and "soft lockup" or the rest of its line may be in the next one.
    const lineStart = all.lastIndexOf("\n") + 1;
    all += text;
    const complete = all.lastIndexOf("\n") + 1;
    const lines = complete > lineStart ? all.slice(lineStart, complete) : "";
    if (!wedged && lines.includes("soft lockup") && (wedged = wedgedLine(lines))) {
      kill();
    }
    if (!onOutput) continue;
    const from = all.indexOf(START);
    if (from < 0) continue;
    const begin = Math.max(forwarded, from + START.length + 1);
    const stop = all.indexOf(END, begin);
    const upTo = stop >= 0 ? stop : Math.max(begin, all.length - END.length);
    if (upTo > begin) onOutput(all.slice(begin, upTo));
    forwarded = Math.max(forwarded, upTo);
  }
  return wedged ? { all, wedged } : { all };
}

/** The command's environment in the guest: the guest's own, a few of ours, then `extra`. */
function guestEnv(extra: Record<string, string> = {}): Record<string, string> {
  const env: Record<string, string> = {
    HOME: Deno.env.get("HOME") ?? "/root",
    SKIFF_CACHE: skiffCacheDir(),
    SKIFF_GUEST: "1",
    SKIFF_GUEST_OUT: `${SHARE}/out`,
  };
  for (const k of ["NO_COLOR", "DENO_DIR", "SKIFF_REQUIRE_INTEGRATION"]) {
    const v = Deno.env.get(k);
    if (v !== undefined) env[k] = v;
  }
  return Object.assign(env, extra);
}

/**
 * Boots the guest, runs one command in it and returns its exit status and output.
 *
 * @param opts the command and the guest's bounds
 * @returns the result; throws only when QEMU cannot be started or the image is missing
 *
 * @example Usage
 * ```ts ignore
 * const r = await runInGuest({ command: ["deno", "task", "conformance", "--help"] });
 * console.log(r.code);
 * ```
 */
export async function runInGuest(opts: GuestOptions): Promise<GuestResult> {
  const img = opts.image ?? guestImage();
  if (!img) {
    throw new Error("runInGuest: no guest image in the skiff cache (run tests/setup/guest.sh)");
  }
  const share = await Deno.makeTempDir({ prefix: "skiff-guest-" });
  const env = guestEnv(opts.env);
  let child: Deno.ChildProcess | undefined;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let timedOut = false;
  const started = performance.now();
  try {
    await Deno.mkdir(`${share}/out`);
    const init = opts.init ?? "shell";
    const cwd = opts.cwd ?? Deno.cwd();
    await Deno.writeTextFile(`${share}/stage2.sh`, stage2(img, init, cwd));
    await Deno.writeTextFile(`${share}/run.sh`, runScript(cwd, env, opts.command));
    if (init === "systemd") await Deno.writeTextFile(`${share}/skiff-guest.service`, SYSTEMD_UNIT);
    const fsdev = (id: string, path: string, tag: string, extra: string) => [
      "-fsdev",
      `local,id=${id},path=${path},security_model=passthrough,multidevs=remap${extra}`,
      "-device",
      `virtio-9p-pci,fsdev=${id},mount_tag=${tag}`,
    ];
    const args = [
      ...["-accel", "tcg", "-cpu", "max", "-smp", String(opts.cpus ?? 1)],
      ...["-m", String(opts.memoryMiB ?? 3072), "-nodefaults", "-no-reboot", "-display", "none"],
      ...["-chardev", "stdio,id=con,signal=off", "-serial", "chardev:con"],
      ...["-kernel", img.kernel, "-initrd", img.initrd],
      ...["-append", "console=ttyS0 quiet loglevel=1 panic=-1 cgroup_no_v1=all"],
      ...fsdev("hostroot", "/", "hostroot", ",readonly=on"),
      ...fsdev("skiffrun", share, "skiffrun", ""),
    ];
    child = new Deno.Command("qemu-system-x86_64", {
      args,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const proc = child;
    timer = setTimeout(() => {
      timedOut = true;
      try {
        proc.kill("SIGKILL");
      } catch { /* already gone */ }
    }, opts.timeoutMs ?? 30 * 60_000);
    const stderr = new Response(proc.stderr).text();
    const { all, wedged } = await readConsole(proc.stdout, () => {
      try {
        proc.kill("SIGKILL");
      } catch { /* already gone */ }
    }, opts.onOutput);
    const status = await proc.status;
    child = undefined;
    const qemuErr = await stderr;
    const seconds = (performance.now() - started) / 1000;
    const from = all.indexOf(START);
    const to = all.indexOf(END, Math.max(from, 0));
    const output = from < 0 ? "" : all.slice(from + START.length + 1, to < 0 ? undefined : to);
    let code = -1;
    try {
      code = Number((await Deno.readTextFile(`${share}/rc`)).trim());
    } catch { /* the guest ended without a status */ }
    if (code === -1 && !timedOut && !status.success && from < 0) {
      // QEMU itself failed (bad option, no memory): say so rather than an empty result.
      throw new Error(`runInGuest: qemu-system-x86_64 exited ${status.code}: ${qemuErr.trim()}`);
    }
    const files: Record<string, string> = {};
    for await (const e of Deno.readDir(`${share}/out`)) {
      if (e.isFile) files[e.name] = await Deno.readTextFile(`${share}/out/${e.name}`);
    }
    return { code, output, console: all, files, timedOut, seconds, ...(wedged ? { wedged } : {}) };
  } finally {
    clearTimeout(timer);
    if (child) {
      try {
        child.kill("SIGKILL");
      } catch { /* already gone */ }
      await child.status.catch(() => {});
    }
    await Deno.remove(share, { recursive: true }).catch(() => {});
  }
}
