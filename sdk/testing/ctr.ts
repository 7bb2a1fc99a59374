/**
 * `ctr run` for tests against a {@linkcode PrivateContainerd}: private FIFO and runc dirs,
 * runtime names from `startContainerd({ runtimes })`, and a real terminal through `script`
 * when `tty` is set (ctr refuses `-t` without one).
 *
 * @example Usage
 * ```ts ignore
 * import { ctrRun, startContainerd } from "@skiff/shim/testing";
 *
 * const c = await startContainerd({ binDir: "/usr/bin" });
 * const ref = await c.importBusyboxImage("test");
 * const r = await ctrRun(c, { image: ref, id: "hello", args: ["echo", "hello"] });
 * console.log(r.code, r.stdout);
 * await c.stop();
 * ```
 *
 * @module
 */

import { type CtrResult, DEFAULT_NAMESPACE } from "./ctr_command.ts";

export { DEFAULT_NAMESPACE } from "./ctr_command.ts";
import type { PrivateContainerd } from "./private_containerd.ts";

/**
 * The Go runc shim's runtime type.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { PrivateContainerd } from "@skiff/shim/testing";
 * import { ctrRunArgs, RUNC_RUNTIME } from "./ctr.ts";
 * // The fields of a PrivateContainerd that ctrRunArgs reads (startContainerd makes a real one).
 * const c = {
 *   fifoDir: "/tmp/c/fifo",
 *   runcRoot: "/tmp/c/runc",
 *   cgroupParent: "skiff-c",
 *   runtimes: { "skiff-runc": { runtimeType: "io.containerd.skiff-runc.v2" } },
 * } as unknown as PrivateContainerd;
 * // ctrRun(c, { image: ref, id: "x", runtime: RUNC_RUNTIME }) runs:
 * const args = ctrRunArgs(c, { image: "localhost/skiff/busybox:latest", id: "x", runtime: RUNC_RUNTIME });
 * strictEqual(args.includes("--runc-root"), true); // the Go shim gets a private runc root
 * ```
 */
export const RUNC_RUNTIME: string = "io.containerd.runc.v2";

/**
 * Options of {@linkcode ctrRun}.
 *
 * @example Usage
 * ```ts
 * import { deepStrictEqual } from "node:assert/strict";
 * import type { PrivateContainerd } from "@skiff/shim/testing";
 * import { ctrRunArgs, type CtrRunOptions } from "./ctr.ts";
 * // The fields of a PrivateContainerd that ctrRunArgs reads (startContainerd makes a real one).
 * const c = {
 *   fifoDir: "/tmp/c/fifo",
 *   runcRoot: "/tmp/c/runc",
 *   cgroupParent: "skiff-c",
 *   runtimes: { "skiff-runc": { runtimeType: "io.containerd.skiff-runc.v2" } },
 * } as unknown as PrivateContainerd;
 * const ref = "localhost/skiff/busybox:latest";
 * const o: CtrRunOptions = { image: ref, id: "t", tty: true, args: ["sh", "-c", "tty"] };
 * deepStrictEqual(ctrRunArgs(c, o).slice(-6), ["-t", ref, "t", "sh", "-c", "tty"]);
 * ```
 */
export interface CtrRunOptions {
  /** Image reference (imported beforehand, e.g. with `importBusyboxImage`). */
  image: string;
  /** Container id. */
  id: string;
  /** Command and arguments; the image's Cmd when empty. */
  args?: string[];
  /** Namespace. Default {@linkcode DEFAULT_NAMESPACE}. */
  namespace?: string;
  /** A key of `startContainerd({ runtimes })`, or a runtime type / absolute shim path. Default runc v2. */
  runtime?: string;
  /** Allocate a TTY (run under `script` so ctr has a terminal). */
  tty?: boolean;
  /** `--log-uri` (e.g. `file:///tmp/x.log`, `binary:///path`). */
  logUri?: string;
  /** Start and return at once (`-d`); otherwise wait for the exit. */
  detach?: boolean;
  /** Remove the container after it exits (`--rm`). Default true unless `detach`. */
  rm?: boolean;
  /** Extra `KEY=VALUE` environment for the container. */
  env?: string[];
  /** `--runtime-config-path` (ctr sends it as `runtimeoptions.v1.Options.config_path`). */
  runtimeConfigPath?: string;
  /** cgroup path (`--cgroup`). Default `/<c.cgroupParent>/<namespace>/<id>`; `""` for none. */
  cgroup?: string;
  /** Extra ctr run flags, placed before the image. */
  flags?: string[];
  /** Data written to the container's stdin. */
  stdin?: string | Uint8Array;
  /** Kill ctr after this long. Default 120000. */
  timeoutMs?: number;
}

/**
 * Quotes a string for a POSIX shell.
 *
 * @param s any string
 * @returns `s` in single quotes, with embedded quotes escaped
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { shellQuote } from "./ctr.ts";
 * strictEqual(shellQuote("it's"), `'it'\\''s'`);
 * ```
 */
