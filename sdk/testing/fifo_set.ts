/**
 * The client side of a task's stdio, as containerd's client makes it: a set of FIFOs in a
 * directory (`cio.NewFIFOSetInDir`), and reading an output FIFO to end of file.
 *
 * @module
 */

import { mkfifo } from "../linux/libc.ts";

/** Stdio paths as containerd's client hands them to a task (empty: none). */
export interface FifoSet {
  /** stdin FIFO, or "". */
  stdin: string;
  /** stdout FIFO, or "". */
  stdout: string;
  /** stderr FIFO, or "". */
  stderr: string;
}

/**
 * Makes the FIFOs `<dir>/<name>-<stream>` for `streams`.
 *
 * @param dir where the FIFOs go
 * @param name a prefix unique within `dir`
 * @param streams which FIFOs to make
 * @returns the paths, empty for streams not made
 * @example Usage
 * ```ts
 * import { deepStrictEqual, strictEqual } from "node:assert/strict";
 * import { createFifoSet } from "@skiff/shim/testing";
 * const tmp = await Deno.makeTempDir();
 * const io = createFifoSet(tmp, "c1", ["stdout", "stderr"]);
 * deepStrictEqual(io, { stdin: "", stdout: `${tmp}/c1-stdout`, stderr: `${tmp}/c1-stderr` });
 * strictEqual(Deno.statSync(io.stdout).isFifo, true);
 * await Deno.remove(tmp, { recursive: true });
 * ```
 */
export function createFifoSet(
  dir: string,
  name: string,
  streams: readonly ("stdin" | "stdout" | "stderr")[],
): FifoSet {
  const io: FifoSet = { stdin: "", stdout: "", stderr: "" };
  for (const s of streams) {
    io[s] = `${dir}/${name}-${s}`;
    mkfifo(io[s], 0o700);
  }
  return io;
}

/**
 * Opens a FIFO for reading and reads it to end of file, which comes once every writer (the
 * shim) closed it. The open itself waits for the first writer.
 *
 * @param path the FIFO
 * @param onOpen called with the open file, e.g. to close it from a cleanup if the read hangs
 * @returns what was read, as text
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { createFifoSet, readFifo } from "@skiff/shim/testing";
 * const tmp = await Deno.makeTempDir();
 * const io = createFifoSet(tmp, "c1", ["stdout"]);
 * const out = readFifo(io.stdout); // start reading before the task is created
 * // The shim's side: open, write, close (end of file for the reader).
 * const shim = await Deno.open(io.stdout, { write: true });
 * await shim.write(new TextEncoder().encode("hello\n"));
 * shim.close();
 * strictEqual(await out, "hello\n");
 * await Deno.remove(tmp, { recursive: true });
 * ```
 */
export async function readFifo(
  path: string,
  onOpen?: (file: Deno.FsFile) => void,
): Promise<string> {
  const file = await Deno.open(path, { read: true });
  onOpen?.(file);
  const dec = new TextDecoder();
  const chunks: string[] = [];
  const buf = new Uint8Array(64 * 1024);
  try {
    for (let n; (n = await file.read(buf)) !== null;) {
      chunks.push(dec.decode(buf.subarray(0, n), { stream: true }));
    }
    return chunks.join("");
  } finally {
    try {
      file.close();
    } catch { /* closed by the caller's cleanup */ }
  }
}
