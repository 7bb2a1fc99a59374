/**
 * containerd's version, asked of its binary (`-publish-binary`): the format of `start`'s answer
 * depends on it (1.6/1.7 take a plain address, 2.0-2.2 JSON). A warm spare asks it while it
 * waits and passes it to the `start` that adopts it.
 *
 * The answer is kept beside the shim sockets, keyed on the binary's identity (device, inode,
 * size, modification and change times: an upgraded containerd is asked again): `containerd
 * --version` costs ~26 ms of CPU quiet and ~100 ms in a burst of 20 starts on 2 cores (`perf`
 * sched_stat_runtime), where every cold `start` and every spare asked it.
 *
 * @module
 */

import { sha256Hex } from "./sha256.ts";

/**
 * containerd's version from its binary (`-publish-binary`) as `[major, minor]`, or undefined.
 *
 * @param binary containerd's binary
 * @param cacheDir where the answer is kept (the shim sockets' directory); none: always ask
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { containerdVersion } from "./containerd_version.ts";
 * strictEqual(await containerdVersion(""), undefined);
 * ```
 */
export async function containerdVersion(
  binary: string,
  cacheDir?: string,
): Promise<[number, number] | undefined> {
  if (!binary) return undefined;
  const cache = cacheDir ? cacheOf(binary, cacheDir) : undefined;
  const kept = cache?.read();
  if (kept) return kept;
  const version = await ask(binary);
  if (version) cache?.write(version);
  return version;
}

async function ask(binary: string): Promise<[number, number] | undefined> {
  try {
    const out = await new Deno.Command(binary, {
      args: ["--version"],
      stdin: "null",
      stderr: "null",
    })
      .output();
    const m = /\sv?(\d+)\.(\d+)\.\d+/.exec(" " + new TextDecoder().decode(out.stdout));
    return m ? [Number(m[1]), Number(m[2])] : undefined;
  } catch {
    return undefined;
  }
}

/** The kept answer for `binary`: a file of two lines, the binary's identity and the version. */
function cacheOf(binary: string, dir: string) {
  let identity: string;
  try {
    const st = Deno.statSync(binary);
    identity = [st.dev, st.ino, st.size, st.mtime?.getTime(), st.ctime?.getTime()].join(":");
  } catch {
    return undefined; // no such binary: asking it fails too
  }
  const file = `${dir}/skiff-containerd-${sha256Hex(binary).slice(0, 16)}.version`;
  return {
    read(): [number, number] | undefined {
      try {
        const [id, version] = Deno.readTextFileSync(file).split("\n");
        const m = /^(\d+)\.(\d+)$/.exec(version ?? "");
        return id === identity && m ? [Number(m[1]), Number(m[2])] : undefined;
      } catch {
        return undefined;
      }
    },
    write([major, minor]: [number, number]): void {
      // Whole or not at all: a concurrent `start` reads either the old file or this one.
      const tmp = `${file}.${Deno.pid}`;
      try {
        Deno.writeTextFileSync(tmp, `${identity}\n${major}.${minor}\n`, { mode: 0o600 });
        Deno.renameSync(tmp, file);
      } catch {
        try {
          Deno.removeSync(tmp);
        } catch { /* not written */ }
      }
    },
  };
}