export function shellQuote(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`;
}

/**
 * Builds the `ctr run` argument list (without ctr's global flags) for {@linkcode ctrRun}.
 *
 * @param c the containerd the container runs on
 * @param o what to run
 * @returns arguments for `PrivateContainerd.ctr`
 *
 * @example Usage
 * ```ts
 * import { deepStrictEqual } from "node:assert/strict";
 * import type { PrivateContainerd } from "@skiff/shim/testing";
 * import { ctrRunArgs } from "./ctr.ts";
 * // The fields of a PrivateContainerd that ctrRunArgs reads (startContainerd makes a real one).
 * const c = {
 *   fifoDir: "/tmp/c/fifo",
 *   runcRoot: "/tmp/c/runc",
 *   cgroupParent: "skiff-c",
 *   runtimes: { "skiff-runc": { runtimeType: "io.containerd.skiff-runc.v2" } },
 * } as unknown as PrivateContainerd;
 * const args = ctrRunArgs(c, { image: "bb", id: "x", runtime: "skiff-runc", args: ["true"] });
 * deepStrictEqual(args, [
 *   "run", "--fifo-dir", "/tmp/c/fifo", "--runtime", "io.containerd.skiff-runc.v2",
 *   "--cgroup", "/skiff-c/skiff-test/x", "--rm", "bb", "x", "true",
 * ]);
 * ```
 */
export function ctrRunArgs(c: PrivateContainerd, o: CtrRunOptions): string[] {
  const runtime = c.runtimes[o.runtime ?? ""]?.runtimeType ?? o.runtime ?? RUNC_RUNTIME;
  const args = ["run", "--fifo-dir", c.fifoDir, "--runtime", runtime];
  // The Go runc shim would otherwise share /run/containerd/runc with every other containerd.
  if (runtime === RUNC_RUNTIME) args.push("--runc-root", c.runcRoot);
  const ns = o.namespace ?? DEFAULT_NAMESPACE;
  args.push("--cgroup", o.cgroup ?? `/${c.cgroupParent}/${ns}/${o.id}`);
  if (o.rm ?? !o.detach) args.push("--rm");
  if (o.detach) args.push("-d");
  if (o.tty) args.push("-t");
  if (o.logUri) args.push("--log-uri", o.logUri);
  if (o.runtimeConfigPath) args.push("--runtime-config-path", o.runtimeConfigPath);
  for (const e of o.env ?? []) args.push("--env", e);
  args.push(...(o.flags ?? []), o.image, o.id, ...(o.args ?? []));
  return args;
}

/**
 * Runs a container with `ctr run` on a private containerd and waits for it (or, with
 * `detach`, for its start). With `tty`, ctr runs under `script -qec`, whose exit status is
 * the container's; the output then has terminal line endings (`\r\n`).
 *
 * @param c the private containerd
 * @param o image, id, command and run options
 * @returns ctr's exit code (the container's exit status unless detached) and output
 *
 * @example Usage
 * ```ts ignore
 * const r = await ctrRun(c, { image: ref, id: "exit3", args: ["sh", "-c", "exit 3"] });
 * console.log(r.code); // 3
 * ```
 */
export function ctrRun(c: PrivateContainerd, o: CtrRunOptions): Promise<CtrResult> {
  const namespace = o.namespace ?? DEFAULT_NAMESPACE;
  const args = ctrRunArgs(c, o);
  const ctrOpts = {
    namespace,
    ...(o.stdin !== undefined ? { stdin: o.stdin } : {}),
    ...(o.timeoutMs !== undefined ? { timeoutMs: o.timeoutMs } : {}),
  };
  if (!o.tty) return c.ctr(args, ctrOpts);
  const argv = [`${c.binDir}/ctr`, "-a", c.address, "-n", namespace, ...args];
  return runUnderScript(argv, c.ctrEnv, ctrOpts);
}

async function runUnderScript(
  argv: string[],
  env: Record<string, string>,
  o: { stdin?: string | Uint8Array; timeoutMs?: number },
): Promise<CtrResult> {
  const ac = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    ac.abort();
  }, o.timeoutMs ?? 120_000);
  try {
    const child = new Deno.Command("script", {
      args: ["-q", "-e", "-c", argv.map(shellQuote).join(" "), "/dev/null"],
      env,
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
      signal: ac.signal,
    }).spawn();
    const w = child.stdin.getWriter();
    if (o.stdin !== undefined) {
      await w.write(typeof o.stdin === "string" ? new TextEncoder().encode(o.stdin) : o.stdin)
        .catch(() => undefined);
    }
    // script copies its stdin to the terminal; keeping it open avoids an early hangup.
    const out = child.output();
    const result = await out;
    await w.close().catch(() => undefined);
    const dec = new TextDecoder();
    return {
      code: result.code,
      stdout: dec.decode(result.stdout),
      stderr: dec.decode(result.stderr),
      timedOut,
    };
  } finally {
    clearTimeout(timer);
  }
}
