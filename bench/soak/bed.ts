/**
 * The test bed the pid-reuse test and the soak share: a private containerd of one version that
 * knows skiff's runc example shim and containerd's Go runc shim, the busybox image imported in
 * a private namespace, and a typed client bound to it.
 *
 * @example Usage
 * ```ts ignore
 * const bed = await startBed("/usr/bin");
 * try {
 *   for (const shim of bed.shims) await bed.runDetached(shim, `long-${shim.label}`);
 * } finally {
 *   await bed.stop();
 * }
 * ```
 *
 * @module
 */

import {
  type CtrResult,
  type PrivateContainerd,
  startContainerd,
} from "../../sdk/testing/containerd.ts";
import { type ContainerdClient, containerdClient } from "../../sdk/testing/containerd_client.ts";
import { ctrRun, RUNC_RUNTIME } from "../../sdk/testing/ctr.ts";
import { installExampleShims } from "../../sdk/install/examples.ts";
import { removeTree } from "../../sdk/testing/bundle.ts";

/** The skiff runc example shim's runtime type. */
export const SKIFF_RUNTIME = "io.containerd.skiff-runc.v2";
const LAUNCHER = "containerd-shim-skiff-runc-v2";

/** One shim the bed runs scenarios against. */
export interface ShimUnderTest {
  /** `skiff-runc` or `go-runc`, as printed in tables. */
  label: string;
  /** The `runtime` given to `ctrRun`. */
  runtime: string;
  /** `--runtime-config-path` for ctr (skiff's runc options: a private runc root). */
  runtimeConfigPath?: string;
}

/** A private containerd with both shims, an image and a client. */
export interface Bed {
  /** The private containerd. */
  c: PrivateContainerd;
  /** The namespace everything runs in. */
  ns: string;
  /** The imported image reference. */
  image: string;
  /** skiff's runc shim first, then the Go runc shim. */
  shims: ShimUnderTest[];
  /** skiff's `SKIFF_SHARED_PODS` (`startBed`'s `sharedPods`); undefined: one pod per server. */
  sharedPods?: number;
  /**
   * Containers of {@linkcode Bed.ns} that outlive a phase on purpose (shared mode's neighbour
   * pods): the leak checks (./leaks.ts) do not count their bundles and mounts.
   */
  keep: Set<string>;
  /** A typed client bound to {@linkcode Bed.ns}; replaced by {@linkcode Bed.reconnect}. */
  client: ContainerdClient;
  /** A new client (after a containerd restart). */
  reconnect(): ContainerdClient;
  /** `ctr run -d <image> <id> ...args` with `shim` (default args: a long sleep). */
  runDetached(shim: ShimUnderTest, id: string, args?: string[]): Promise<CtrResult>;
  /** `ctr run --rm <image> <id> ...args` with `shim`, waiting for the exit. */
  runToExit(shim: ShimUnderTest, id: string, args: string[]): Promise<CtrResult>;
  /** Runs ctr in the bed's namespace. */
  ctr(args: string[], timeoutMs?: number): Promise<CtrResult>;
  /** Tears everything down (containerd, shims, containers, launchers). */
  stop(): Promise<void>;
}

/**
 * Starts a bed on the containerd in `binDir`.
 *
 * @param binDir directory with `containerd`, `ctr` and Debian's `containerd-shim-runc-v2`
 * @param opts `only`: run against skiff's shim alone; `env`: extra environment for containerd
 *   and its shims; `debug`: containerd (and so its shims) at debug level; `sharedPods`: skiff's
 *   runc installed with shared servers (`SKIFF_SHARED_PODS`, up to that many pods per process)
 * @returns the running bed; call `stop()` in a `finally`
 */
export async function startBed(
  binDir: string,
  opts: {
    only?: "skiff";
    env?: Record<string, string>;
    debug?: boolean;
    sharedPods?: number;
  } = {},
): Promise<Bed> {
  const prefix = await Deno.makeTempDir({ prefix: "skiff-soak-" });
  let c: PrivateContainerd | undefined;
  try {
    await installExampleShims({
      prefix,
      shims: { [LAUNCHER]: "examples/runc/main.ts" },
      ...(opts.sharedPods !== undefined ? { sharedPods: opts.sharedPods } : {}),
    });
    c = await startContainerd({
      binDir,
      runtimes: { skiff: { runtimeType: SKIFF_RUNTIME, binaryDir: `${prefix}/bin` } },
      ...(opts.env ? { env: opts.env } : {}),
      ...(opts.debug ? { debug: true } : {}),
    });
    const pc = c;
    const ns = `soak-${crypto.randomUUID().slice(0, 8)}`;
    // skiff's runc keeps its state in the private runc root, so stop() cleans it up.
    const runtimeConfigPath = `${prefix}/runc.toml`;
    await Deno.writeTextFile(runtimeConfigPath, `Root = "${pc.runcRoot}"\n`);
    const shims: ShimUnderTest[] = [{ label: "skiff-runc", runtime: "skiff", runtimeConfigPath }];
    if (opts.only !== "skiff") shims.push({ label: "go-runc", runtime: RUNC_RUNTIME });
    const image = await pc.importBusyboxImage(ns);
    const bed: Bed = {
      c: pc,
      ns,
      image,
      shims,
      ...(opts.sharedPods !== undefined ? { sharedPods: opts.sharedPods } : {}),
      keep: new Set(),
      client: containerdClient(pc.address, ns),
      reconnect() {
        bed.client = containerdClient(pc.address, ns);
        return bed.client;
      },
      runDetached: (shim, id, args = ["sleep", "1000000"]) =>
        ctrRun(pc, {
          image,
          id,
          namespace: ns,
          runtime: shim.runtime,
          detach: true,
          // No FIFOs: ctr -d exits at once and would leave its client-side FIFOs behind.
          flags: ["--null-io"],
          args,
          ...(shim.runtimeConfigPath ? { runtimeConfigPath: shim.runtimeConfigPath } : {}),
          timeoutMs: 60_000,
        }),
      runToExit: (shim, id, args) =>
        ctrRun(pc, {
          image,
          id,
          namespace: ns,
          runtime: shim.runtime,
          args,
          ...(shim.runtimeConfigPath ? { runtimeConfigPath: shim.runtimeConfigPath } : {}),
          timeoutMs: 60_000,
        }),
      ctr: (args, timeoutMs = 60_000) => pc.ctr(args, { namespace: ns, timeoutMs }),
      async stop() {
        await pc.stop();
        await removeTree(prefix);
      },
    };
    return bed;
  } catch (e) {
    await c?.stop();
    await removeTree(prefix);
    throw e;
  }
}
