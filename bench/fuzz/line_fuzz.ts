/**
 * The seeded hostile-peer fuzzer for a shim's text sockets: the operations endpoint
 * (`<socket>.ops`, HTTP/1.1 over a unix socket) and the warm spare's handoff socket (JSON
 * lines). Connections one after another, each sending a burst of 1-20 chunks (requests with
 * random methods, paths, versions and headers, lying Content-Lengths, broken chunked bodies,
 * huge headers, half request lines, JSON that is not a handoff, binary garbage) and then
 * closing abruptly after reading part or none of the answer.
 *
 * @example Usage
 * ```ts ignore
 * const stats = await fuzzLines({ path: "/run/containerd/s/abc.ops", chunks: 2000, seed: 1, http: true });
 * ```
 *
 * @module
 */

import { Rng } from "./rng.ts";
import type { TtrpcFuzzStats } from "./ttrpc_fuzz.ts";

/** Options of {@linkcode fuzzLines}. */
export interface LineFuzzOptions {
  /** The unix socket. */
  path: string;
  /** Stop after this many chunks in total. */
  chunks: number;
  /** The seed. */
  seed: number;
  /** HTTP requests (the ops endpoint) rather than JSON lines (the spare). */
  http: boolean;
  /** Give up on one connection after this long (default 2000 ms). */
  connectionMs?: number;
  /** Leave some connections open after their burst; they go into `into` for the caller to close. */
  hold?: { chance: number; max: number; into: Deno.Conn[] };
  /** Progress lines. */
  log?: (line: string) => void;
}

const enc = new TextEncoder();
const PATHS = ["/healthz", "/metrics", "/debug/state", "/", "/nope", "/metrics?x=1", "*"];
const METHODS = ["GET", "HEAD", "POST", "DELETE", "OPTIONS", "CONNECT", "G\u00e9T", "PRI"];
const VERSIONS = ["HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/9", "", "HTTP/1.1 extra"];

function httpChunk(rng: Rng): Uint8Array {
  switch (rng.int(7)) {
    case 0:
      return rng.bytes(rng.range(1, 2048));
    case 1: { // a plausible request, maybe with a body that lies about its length
      const lines = [`${rng.pick(METHODS)} ${rng.pick(PATHS)} ${rng.pick(VERSIONS)}`];
      if (rng.chance(0.8)) lines.push("Host: localhost");
      if (rng.chance(0.3)) lines.push(`Content-Length: ${rng.pick([0, 5, 100, 1e9, -1])}`);
      if (rng.chance(0.2)) {
        lines.push(`Connection: ${rng.pick(["close", "keep-alive", "upgrade"])}`);
      }
      if (rng.chance(0.1)) lines.push("Upgrade: h2c");
      return enc.encode(lines.join("\r\n") + "\r\n\r\n" + (rng.chance(0.3) ? "x".repeat(50) : ""));
    }
    case 2: // a huge header
      return enc.encode(
        `GET /metrics HTTP/1.1\r\nX-Big: ${"a".repeat(rng.range(8, 80) << 10)}\r\n`,
      );
    case 3: // chunked with a broken size
      return enc.encode(
        `POST /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n` +
          `${rng.pick(["ffffffffffff", "zz", "10", "-1"])}\r\nabc\r\n`,
      );
    case 4: // half a request line, never finished
      return enc.encode(`GET /${"m".repeat(rng.range(0, 200))}`);
    case 5: // the HTTP/2 preface and a few frame bytes
      return new Uint8Array([...enc.encode("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), ...rng.bytes(30)]);
    default: // many headers
      return enc.encode(
        "GET /healthz HTTP/1.1\r\n" +
          Array.from({ length: rng.range(50, 400) }, (_, i) => `X-${i}: ${i}\r\n`).join(""),
      );
  }
}

function jsonChunk(rng: Rng): Uint8Array {
  switch (rng.int(5)) {
    case 0:
      return rng.bytes(rng.range(1, 2048));
    case 1: // JSON that is not a handoff
      return enc.encode(
        JSON.stringify(rng.pick([{}, [], null, 1, "x", { codeId: 7 }, { bundle: "/" }])) + "\n",
      );
    case 2: // a handoff with the wrong code and nonsense flags
      return enc.encode(
        JSON.stringify({
          codeId: rng.u32().toString(16),
          bundle: "/nonexistent",
          env: {},
          flags: { id: "x", namespace: "y", socket: "/dev/null", address: "/dev/null" },
        }) + "\n",
      );
    case 3: // a long line without its newline
      return enc.encode("{" + '"a":1,'.repeat(rng.range(100, 5000)));
    default:
      return enc.encode("\n".repeat(rng.range(1, 10)));
  }
}

/**
 * Runs the fuzzer until `chunks` chunks have been sent.
 *
 * @param opts socket, count, seed, protocol
 * @returns counts of what was sent and read (`frames` counts chunks)
 */
export async function fuzzLines(opts: LineFuzzOptions): Promise<TtrpcFuzzStats> {
  const rng = new Rng(opts.seed);
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
  while (stats.frames < opts.chunks) {
    const burst = Math.min(rng.range(1, 20), opts.chunks - stats.frames);
    const chunks = Array.from({ length: burst }, () => (opts.http ? httpChunk : jsonChunk)(rng));
    const readLimit = rng.pick([0, rng.range(1, 512), 64 * 1024]);
    const keep = opts.hold !== undefined && opts.hold.into.length < opts.hold.max &&
      rng.chance(opts.hold.chance);
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
    const reading = (async () => {
      const buf = new Uint8Array(16 * 1024);
      let got = 0;
      while (got < readLimit && !stop.signal.aborted) {
        const n = await conn.read(buf).catch(() => null);
        if (n === null) break;
        got += n;
      }
      return got;
    })();
    if (keep) {
      // Held: the burst is sent (not awaited) and the connection stays open, unread.
      opts.hold!.into.push(conn);
      stats.held++;
      clearTimeout(timer);
      void reading.catch(() => {});
      void (async () => {
        for (const c of chunks) await conn.write(c);
      })().catch(() => {});
      continue;
    }
    try {
      const writing = (async () => {
        for (const c of chunks) {
          let off = 0;
          while (off < c.length) off += await conn.write(c.subarray(off));
          stats.bytesSent += c.length;
        }
      })();
      writing.catch(() => {});
      const aborted = new Promise<"stalled">((r) =>
        stop.signal.addEventListener("abort", () => r("stalled"))
      );
      const outcome = await Promise.race([writing.then(() => "done" as const), aborted]).catch(
        () => "refused" as const,
      );
      if (outcome === "stalled") stats.stalled++;
      if (outcome === "refused") stats.refused++;
      // A moment for the answer, when this connection reads one.
      if (readLimit > 0 && outcome === "done") {
        await Promise.race([reading, new Promise((r) => setTimeout(r, 50))]);
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
        `fuzz: ${stats.frames}/${opts.chunks} chunks, ${stats.connections} connections, ` +
          `${stats.stalled} stalled, ${stats.refused} refused`,
      );
      nextLog = stats.frames + Math.max(1000, Math.floor(opts.chunks / 10));
    }
  }
  return stats;
}
