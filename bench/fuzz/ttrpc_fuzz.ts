/**
 * A seeded hostile-peer fuzzer for a ttrpc socket: connections opened one after another, each
 * sending a burst of 1-200 frames (about 5 on average) and then closing abruptly, reading back only part (or none)
 * of what the server answered. Frames are a mix of garbage bytes, well-formed headers with
 * random stream ids, types, flags and payloads, headers claiming ~4 GiB or ~5 MB with 4 KiB
 * sent, short frames, and ttrpc requests for unknown and read-only Task methods with random
 * payloads. The same seed sends the same bytes.
 *
 * @example Usage
 * ```ts ignore
 * const stats = await fuzzTtrpc({ path: "/run/containerd/s/abc", frames: 2000, seed: 1 });
 * console.log(stats.connections, stats.frames);
 * ```
 *
 * @module
 */

import { create, toBinary } from "@bufbuild/protobuf";
import { RequestSchema } from "../../proto/gen/ttrpc/request_pb.ts";
import { encodeFrame } from "../../sdk/ttrpc/frame.ts";
import { Rng } from "./rng.ts";

/** Options of {@linkcode fuzzTtrpc}. */
export interface TtrpcFuzzOptions {
  /** The ttrpc unix socket. */
  path: string;
  /** Stop after this many frames in total. */
  frames: number;
  /** The seed; the same seed sends the same bytes. */
  seed: number;
  /** Most frames in one connection's burst (default 200, at least 1). */
  maxBurst?: number;
  /** Give up on one connection's writes after this long and close it (default 2000 ms). */
  connectionMs?: number;
  /**
   * Also leave some connections open, unfinished: silent, holding a partial header, holding a
   * frame that claims 4 MiB, or (at most two) having sent enough requests to fill the socket
   * with answers they never read. They go into `into`, which the caller closes when done.
   */
  hold?: { chance: number; max: number; into: Deno.Conn[] };
  /** Progress lines. */
  log?: (line: string) => void;
}

/** What {@linkcode fuzzTtrpc} did. */
export interface TtrpcFuzzStats {
  /** Connections opened. */
  connections: number;
  /** Frames sent (or started). */
  frames: number;
  /** Bytes written. */
  bytesSent: number;
  /** Bytes read back. */
  bytesRead: number;
  /** Connections refused or reset before the burst was written. */
  refused: number;
  /** Connections whose writes did not finish within `connectionMs`. */
  stalled: number;
  /** Connections left open (see {@linkcode TtrpcFuzzOptions.hold}). */
  held: number;
}

const TASK_SERVICES = ["containerd.task.v2.Task", "containerd.task.v3.Task"];
/** Methods that change nothing whatever their input (a fuzzer must not kill the container). */
const READ_ONLY_METHODS = ["State", "Pids", "Stats", "Connect"];

function header(length: number, streamId: number, type: number, flags: number): Uint8Array {
  const h = new Uint8Array(10);
  const v = new DataView(h.buffer);
  v.setUint32(0, length >>> 0);
  v.setUint32(4, streamId >>> 0);
  h[8] = type & 0xff;
  h[9] = flags & 0xff;
  return h;
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

function concatAll(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.length;
  }
  return out;
}

function streamId(rng: Rng): number {
  return rng.pick([() => rng.u32(), () => rng.range(0, 64), () => 2 * rng.range(0, 5000) + 1])();
}

function frameType(rng: Rng): number {
  return rng.pick([1, 1, 2, 3, 3, 0, rng.range(4, 255)]);
}

/** One hostile frame (or something that is not a frame at all). */
export function hostileFrame(rng: Rng): Uint8Array {
  switch (rng.int(6)) {
    case 0: // garbage
      return rng.bytes(rng.range(1, 4096));
    case 1: { // a valid header, random id/type/flags, random payload of the stated length
      const n = rng.range(0, 2048);
      return concat(header(n, streamId(rng), frameType(rng), rng.int(256)), rng.bytes(n));
    }
    case 2: { // a huge claimed length, 4 KiB actually sent
      const claimed = rng.chance(0.5)
        ? 0xffff_ffff - rng.int(1 << 16)
        : 5_000_000 + rng.int(500_000);
      return concat(header(claimed, streamId(rng), frameType(rng), rng.int(256)), rng.bytes(4096));
    }
    case 3: { // a short frame: the payload claims more or less than it has
      const n = rng.range(0, 16);
      return concat(header(rng.range(0, 32), streamId(rng), frameType(rng), 0), rng.bytes(n));
    }
    case 4: { // a claimed length up to 4 MiB that is never completed
      const claimed = rng.range(4096, 4 << 20);
      return concat(header(claimed, streamId(rng), 1, 0), rng.bytes(rng.range(0, 4096)));
    }
    default: { // a ttrpc Request for a Task method (read-only) or an unknown one
      const known = rng.chance(0.5);
      const req = toBinary(
        RequestSchema,
        create(RequestSchema, {
          service: known ? rng.pick(TASK_SERVICES) : `fuzz.${rng.u32().toString(36)}`,
          method: known ? rng.pick(READ_ONLY_METHODS) : rng.u32().toString(36),
          payload: rng.bytes(rng.range(0, 64)),
          timeoutNano: BigInt(rng.int(3)) * 1_000_000_000n,
          metadata: rng.chance(0.3) ? [{ key: "containerd-namespace-ttrpc", value: "x" }] : [],
        }),
      );
      return encodeFrame(2 * rng.range(0, 5000) + 1, 1, rng.pick([0, 0, 1, 2, 4]), req);
    }
  }
}

