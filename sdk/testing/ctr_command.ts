/**
 * Running one `ctr` command of a private containerd: its environment, stdin, output and a
 * timeout that also stops `ctr run` (which forwards SIGTERM to the container instead of
 * exiting). {@linkcode PrivateContainerd.ctr} is the way tests call it.
 *
 * @module
 */

const dec = new TextDecoder();

/**
 * The namespace the testing kit works in unless told otherwise: `ctrRun`, `ShimHarness` and
 * `importBusyboxImage`.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { PrivateContainerd } from "@skiff/shim/testing";
 * import { ctrRunArgs } from "./ctr.ts";
 * import { DEFAULT_NAMESPACE } from "@skiff/shim/testing";
 * // The fields of a PrivateContainerd that ctrRunArgs reads (startContainerd makes a real one).
 * const c = {
 *   fifoDir: "/tmp/c/fifo",
 *   runcRoot: "/tmp/c/runc",
 *   cgroupParent: "skiff-c",
 *   runtimes: { "skiff-runc": { runtimeType: "io.containerd.skiff-runc.v2" } },
 * } as unknown as PrivateContainerd;
 * const args = ctrRunArgs(c, { image: "localhost/skiff/busybox:latest", id: "x" });
 * strictEqual(args[args.indexOf("--cgroup") + 1], `/skiff-c/${DEFAULT_NAMESPACE}/x`);
 * ```
 */
export const DEFAULT_NAMESPACE: string = "skiff-test";

/**
 * Options of {@linkcode PrivateContainerd.ctr}.
 *
 * @example Usage
 * ```ts ignore
 * await c.ctr(["tasks", "ls"], { namespace: "test", timeoutMs: 10_000 });
 * ```
 */
export interface CtrOptions {
  /** containerd namespace (`ctr -n`). Default: ctr's own default. */
  namespace?: string;
  /** Data written to ctr's stdin (stdin is /dev/null otherwise). */
  stdin?: string | Uint8Array;
  /** Kill ctr after this long. Default 120000. */
  timeoutMs?: number;
  /** Extra environment for ctr. */
  env?: Record<string, string>;
}

/**
 * What a ctr invocation did.
 *
 * @example Usage
 * ```ts ignore
 * const { code, stdout }: CtrResult = await c.ctr(["version"]);
 * ```
 */
export interface CtrResult {
  /** Exit code (for `ctr run --rm`, the container's exit status). */
  code: number;
  /** Standard output. */
  stdout: string;
  /** Standard error. */
  stderr: string;
  /** True when ctr was killed because it exceeded `timeoutMs`. */
  timedOut: boolean;
}

/**
 * The environment every ctr of a private containerd runs with: `CONTAINERD_SNAPSHOTTER`, and
 * `CONTAINERD_SUPPRESS_DEPRECATION_WARNINGS=1`: ctr 2.2+ otherwise asks the daemon for
 * deprecations on every call and prints each as a warning on stderr (on a cgroup v1 host always
 * one, "The support for cgroup v1 is deprecated"), which output assertions would read as the
 * container's.
 *
 * @param snapshotter the instance's snapshotter
 * @returns the variables
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { ctrEnv } from "./ctr_command.ts";
 * strictEqual(ctrEnv("native").CONTAINERD_SUPPRESS_DEPRECATION_WARNINGS, "1");
 * ```
 */
export function ctrEnv(snapshotter: string): Record<string, string> {
  return {
    CONTAINERD_SNAPSHOTTER: snapshotter,
    CONTAINERD_SUPPRESS_DEPRECATION_WARNINGS: "1",
  };
}

/**
 * Runs `<ctr> -a <address> [-n ns] ...args` with `env` (plus `opts.env`), and kills it after
 * `opts.timeoutMs`: SIGTERM, then SIGKILL 5 s later.
 *
 * @param ctr path of the ctr binary
 * @param address the containerd's gRPC socket
 * @param env ctr's environment (see {@linkcode ctrEnv})
 * @param args ctr arguments after the global flags
 * @param opts namespace, stdin, timeout, extra environment
 * @returns exit code and output
 *
 * @example Usage
 * ```ts ignore
 * const r = await runCtr(`${binDir}/ctr`, address, ctrEnv("native"), ["version"]);
 * ```
 */
export async function runCtr(
  ctr: string,
  address: string,
  env: Record<string, string>,
  args: string[],
  opts: CtrOptions = {},
): Promise<CtrResult> {
  const global = ["-a", address];
  if (opts.namespace) global.push("-n", opts.namespace);
  let timedOut = false;
  let kill: ReturnType<typeof setTimeout> | undefined;
  const child = new Deno.Command(ctr, {
    args: [...global, ...args],
    env: { ...env, ...opts.env },
    stdin: opts.stdin === undefined ? "null" : "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  // `ctr run` forwards SIGTERM to the container instead of exiting: follow up with SIGKILL.
  const timer = setTimeout(() => {
    timedOut = true;
    try {
      child.kill("SIGTERM");
    } catch { /* gone */ }
    kill = setTimeout(() => {
      try {
        child.kill("SIGKILL");
      } catch { /* gone */ }
    }, 5_000);
  }, opts.timeoutMs ?? 120_000);
  try {
    if (opts.stdin !== undefined) {
      const w = child.stdin.getWriter();
      await w.write(
        typeof opts.stdin === "string" ? new TextEncoder().encode(opts.stdin) : opts.stdin,
      ).catch(() => undefined);
      await w.close().catch(() => undefined);
    }
    const out = await child.output();
    return {
      code: out.code,
      stdout: dec.decode(out.stdout),
      stderr: dec.decode(out.stderr),
      timedOut,
    };
  } finally {
    clearTimeout(timer);
    clearTimeout(kill);
  }
}
