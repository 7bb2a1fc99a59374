/**
 * A process's memory from `/proc/<pid>/smaps_rollup`: PSS (each shared page split among the
 * processes that map it: what a process costs the node), USS (its private pages: what its exit
 * frees) and RSS (every resident page it maps, shared ones in full).
 *
 * @module
 */

/** Memory of one process, in bytes. */
export interface ProcessMemory {
  /** Proportional set size. */
  pss: number;
  /** Unique set size (`Private_Clean` + `Private_Dirty`). */
  uss: number;
  /** Resident set size. */
  rss: number;
}

/**
 * Parses the text of an `smaps_rollup` file (missing fields count 0).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { parseSmapsRollup } from "./smaps.ts";
 * const m = parseSmapsRollup("Rss: 8 kB\nPss: 4 kB\nPrivate_Clean: 1 kB\nPrivate_Dirty: 2 kB\n");
 * strictEqual(m.pss, 4096);
 * strictEqual(m.uss, 3072);
 * strictEqual(m.rss, 8192);
 * ```
 */
export function parseSmapsRollup(text: string): ProcessMemory {
  const kb = (name: string) =>
    Number(new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(text)?.[1] ?? 0) * 1024;
  return { pss: kb("Pss"), uss: kb("Private_Clean") + kb("Private_Dirty"), rss: kb("Rss") };
}

/**
 * The memory of process `pid` (default: this one); zeros where `/proc` cannot tell (the process
 * is gone, or this is no Linux).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { processMemory } from "./smaps.ts";
 * const m = processMemory(); // one reading: two could see the heap move in between
 * strictEqual(m.rss >= m.uss, true);
 * ```
 */
export function processMemory(pid: number | "self" = "self"): ProcessMemory {
  try {
    return parseSmapsRollup(Deno.readTextFileSync(`/proc/${pid}/smaps_rollup`));
  } catch {
    return { pss: 0, uss: 0, rss: 0 };
  }
}