/** Reads up to `limit` bytes (or until `signal`), discarding them; returns how many. */
async function readSome(conn: Deno.Conn, limit: number, signal: AbortSignal): Promise<number> {
  const buf = new Uint8Array(16 * 1024);
  let got = 0;
  while (got < limit && !signal.aborted) {
    const n = await conn.read(buf).catch(() => null);
    if (n === null) break;
    got += n;
  }
  return got;
}

/**
 * Runs the fuzzer against `path` until `frames` frames have been sent.
 *
 * @param opts socket, frame count, seed, burst size
 * @returns counts of what was sent and read
 */
export async function fuzzTtrpc(opts: TtrpcFuzzOptions): Promise<TtrpcFuzzStats> {
  const rng = new Rng(opts.seed);
  const maxBurst = Math.max(1, opts.maxBurst ?? 200);
  const connectionMs = opts.connectionMs ?? 2000;
  const stats: TtrpcFuzzStats = {
    connections: 0,
    frames: 0,
    bytesSent: 0,
    bytesRead: 0,
    refused: 0,
    stalled: 0,
    held: 0,
  };
  let nextLog = 0;
  let floods = 0;
  while (stats.frames < opts.frames) {
    const hold = opts.hold;
    if (hold && hold.into.length < hold.max && rng.chance(hold.chance)) {
      const kind = floods < 2 && rng.chance(0.05) ? 3 : rng.int(3);
      if (kind === 3) floods++;
      stats.connections++;
      stats.frames++;
      try {
        const conn = await Deno.connect({ transport: "unix", path: opts.path });
        hold.into.push(conn);
        stats.held++;
        const bytes = kind === 0
          ? new Uint8Array()
          : kind === 1
          ? rng.bytes(rng.range(1, 9))
          : kind === 2
          ? concat(header(4 << 20, 1, 1, 0), rng.bytes(4096))
          // Requests on even stream ids, each answered InvalidArgument, never read.
          : new Uint8Array(10 * 40_000);
        // Not awaited: a flood blocks once the server stops reading it.
        if (bytes.length > 0) void conn.write(bytes).catch(() => {});
      } catch {
        stats.refused++;
      }
      continue;
    }
    // Mostly a few frames, sometimes up to maxBurst (about 5 on average, as containerd's
    // reconnects and a fuzzer's short connections look).
    const size = rng.chance(0.98) ? rng.range(1, Math.min(6, maxBurst)) : rng.range(1, maxBurst);
    const burst = Math.min(size, opts.frames - stats.frames);
    const frames = Array.from({ length: burst }, () => hostileFrame(rng));
    // How much of the answers to read before leaving: none, some, or "all" (until the
    // connection is closed or the deadline passes).
    const readLimit = rng.pick([0, 0, rng.range(1, 4096), Infinity]);
    const halfClose = rng.chance(0.1);
    // Paced: frame by frame, as a client would; blasted: the whole burst in one write;
    // dropped: the burst is started and the connection closed a moment later, whether or
    // not it was all written.
    const style = rng.pick(["paced", "blasted", "dropped"] as const);
    const dropAfter = rng.range(0, 5);
    // Drawn whatever happens next, so that the sequence depends on the seed alone.
    const lingerMs = rng.range(0, 20);
    stats.connections++;
    stats.frames += burst;
    let conn: Deno.UnixConn;
    try {
      conn = await Deno.connect({ transport: "unix", path: opts.path });
    } catch {
      stats.refused++;
      continue;
    }
    const stop = new AbortController();
    const timer = setTimeout(() => stop.abort(), connectionMs);
    const reading = readLimit > 0 ? readSome(conn, readLimit, stop.signal) : Promise.resolve(0);
    try {
      const writing = (async () => {
        const chunks = style === "paced" ? frames : [concatAll(frames)];
        for (const f of chunks) {
          let off = 0;
          while (off < f.length) off += await conn.write(f.subarray(off));
          stats.bytesSent += f.length;
        }
        if (halfClose) await conn.closeWrite();
      })();
      if (style === "dropped") setTimeout(() => stop.abort(), dropAfter);
      const aborted = new Promise<"stalled">((r) =>
        stop.signal.addEventListener("abort", () => r("stalled"))
      );
      const outcome = await Promise.race([writing.then(() => "done" as const), aborted]).catch(
        () => "refused" as const,
      );
      writing.catch(() => {});
      if (outcome === "stalled" && style !== "dropped") stats.stalled++;
      if (outcome === "refused") stats.refused++;
      if (readLimit === Infinity && outcome === "done") {
        // "Read everything": wait a little for answers, then leave anyway.
        await new Promise((r) => setTimeout(r, lingerMs));
      }
    } finally {
      stop.abort();
      clearTimeout(timer);
      try {
        conn.close();
      } catch { /* closed */ }
      stats.bytesRead += await reading;
    }
    if (opts.log && stats.frames >= nextLog) {
      opts.log(
        `fuzz: ${stats.frames}/${opts.frames} frames, ${stats.connections} connections, ` +
          `${stats.stalled} stalled, ${stats.refused} refused`,
      );
      nextLog = stats.frames + Math.max(1000, Math.floor(opts.frames / 10));
    }
  }
  return stats;
}
