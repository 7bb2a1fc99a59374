/**
 * containerd's version, asked of its binary (`-publish-binary`): the format of `start`'s answer
 * depends on it (1.6/1.7 take a plain address, 2.0-2.2 JSON). A warm spare asks it while it
 * waits and passes it to the `start` that adopts it.
 *
 * @module
 */

/**
 * containerd's version from its binary (`-publish-binary`) as `[major, minor]`, or undefined.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { containerdVersion } from "./containerd_version.ts";
 * strictEqual(await containerdVersion(""), undefined);
 * ```
 */
export async function containerdVersion(binary: string): Promise<[number, number] | undefined> {
  if (!binary) return undefined;
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
