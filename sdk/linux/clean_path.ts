/**
 * Go's `path.Clean` for slash-separated paths: the socket address convention hashes a cleaned
 * path, and mounts check that a cleaned target stays inside the rootfs. Not `node:path`: loading
 * Node compatibility costs `delete` (which unmounts) ~8 ms and 5 MiB.
 *
 * @module
 */

/**
 * Cleans a slash-separated path like Go's `path.Clean`.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { cleanPath } from "./clean_path.ts";
 * strictEqual(cleanPath("/a//b/../c/"), "/a/c");
 * ```
 */
export function cleanPath(p: string): string {
  if (p === "") return ".";
  const rooted = p.startsWith("/");
  const out: string[] = [];
  for (const part of p.split("/")) {
    if (part === "" || part === ".") continue;
    if (part === "..") {
      if (out.length > 0 && out[out.length - 1] !== "..") out.pop();
      else if (!rooted) out.push("..");
      continue;
    }
    out.push(part);
  }
  const joined = out.join("/");
  return rooted ? "/" + joined : (joined || ".");
}
