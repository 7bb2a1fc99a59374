/**
 * Starting a private containerd per test ({@linkcode startContainerd}): a new temp dir with its
 * own root, state, sockets, config and log, so tests never touch (or depend on) a system-wide
 * containerd; and sweeping the instances of test processes that died without stopping theirs.
 *
 * The kit's parts of a private containerd are in their own files and re-exported here, so a test
 * imports one module: the instance (`PrivateContainerd`, private_containerd.ts), its ctr
 * (`CtrOptions`, `CtrResult`, ctr_command.ts), its config (`CriSetup`, containerd_config.ts) and
 * the builds on this machine (containerd_versions.ts).
 *
 * @example Usage
 * ```ts ignore
 * import { containerdVersions, startContainerd } from "@skiff/shim/testing";
 *
 * for (const { version, binDir } of containerdVersions()) {
 *   const c = await startContainerd({ binDir });
 *   try {
 *     const ref = await c.importBusyboxImage(); // into DEFAULT_NAMESPACE, ctrRun's
 *     console.log(version, ref);
 *   } finally {
 *     await c.stop();
 *   }
 * }
 * ```
 *
 * @module
 */

import { removeTree } from "./bundle.ts";
import { buildPauseImage, PAUSE_IMAGE_REF } from "./image.ts";
import { CRI_NAMESPACE, criClient } from "./cri_client.ts";
import { containerdVersionOf, overlaySupported } from "./containerd_versions.ts";
import { configText, containerdConfig, type CriSetup } from "./containerd_config.ts";
import { PrivateContainerd, type RuntimeConfig } from "./private_containerd.ts";
import { sleep } from "./processes.ts";

export {
  type ContainerdVersion,
  containerdVersionOf,
  containerdVersions,
  overlaySupported,
  skiffCacheDir,
} from "./containerd_versions.ts";
export { PrivateContainerd, type RuntimeConfig } from "./private_containerd.ts";
export type { CtrOptions, CtrResult } from "./ctr_command.ts";
export type { CriSetup } from "./containerd_config.ts";

/**
 * Options of {@linkcode startContainerd}.
 *
 * @example Usage
 * ```ts ignore
 * const c = await startContainerd({ binDir: "/usr/bin", debug: true, snapshotter: "native" });
 * ```
 */
export interface StartContainerdOptions {
  /** Directory with `containerd`, `ctr` and `containerd-shim-runc-v2` of one version. */
  binDir: string;
  /** Named runtimes: their `binaryDir`s go on PATH; `ctrRun` maps names to runtime types. */
  runtimes?: Record<string, RuntimeConfig>;
  /** Directories put first on containerd's PATH (where shim launchers live). */
  extraPath?: string[];
  /** Log at debug level (containerd then also passes `-debug` to shims). */
  debug?: boolean;
  /** TOML merged over the generated config (tables merge, arrays and values replace). */
  configToml?: string;
  /** Snapshotter for images and containers. Default: `overlayfs` when it mounts here, else `native`. */
  snapshotter?: string;
  /** Parent of the private temp dir. Default: the system temp dir. */
  tmpDir?: string;
  /** Extra environment for containerd (and so for the shims it starts). */
  env?: Record<string, string>;
  /**
   * Enable CRI (Kubernetes' runtime API, on the gRPC socket) with `runtimes` as its handlers.
   * CNI stays unconfigured (private, empty dirs): only host-network pods can run.
   */
  cri?: CriSetup;
}

/** Records which test process owns a private containerd dir: `<pid> <start time>`. */
const OWNER_FILE = "owner";

/** A process's start time (clock ticks since boot), which tells a reused pid apart. */
function startTime(pid: number): string | undefined {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19];
  } catch {
    return undefined;
  }
}

/**
 * Tears down private containerds whose test process died without calling `stop()` (a killed
 * test run): their containerd, shims, containers, mounts, cgroups and dirs. Instances of live
 * processes, and dirs without an owner record, are left alone. `startContainerd` calls this.
 *
 * @param tmpDir where the private dirs live. Default: the system temp dir
 * @returns the dirs that were swept
 *
 * @example Usage
 * ```ts
 * import { deepStrictEqual } from "node:assert/strict";
 * import { sweepStaleContainerds } from "./containerd.ts";
 * const tmp = await Deno.makeTempDir(); // the default is the system temp dir
 * await Deno.mkdir(`${tmp}/skiff-ctrd-x`); // no owner record: not ours to sweep
 * deepStrictEqual(await sweepStaleContainerds(tmp), []);
 * await Deno.remove(tmp, { recursive: true });
 * ```
 */
