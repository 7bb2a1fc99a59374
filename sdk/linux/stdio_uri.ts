/**
 * Parsing of the stdio strings containerd puts in `CreateTaskRequest` and
 * `ExecProcessRequest` (`stdin`, `stdout`, `stderr`).
 *
 * @module
 */

/**
 * Where a process's output goes, decided by the scheme of `stdout` (empty scheme = FIFO).
 *
 * @example Usage
 * ```ts
 * import { deepStrictEqual } from "node:assert/strict";
 * import { type OutputTarget, parseOutputTarget } from "@skiff/shim/linux";
 * const target: OutputTarget = parseOutputTarget("fifo:///run/x/stdout", "/run/x/stderr");
 * deepStrictEqual(target, { kind: "fifo", stdout: "/run/x/stdout", stderr: "/run/x/stderr" });
 * ```
 */
export type OutputTarget =
  | { kind: "fifo"; stdout: string; stderr: string }
  | { kind: "file"; path: string }
  | { kind: "binary"; path: string; args: string[]; requireReady: boolean };

/**
 * Classifies `stdout`'s URI. Empty strings mean "no such stream"; for FIFOs the paths of
 * `stdout` and `stderr` are returned with any `fifo://` prefix removed.
 *
 * - `""`, `/path`, `fifo:///path`: FIFOs created by the client (or plain files, appended to)
 * - `file:///abs/path`: one file for stdout and stderr
 * - `binary:///path?k=v` / `binary-v2:///path?k=v`: a logging binary run as `path k v`
 *
 * @example Usage
 * ```ts
 * import { deepStrictEqual } from "node:assert/strict";
 * import { parseOutputTarget } from "@skiff/shim/linux";
 * deepStrictEqual(parseOutputTarget("binary:///usr/bin/log?tag=web", "binary:///usr/bin/log?tag=web"), {
 *   kind: "binary",
 *   path: "/usr/bin/log",
 *   args: ["tag", "web"],
 *   requireReady: false,
 * });
 * ```
 */
export function parseOutputTarget(stdout: string, stderr: string): OutputTarget {
  const scheme = /^([a-zA-Z][a-zA-Z0-9+.-]*):\/\//.exec(stdout)?.[1]?.toLowerCase();
  if (scheme === undefined || scheme === "fifo") {
    return { kind: "fifo", stdout: fifoPath(stdout), stderr: fifoPath(stderr) };
  }
  let url: URL;
  try {
    url = new URL(stdout);
  } catch (e) {
    throw new Error(`parse stdout URI "${stdout}": ${(e as Error).message}`);
  }
  const path = decodeURIComponent(url.pathname);
  switch (scheme) {
    case "file":
      if (!path.startsWith("/")) throw new Error(`stdout URI "${stdout}": path must be absolute`);
      return { kind: "file", path };
    case "binary":
    case "binary-v2": {
      if (!path.startsWith("/")) throw new Error(`stdout URI "${stdout}": path must be absolute`);
      const args: string[] = [];
      for (const [k, v] of url.searchParams) args.push(k, v);
      return { kind: "binary", path, args, requireReady: scheme === "binary-v2" };
    }
    default:
      throw new Error(`stdout URI "${stdout}": unsupported scheme "${scheme}"`);
  }
}

/**
 * The path of a stdin (or output) FIFO string: `fifo://` removed, empty when unused.
 *
 * @example Usage
 * ```ts
 * import assert from "node:assert/strict";
 * assert.equal(fifoPath("fifo:///run/x/stdin"), "/run/x/stdin");
 * assert.equal(fifoPath("/run/x/stdin"), "/run/x/stdin");
 * ```
 */
export function fifoPath(s: string): string {
  return s.startsWith("fifo://") ? decodeURIComponent(s.slice("fifo://".length)) : s;
}
