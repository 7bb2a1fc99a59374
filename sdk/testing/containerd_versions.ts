/**
 * The containerd builds on this machine: the skiff cache that tests/setup/prepare.sh fills
 * (`~/.cache/skiff/containerd-v<version>/bin`), their versions, and whether overlayfs works in a
 * directory (the snapshotter a private containerd gets).
 *
 * @module
 */

import { removeTree } from "./bundle.ts";

const dec = new TextDecoder();

/**
 * A containerd build found on this machine.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { type ContainerdVersion, containerdVersions } from "@skiff/shim/testing";
 * const [oldest]: ContainerdVersion[] = containerdVersions(); // none without prepare.sh's cache
 * strictEqual(oldest === undefined || oldest.binDir.endsWith("/bin"), true);
 * ```
 */
export interface ContainerdVersion {
  /** Version, e.g. `1.6.20`. */
  version: string;
  /** Directory holding `containerd`, `ctr` and `containerd-shim-runc-v2`. */
  binDir: string;
}

/**
 * The skiff cache directory: `$SKIFF_CACHE`, else `$HOME/.cache/skiff`.
 *
 * @returns an absolute path (not necessarily existing)
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { skiffCacheDir } from "./containerd_versions.ts";
 * strictEqual(skiffCacheDir().startsWith("/"), true);
 * ```
 */
export function skiffCacheDir(): string {
  return Deno.env.get("SKIFF_CACHE") ?? `${Deno.env.get("HOME") ?? "/root"}/.cache/skiff`;
}

/**
 * Reads `containerd --version` of a binary dir.
 *
 * @param binDir directory containing `containerd`
 * @returns the version (`1.7.24`), or undefined when it cannot be run
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { containerdVersionOf } from "./containerd_versions.ts";
 * // containerdVersionOf("/usr/bin") is "1.6.20" with Debian's containerd installed.
 * strictEqual(containerdVersionOf("/nonexistent/bin"), undefined);
 * ```
 */
export function containerdVersionOf(binDir: string): string | undefined {
  try {
    const out = new Deno.Command(`${binDir}/containerd`, {
      args: ["--version"],
      stdout: "piped",
      stderr: "null",
      stdin: "null",
    }).outputSync();
    if (!out.success) return undefined;
    // "containerd github.com/containerd/containerd/v2 2.1.9+unknown": the module path's
    // "/v2" has no dots, so the first x.y.z is the version.
    return dec.decode(out.stdout).match(/\s(\d+\.\d+\.\d+)/)?.[1];
  } catch {
    return undefined;
  }
}

/** Compares two dotted versions numerically: negative, zero or positive. */
export function compareVersions(a: string, b: string): number {
  const pa = a.split(".").map(Number);
  const pb = b.split(".").map(Number);
  for (let i = 0; i < 3; i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}

let discovered: ContainerdVersion[] | undefined;

/**
 * Lists the containerd builds tests can use, oldest first. Sources, in order: environment
 * variables `SKIFF_CONTAINERD_<MAJOR>_<MINOR>=<binDir>`, the same keys in `$SKIFF_CACHE/env`
 * (written by `tests/setup/prepare.sh`), and as a fallback `/usr/bin` plus the cache's
 * `containerd-<suite>/usr/bin` dirs. Each dir's real version comes from `containerd --version`.
 *
 * @returns one entry per distinct binary dir that holds a working containerd
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { compareVersions, containerdVersions } from "./containerd_versions.ts";
 * const versions = containerdVersions().map((v) => v.version);
 * // Oldest first.
 * strictEqual(versions.every((v, i) => i === 0 || compareVersions(versions[i - 1], v) <= 0), true);
 * ```
 */
export function containerdVersions(): ContainerdVersion[] {
  if (discovered) return discovered.map((v) => ({ ...v }));
  const dirs = new Map<string, string>();
  const add = (key: string, dir: string) => {
    if (!dirs.has(key)) dirs.set(key, dir);
  };
  for (const [k, v] of Object.entries(Deno.env.toObject())) {
    if (/^SKIFF_CONTAINERD_\d+_\d+$/.test(k) && v) add(k, v);
  }
  try {
    for (const line of Deno.readTextFileSync(`${skiffCacheDir()}/env`).split("\n")) {
      const m = line.match(/^(?:export\s+)?(SKIFF_CONTAINERD_\d+_\d+)=["']?([^"'\s]+)["']?\s*$/);
      if (m) add(m[1]!, m[2]!);
    }
  } catch { /* not prepared: use the fallbacks */ }
  if (dirs.size === 0) {
    add("system", "/usr/bin");
    try {
      for (const e of Deno.readDirSync(skiffCacheDir())) {
        if (e.isDirectory && e.name.startsWith("containerd-")) {
          add(e.name, `${skiffCacheDir()}/${e.name}/usr/bin`);
        }
      }
    } catch { /* no cache */ }
  }
  const seen = new Set<string>();
  const out: ContainerdVersion[] = [];
  for (const dir of dirs.values()) {
    if (seen.has(dir)) continue;
    seen.add(dir);
    const version = containerdVersionOf(dir);
    if (version) out.push({ version, binDir: dir });
  }
  out.sort((a, b) => compareVersions(a.version, b.version));
  discovered = out;
  return out.map((v) => ({ ...v }));
}

/**
 * Tells whether overlayfs can be mounted with its upper dir inside `dir` (it cannot on top of
 * another overlay, e.g. inside some containers).
 *
 * @param dir a writable directory
 * @returns true when an overlay mount there succeeded
 *
 * @example Usage
 * ```ts ignore
 * const snapshotter = await overlaySupported("/tmp") ? "overlayfs" : "native";
 * ```
 */
export async function overlaySupported(dir: string): Promise<boolean> {
  const probe = await Deno.makeTempDir({ dir, prefix: "overlay-probe-" });
  try {
    for (const d of ["l", "u", "w", "m"]) await Deno.mkdir(`${probe}/${d}`);
    const m = await new Deno.Command("mount", {
      args: [
        "-t",
        "overlay",
        "overlay",
        "-o",
        `lowerdir=${probe}/l,upperdir=${probe}/u,workdir=${probe}/w`,
        `${probe}/m`,
      ],
      stdout: "null",
      stderr: "null",
    }).output().catch(() => undefined);
    return m?.success ?? false;
  } finally {
    await removeTree(probe);
  }
}
