/**
 * The pid file an OCI runtime writes (`--pid-file`): read with retries, because the file can
 * appear (or be completed) slightly after the runtime command returns.
 *
 * @module
 */

/**
 * Options of {@link readPidFile}.
 *
 * @example Usage
 * ```ts
 * import type { ReadPidFileOptions } from "@skiff/shim/linux";
 * const opts: ReadPidFileOptions = { attempts: 50, intervalMs: 20 };
 * ```
 */
export interface ReadPidFileOptions {
  /** How many reads to try before giving up. Defaults to 40. */
  attempts?: number;
  /** Pause between reads in milliseconds. Defaults to 25. */
  intervalMs?: number;
}

/**
 * Reads a pid file written by the runtime. The file can appear (or be completed) slightly after
 * the runtime command returns, so a missing, empty or partial file is re-read a few times.
 *
 * @param path The pid file.
 * @param options Retry policy.
 * @returns The pid (a positive integer).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { readPidFile } from "@skiff/shim/linux";
 * const path = Deno.makeTempFileSync({ suffix: ".pid" });
 * Deno.writeTextFileSync(path, "4242"); // runc writes no newline
 * strictEqual(await readPidFile(path), 4242);
 * Deno.removeSync(path);
 * ```
 */
export async function readPidFile(path: string, options: ReadPidFileOptions = {}): Promise<number> {
  const attempts = Math.max(1, options.attempts ?? 40);
  const intervalMs = options.intervalMs ?? 25;
  let last = "";
  for (let i = 0; i < attempts; i++) {
    try {
      const text = (await Deno.readTextFile(path)).trim();
      if (/^[0-9]+$/.test(text) && Number(text) > 0) return Number(text);
      last = `content ${JSON.stringify(text)}`;
    } catch (e) {
      if (!(e instanceof Deno.errors.NotFound)) throw e;
      last = "no such file";
    }
    if (i + 1 < attempts) await new Promise((r) => setTimeout(r, intervalMs));
  }
  throw new Error(`Cannot read pid file "${path}" after ${attempts} attempts: ${last}`);
}
