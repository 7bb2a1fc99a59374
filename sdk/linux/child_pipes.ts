/**
 * Takes the stdio pipes of a spawned command out of Deno's hands into descriptors skiff owns,
 * so that a live upgrade can hand them to the next code: Deno does not say which descriptor
 * backs `child.stdout`, and it closes its own when the process image is replaced.
 *
 * @module
 */

import { descriptorsOf, dupCloseOnExec, linkOf } from "./descriptors.ts";
import { FdStream } from "./fd_stream.ts";

/**
 * The parent's ends of a child's piped stdio, as descriptors skiff owns.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { ChildPipes } from "@skiff/shim/linux";
 * const pipes: ChildPipes = {}; // a child spawned with no piped stdio
 * strictEqual(pipes.stdout, undefined);
 * ```
 */
export interface ChildPipes {
  /** The write end of the child's stdin. */
  stdin?: FdStream;
  /** The read end of the child's stdout. */
  stdout?: FdStream;
  /** The read end of the child's stderr. */
  stderr?: FdStream;
}

/**
 * Finds the parent's end of each piped stdio of `child` (the descriptor of this process linked
 * to the same pipe as the child's 0, 1 or 2), duplicates it into an {@linkcode FdStream}, and
 * lets Deno's own handle go without reading from it. Call it right after `spawn()`, while the
 * child (the runtime command) still holds its stdio. Returns `undefined`, having taken nothing,
 * when a pipe cannot be identified (the child already gone).
 *
 * @param child the spawned command
 * @param piped which of its stdio were spawned `"piped"`
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { takeChildPipes } from "@skiff/shim/linux";
 * const child = new Deno.Command("sh", {
 *   args: ["-c", "read x; echo got $x"], stdin: "piped", stdout: "piped", stderr: "null",
 * }).spawn();
 * const pipes = takeChildPipes(child, { stdin: true, stdout: true, stderr: false })!;
 * await pipes.stdin!.write(new TextEncoder().encode("hi\n"));
 * const buf = new Uint8Array(64);
 * let text = "";
 * for (let n; (n = await pipes.stdout!.read(buf)) !== null;) text += new TextDecoder().decode(buf.subarray(0, n));
 * strictEqual(text, "got hi\n");
 * await child.status;
 * await pipes.stdin!.close();
 * await pipes.stdout!.close();
 * ```
 */
export function takeChildPipes(
  child: Deno.ChildProcess,
  piped: { stdin: boolean; stdout: boolean; stderr: boolean },
): ChildPipes | undefined {
  const wanted = ([["stdin", 0], ["stdout", 1], ["stderr", 2]] as const).filter(([name]) =>
    piped[name]
  );
  if (wanted.length === 0) return {};
  const links = wanted.map(([name, fd]) => [name, linkOf(child.pid, fd)] as const);
  if (links.some(([, link]) => link === undefined || !link.startsWith("pipe:"))) return undefined;
  const mine = descriptorsOf(links.map(([, link]) => link!));
  const found = links.map(([name, link]) => [name, mine.get(link!)] as const);
  if (found.some(([, fd]) => fd === undefined)) return undefined;
  const out: ChildPipes = {};
  for (const [name, fd] of found) {
    out[name] = new FdStream(dupCloseOnExec(fd!), `${name} pipe of pid ${child.pid}`);
  }
  // Deno's handles are released unread: the duplicates keep the pipes open.
  if (piped.stdin) void child.stdin.close().catch(() => {});
  if (piped.stdout) void child.stdout.cancel().catch(() => {});
  if (piped.stderr) void child.stderr.cancel().catch(() => {});
  return out;
}
