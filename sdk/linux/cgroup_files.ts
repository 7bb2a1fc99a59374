/**
 * Readers for the small text files cgroups expose. A missing file reads as `undefined`, so
 * statistics of controllers or features the kernel lacks are simply left unset.
 *
 * @module
 */

/**
 * 2^64 - 1, what containerd reports for an unlimited ("max") v2 value.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { MAX_UINT64 } from "./cgroup_files.ts";
 * strictEqual(MAX_UINT64, 2n ** 64n - 1n);
 * ```
 */
export const MAX_UINT64: bigint = 0xffff_ffff_ffff_ffffn;

/**
 * The trimmed contents of `path`, or `undefined` when it does not exist.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { readOptional } from "./cgroup_files.ts";
 * const dir = Deno.makeTempDirSync();
 * Deno.writeTextFileSync(`${dir}/pids.max`, "max\n");
 * strictEqual(readOptional(`${dir}/pids.max`), "max");
 * strictEqual(readOptional(`${dir}/missing`), undefined);
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export function readOptional(path: string): string | undefined {
  try {
    return Deno.readTextFileSync(path).trim();
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return undefined;
    // Some files exist but cannot be read on some kernels (e.g. EOPNOTSUPP): treat as absent.
    if (e instanceof Deno.errors.NotSupported || e instanceof Deno.errors.PermissionDenied) {
      return undefined;
    }
    throw new Error(`read cgroup file "${path}": ${(e as Error).message}`);
  }
}

/**
 * One unsigned integer file; `max` reads as `max` (the caller decides what it means).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { MAX_UINT64, readUint } from "./cgroup_files.ts";
 * const dir = Deno.makeTempDirSync();
 * Deno.writeTextFileSync(`${dir}/pids.current`, "7\n");
 * Deno.writeTextFileSync(`${dir}/pids.max`, "max\n");
 * strictEqual(readUint(`${dir}/pids.current`), 7n);
 * strictEqual(readUint(`${dir}/pids.max`), MAX_UINT64);
 * strictEqual(readUint(`${dir}/missing`), undefined);
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export function readUint(path: string, max: bigint = MAX_UINT64): bigint | undefined {
  const text = readOptional(path);
  if (text === undefined || text === "") return undefined;
  if (text === "max") return max;
  return BigInt(text);
}

/**
 * A `key value` per line file (memory.stat, cpu.stat, memory.events, ...).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { readKeyValues } from "./cgroup_files.ts";
 * const dir = Deno.makeTempDirSync();
 * Deno.writeTextFileSync(`${dir}/memory.stat`, "cache 4096\nrss 8192\nbad x\n");
 * const stat = readKeyValues(`${dir}/memory.stat`);
 * strictEqual(stat.get("rss"), 8192n);
 * strictEqual(stat.has("bad"), false);
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export function readKeyValues(path: string): Map<string, bigint> {
  const out = new Map<string, bigint>();
  for (const line of (readOptional(path) ?? "").split("\n")) {
    const [key, value] = line.trim().split(/\s+/);
    if (key && value !== undefined && /^\d+$/.test(value)) out.set(key, BigInt(value));
  }
  return out;
}

/**
 * Copies `values` into `target` for every key that names one of `fields` (proto field names),
 * setting the camelCase property protobuf-es uses.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { assignFields } from "./cgroup_files.ts";
 * const target: { totalRss?: bigint } = {};
 * const fields = [{ name: "total_rss", localName: "totalRss" }];
 * assignFields(target, fields, new Map([["rss", 5n]]), { rss: "total_rss" });
 * strictEqual(target.totalRss, 5n);
 * ```
 */
export function assignFields(
  target: object,
  fields: readonly { name: string; localName: string }[],
  values: Map<string, bigint>,
  rename: Record<string, string> = {},
): void {
  const byName = new Map(fields.map((f) => [f.name, f.localName]));
  for (const [key, value] of values) {
    const local = byName.get(rename[key] ?? key);
    if (local !== undefined) (target as Record<string, unknown>)[local] = value;
  }
}

/**
 * Hugepage sizes the kernel offers, as cgroup file names spell them (`2MB`, `1GB`).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { hugePageSizes } from "./cgroup_files.ts";
 * // e.g. ["2MB", "1GB"]; empty where the kernel has no hugepages.
 * strictEqual(hugePageSizes().every((s) => /^\d+[KMG]?B$/.test(s)), true);
 * ```
 */
export function hugePageSizes(): string[] {
  const sizes: string[] = [];
  try {
    for (const entry of Deno.readDirSync("/sys/kernel/mm/hugepages")) {
      const m = /^hugepages-(\d+)kB$/.exec(entry.name);
      if (!m) continue;
      let size = Number(m[1]);
      let unit = 0;
      while (size >= 1024 && size % 1024 === 0 && unit < 3) {
        size /= 1024;
        unit++;
      }
      sizes.push(`${size}${["KB", "MB", "GB", "TB"][unit]}`);
    }
  } catch {
    // no hugepage support
  }
  return sizes.sort();
}
