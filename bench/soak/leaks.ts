/**
 * What a namespace of a private containerd left behind: shim processes, mounts, bundle dirs,
 * shim sockets and ctr's FIFOs. After every task of the namespace was deleted (but those the
 * bed keeps on purpose, `Bed.keep`), all lists must be empty.
 *
 * @example Usage
 * ```ts ignore
 * const l = await leaks(bed, ["c1", "c2"]);
 * console.log(leakCount(l));
 * ```
 *
 * @module
 */

import type { Bed } from "./bed.ts";
import { shimsIn } from "./procs.ts";

/** Leftovers of one namespace. */
export interface Leaks {
  /** Shim processes still serving one of the given ids (`pid id`). */
  shims: string[];
  /** Mount points under the namespace's bundle dirs. */
  mounts: string[];
  /** Bundle dirs left in containerd's task state. */
  bundles: string[];
  /** Shim sockets of the given ids left in /run/containerd/s. */
  sockets: string[];
  /** Entries (FIFOs) left in ctr's private FIFO dir. */
  fifos: string[];
}

async function sha256Hex(text: string): Promise<string> {
  const h = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)));
  return Array.from(h, (b) => b.toString(16).padStart(2, "0")).join("");
}

function list(dir: string): string[] {
  try {
    return [...Deno.readDirSync(dir)].map((e) => `${dir}/${e.name}`);
  } catch {
    return [];
  }
}

/**
 * Lists what the namespace left behind.
 *
 * @param bed the bed
 * @param ids container ids whose shims and shim sockets must be gone
 * @returns the leftovers, by kind
 */
export async function leaks(bed: Bed, ids: Iterable<string>): Promise<Leaks> {
  const wanted = new Set(ids);
  // A container kept on purpose (shared mode's neighbours): its bundle and mounts are not leaks.
  const kept = (rel: string) => bed.keep.has(rel.split("/")[0]!);
  const bundleRoot = `${bed.c.state}/io.containerd.runtime.v2.task/${bed.ns}`;
  const sockets: string[] = [];
  for (const id of wanted) {
    const path = `/run/containerd/s/${await sha256Hex(`${bed.c.address}/${bed.ns}/${id}`)}`;
    for (const p of [path, `${path}.ops`]) {
      if (await Deno.lstat(p).then(() => true, () => false)) sockets.push(`${p} (${id})`);
    }
  }
  const fifos: string[] = [];
  const walk = (d: string) => {
    for (const p of list(d)) {
      if (Deno.lstatSync(p).isDirectory) walk(p);
      else fifos.push(p);
    }
  };
  walk(bed.c.fifoDir);
  return {
    shims: shimsIn(bed.c, bed.ns).filter((s) => wanted.has(s.id)).map((s) => `${s.pid} ${s.id}`),
    mounts: (await bed.c.mounts()).filter((m) =>
      m.startsWith(`${bundleRoot}/`) && !kept(m.slice(bundleRoot.length + 1))
    ),
    bundles: list(bundleRoot).filter((b) => !kept(b.slice(bundleRoot.length + 1))),
    sockets,
    fifos,
  };
}

/**
 * Total number of leftovers.
 *
 * @param l what {@linkcode leaks} returned
 * @returns the sum over all kinds
 */
export function leakCount(l: Leaks): number {
  return l.shims.length + l.mounts.length + l.bundles.length + l.sockets.length + l.fifos.length;
}