export async function sweepStaleContainerds(tmpDir?: string): Promise<string[]> {
  const base = tmpDir ?? Deno.env.get("TMPDIR") ?? "/tmp";
  const swept: string[] = [];
  for await (const e of Deno.readDir(base)) {
    if (!e.isDirectory || !e.name.startsWith("skiff-ctrd-")) continue;
    const dir = `${base}/${e.name}`;
    let owner: string;
    try {
      owner = await Deno.readTextFile(`${dir}/${OWNER_FILE}`);
    } catch {
      continue;
    }
    const [pid, started] = owner.trim().split(" ");
    if (pid && started && startTime(Number(pid)) === started) continue;
    const stale = new PrivateContainerd({
      dir,
      version: "0.0.0",
      binDir: "",
      snapshotter: "",
      runtimes: {},
      env: {},
    });
    await stale.stop();
    swept.push(dir);
  }
  return swept;
}

/**
 * Imports the locally built pause image into CRI's namespace and waits until CRI itself lists
 * it (CRI learns of images from containerd's events; a pod run before that would try to pull).
 */
async function importPauseImage(c: PrivateContainerd): Promise<void> {
  const tar = await buildPauseImage();
  const r = await c.ctr(["images", "import", tar], { namespace: CRI_NAMESPACE, timeoutMs: 60_000 });
  if (r.code !== 0) {
    throw new Error(`ctr -n ${CRI_NAMESPACE} images import ${tar} failed (${r.code}): ${r.stderr}`);
  }
  const cri = criClient(c.address);
  const until = Date.now() + 30_000;
  let last = "";
  for (;;) {
    try {
      const s = await cri.images.imageStatus({ image: { image: PAUSE_IMAGE_REF } }, {
        timeoutMs: 10_000,
      });
      if (s.image) return;
      last = "not listed";
    } catch (e) {
      last = (e as Error).message;
    }
    if (Date.now() > until) {
      throw new Error(`CRI of containerd ${c.version} never saw ${PAUSE_IMAGE_REF}: ${last}`);
    }
    await sleep(100);
  }
}

/**
 * Starts a private containerd of the version in `opts.binDir`, in a new temp dir with its own
 * root, state, gRPC and ttrpc sockets, config and log. NRI is disabled, and CRI unless
 * `opts.cri` is given (then the pause image is imported into `k8s.io` before this returns). Shim
 * binaries resolve from `extraPath`, the runtimes' `binaryDir`s, then `binDir`, then PATH.
 *
 * @param opts which containerd, extra PATH entries, runtimes, config overrides
 * @returns the running instance; call `stop()` in a `finally`
 *
 * @example Usage
 * ```ts ignore
 * const c = await startContainerd({ binDir: "/usr/bin", extraPath: ["/tmp/prefix/bin"] });
 * try {
 *   const image = await c.importBusyboxImage();
 *   const r = await ctrRun(c, { image, id: "hello", args: ["echo", "hello"] });
 *   console.log(r.stdout); // "hello\n"
 * } finally {
 *   await c.stop();
 * }
 * ```
 */
export async function startContainerd(opts: StartContainerdOptions): Promise<PrivateContainerd> {
  await sweepStaleContainerds(opts.tmpDir).catch(() => undefined);
  const binDir = await Deno.realPath(opts.binDir);
  const version = containerdVersionOf(binDir);
  if (!version) throw new Error(`no working containerd in "${binDir}"`);
  const dir = await Deno.realPath(
    await Deno.makeTempDir({ prefix: "skiff-ctrd-", ...(opts.tmpDir ? { dir: opts.tmpDir } : {}) }),
  );
  try {
    const snapshotter = opts.snapshotter ??
      (await overlaySupported(dir) ? "overlayfs" : "native");
    const runtimes = opts.runtimes ?? {};
    const path = [
      ...(opts.extraPath ?? []),
      ...Object.values(runtimes).flatMap((r) => r.binaryDir ? [r.binaryDir] : []),
      binDir,
      Deno.env.get("PATH") ?? "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    ].join(":");
    const env = { ...Deno.env.toObject(), ...opts.env, PATH: path };
    const c = new PrivateContainerd({ dir, version, binDir, snapshotter, runtimes, env });
    for (const d of [c.root, c.state, c.runcRoot, c.fifoDir]) await Deno.mkdir(d);
    await Deno.writeTextFile(`${dir}/${OWNER_FILE}`, `${Deno.pid} ${startTime(Deno.pid)}\n`);
    const cfg = containerdConfig(c, {
      ...(opts.debug !== undefined ? { debug: opts.debug } : {}),
      runtimes,
      ...(opts.cri ? { cri: opts.cri } : {}),
    });
    await Deno.writeTextFile(c.configPath, configText(cfg, opts.configToml));
    await c.start();
    if (opts.cri && opts.cri.sandboxImage === undefined) {
      try {
        await importPauseImage(c);
      } catch (e) {
        await c.stop();
        throw e;
      }
    }
    return c;
  } catch (e) {
    await removeTree(dir);
    throw e;
  }
}
