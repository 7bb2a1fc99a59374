/**
 * Finding the shim processes a private containerd started, from the process table and its
 * bundles, even after containerd itself is gone: what {@linkcode PrivateContainerd.shims} and
 * {@linkcode PrivateContainerd.spares} list and what its teardown kills.
 *
 * @module
 */

import { processesWithArg } from "./processes.ts";

/**
 * A process and its argv.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { ShimProcess } from "./containerd_shims.ts";
 * const s: ShimProcess = { pid: 42, argv: ["containerd-shim-runc-v2", "-namespace", "test"] };
 * strictEqual(s.argv[s.argv.indexOf("-namespace") + 1], "test");
 * ```
 */
export interface ShimProcess {
  /** The process id. */
  pid: number;
  /** Its command line. */
  argv: string[];
}

/** What a bundle says about the server that serves it. */
interface ServedBundle {
  ns: string;
  id: string;
  socket: string;
}

/**
 * Processes whose argv has `-address <address>` (what containerd passes every shim), the
 * process `exclude` (containerd itself) left out.
 *
 * @param address the containerd's gRPC socket
 * @param exclude a pid never to list
 * @returns pids and argv, cold servers and warm spares alike
 *
 * @example Usage
 * ```ts
 * import { deepStrictEqual } from "node:assert/strict";
 * import { launchedBy } from "./containerd_shims.ts";
 * deepStrictEqual(launchedBy("/tmp/no-such-containerd.sock"), []);
 * ```
 */
export function launchedBy(address: string, exclude?: number): ShimProcess[] {
  return processesWithArg(address).filter((p) => {
    const i = p.argv.indexOf(address);
    return p.pid !== exclude && i > 0 && p.argv[i - 1] === "-address";
  });
}

/** Bundles whose `shim.pid` (written by `start`) names a server: pid → what it serves. */
function bundlesByShimPid(state: string): Map<number, ServedBundle> {
  const out = new Map<number, ServedBundle>();
  const top = `${state}/io.containerd.runtime.v2.task`;
  let namespaces: string[] = [];
  try {
    namespaces = [...Deno.readDirSync(top)].filter((e) => e.isDirectory).map((e) => e.name);
  } catch {
    return out;
  }
  for (const ns of namespaces) {
    let ids: string[] = [];
    try {
      ids = [...Deno.readDirSync(`${top}/${ns}`)].map((e) => e.name);
    } catch {
      continue;
    }
    for (const id of ids) {
      try {
        const pid = Number(Deno.readTextFileSync(`${top}/${ns}/${id}/shim.pid`).trim());
        const address = Deno.readTextFileSync(`${top}/${ns}/${id}/address`).trim();
        if (pid > 0) out.set(pid, { ns, id, socket: address.replace(/^unix:\/\//, "") });
      } catch { /* no server started for this bundle, or it is being removed */ }
    }
  }
  return out;
}

/**
 * The shims among `launched`: cold servers as they are, and skiff warm spares that a `start`
 * adopted with the argv a cold server of that `start` would have had (`-namespace`, `-id`,
 * `-socket`, from the bundle under `state` whose `shim.pid` names it). Spares still waiting are
 * left out.
 *
 * @param address the containerd's gRPC socket
 * @param state the containerd's state dir
 * @param launched what {@linkcode launchedBy} found
 * @returns pids and argv
 *
 * @example Usage
 * ```ts
 * import { deepStrictEqual } from "node:assert/strict";
 * import { shimsAmong } from "./containerd_shims.ts";
 * const cold = { pid: 7, argv: ["containerd-shim-runc-v2", "-namespace", "t", "-id", "a"] };
 * const waiting = { pid: 8, argv: ["containerd-shim-skiff-runc-v2", "-spare"] };
 * deepStrictEqual(shimsAmong("/tmp/c.sock", "/tmp/no-state", [cold, waiting]), [cold]);
 * ```
 */
export function shimsAmong(
  address: string,
  state: string,
  launched: ShimProcess[],
): ShimProcess[] {
  const out: ShimProcess[] = [];
  let served: Map<number, ServedBundle> | undefined;
  for (const p of launched) {
    const spare = p.argv.indexOf("-spare");
    if (spare === -1) {
      out.push(p);
      continue;
    }
    served ??= bundlesByShimPid(state);
    const b = served.get(p.pid);
    if (!b) continue; // still waiting to be adopted
    const publish = p.argv.indexOf("-publish-binary");
    out.push({
      pid: p.pid,
      argv: [
        ...p.argv.slice(0, spare),
        ...["-namespace", b.ns, "-id", b.id, "-address", address],
        ...["-publish-binary", publish === -1 ? "" : p.argv[publish + 1], "-socket", b.socket],
      ],
    });
  }
  return out;
}

/**
 * The skiff warm spares among `launched` that wait to be adopted (argv has `-spare`, and no
 * bundle under `state` names them in its `shim.pid`).
 *
 * @param state the containerd's state dir
 * @param launched what {@linkcode launchedBy} found
 * @returns pids and argv
 *
 * @example Usage
 * ```ts
 * import { deepStrictEqual } from "node:assert/strict";
 * import { sparesAmong } from "./containerd_shims.ts";
 * const waiting = { pid: 8, argv: ["containerd-shim-skiff-runc-v2", "-spare"] };
 * deepStrictEqual(sparesAmong("/tmp/no-state", [waiting]), [waiting]);
 * ```
 */
export function sparesAmong(state: string, launched: ShimProcess[]): ShimProcess[] {
  const adopted = bundlesByShimPid(state);
  return launched.filter((p) => p.argv.includes("-spare") && !adopted.has(p.pid));
}
