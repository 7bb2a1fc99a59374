/**
 * The node-wide counters of one launcher under one containerd: how many starts handed their
 * container to a warm spare, how many went cold. The servers keep them themselves, off
 * `start`'s path: an adopted spare counts itself after answering, a cold server once it listens.
 *
 * @module
 */

import { loadSpareConfig, spareConfig } from "./config.ts";

/** Node-wide counters of one launcher under one containerd. */
export interface SpareStats {
  /** Starts that handed their container to a warm spare. */
  adopted: number;
  /** Starts that spawned a server and waited for it. */
  cold: number;
}

/**
 * Counts one start (under the file's lock: parallel starts lose no count).
 *
 * @example Usage
 * ```ts
 * import { deepStrictEqual } from "node:assert/strict";
 * import { readSpareStatsSync, recordStart } from "./stats.ts";
 * const path = Deno.makeTempFileSync({ suffix: ".json" });
 * await Promise.all([recordStart(path, "spare"), recordStart(path, "spare"), recordStart(path, "cold")]);
 * deepStrictEqual(readSpareStatsSync(path), { adopted: 2, cold: 1 });
 * Deno.removeSync(path);
 * ```
 */
export async function recordStart(path: string, origin: "spare" | "cold"): Promise<void> {
  const file = await Deno.open(path, { read: true, write: true, create: true, mode: 0o600 });
  try {
    await file.lock(true);
    const buf = new Uint8Array(4096);
    let len = 0;
    for (let n; len < buf.length && (n = await file.read(buf.subarray(len))) !== null;) len += n;
    const text = new TextDecoder().decode(buf.subarray(0, len)).trim();
    const stats = parseSpareStats(text); // a torn or foreign file restarts the count
    if (origin === "spare") stats.adopted++;
    else stats.cold++;
    const next = new TextEncoder().encode(JSON.stringify(stats) + "\n");
    await file.truncate(0);
    await file.seek(0, Deno.SeekMode.Start);
    for (let off = 0; off < next.length;) off += await file.write(next.subarray(off));
  } finally {
    file.close();
  }
}

/**
 * Reads a counters file synchronously (the operations endpoint reads it at scrape time); a
 * missing or unreadable one counts nothing.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { readSpareStatsSync } from "./stats.ts";
 * strictEqual(readSpareStatsSync("/nonexistent/stats.json").adopted, 0);
 * ```
 */
export function readSpareStatsSync(path: string): SpareStats {
  try {
    return parseSpareStats(Deno.readTextFileSync(path));
  } catch {
    return { adopted: 0, cold: 0 };
  }
}

/** A counters file's text as counts; anything unreadable counts nothing. */
function parseSpareStats(text: string): SpareStats {
  try {
    const v = JSON.parse(text || "{}") as Partial<SpareStats>;
    return { adopted: Number(v.adopted) || 0, cold: Number(v.cold) || 0 };
  } catch {
    return { adopted: 0, cold: 0 };
  }
}

/**
 * The counters file of the server serving `socket` for containerd at `address`, or undefined
 * when spares are off for it (then nothing is counted).
 *
 * @param address containerd's address
 * @param socket the socket the server serves (its directory holds the spares' directory)
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { spareStatsPath } from "./stats.ts";
 * // A shim run by hand (no launcher in its environment) keeps no counters.
 * strictEqual(spareStatsPath("/run/containerd/containerd.sock", "/run/containerd/s/x", new Map()), undefined);
 * ```
 */
export function spareStatsPath(
  address: string,
  socket: string,
  env: { get(key: string): string | undefined } = Deno.env,
): string | undefined {
  return spareConfig(address, socket.slice(0, socket.lastIndexOf("/")) || "/", env)?.stats;
}

/**
 * Counts a server's start in its launcher's counters file: a cold server calls it once it
 * listens, an adopted spare once it has answered its `start`.
 *
 * @param stats the counters file ({@linkcode spareStatsPath})
 * @param origin how the server came to run
 * @example Usage
 * ```ts
 * import { deepStrictEqual } from "node:assert/strict";
 * import { countServerStart, readSpareStatsSync } from "./stats.ts";
 * const dir = Deno.makeTempDirSync();
 * const stats = `${dir}/skiff-0123456789ab/stats.json`; // its directory is made when missing
 * await countServerStart(stats, "cold");
 * deepStrictEqual(readSpareStatsSync(stats), { adopted: 0, cold: 1 });
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export async function countServerStart(stats: string, origin: "spare" | "cold"): Promise<void> {
  await Deno.mkdir(stats.slice(0, stats.lastIndexOf("/")), { recursive: true, mode: 0o700 });
  await recordStart(stats, origin);
}

/**
 * The counters file of a server that serves `socket` for containerd at `address`, or undefined
 * when spares are off or no containerd socket exists (a server run by hand or by a test harness
 * leaves no counters behind). Uses {@linkcode loadSpareConfig}: no TypeScript hashing.
 *
 * @param address containerd's address
 * @param socket the socket the server serves (its directory holds the spares' directory)
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { serverSpareStats } from "./stats.ts";
 * // No containerd listens at this address: a server run by hand counts nothing.
 * strictEqual(await serverSpareStats("/nonexistent/containerd.sock", "/run/containerd/s/x"), undefined);
 * ```
 */
export async function serverSpareStats(
  address: string,
  socket: string,
): Promise<string | undefined> {
  try {
    Deno.statSync(address.replace(/^unix:\/\//, ""));
  } catch {
    return undefined; // no containerd socket
  }
  return (await loadSpareConfig(address, socket.slice(0, socket.lastIndexOf("/")) || "/"))?.stats;
}
