/**
 * ttrpc framing: every message on the wire is a 10-byte big-endian header
 * (`length u32 | stream id u32 | type u8 | flags u8`) followed by `length` payload bytes.
 *
 * @module
 */

/** Size of the fixed frame header in bytes. */
export const FRAME_HEADER_LENGTH = 10;

/** Largest payload a peer may send: 4 MiB, the limit containerd/ttrpc enforces (`4<<20`). */
export const MAX_PAYLOAD_LENGTH: number = 4 << 20;

/** First payload buffer of a frame in progress; it doubles as more of the frame arrives. */
const INITIAL_PAYLOAD_BUFFER = 64 * 1024;

/**
 * Frame types (header byte 8).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { FrameType } from "@skiff/shim/ttrpc";
 * strictEqual(FrameType.Request, 1);
 * ```
 */
export const FrameType: {
  /** A client request; opens a stream. */
  readonly Request: 1;
  /** The server's final answer on a stream. */
  readonly Response: 2;
  /** A streaming message in either direction. */
  readonly Data: 3;
} = { Request: 1, Response: 2, Data: 3 };

/**
 * Frame flags (header byte 9); their meaning depends on the frame type.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { FrameFlags } from "@skiff/shim/ttrpc";
 * const closeMarker = FrameFlags.RemoteClosed | FrameFlags.NoData;
 * strictEqual(closeMarker, 5);
 * ```
 */
export const FrameFlags: {
  /** The sender sends no more frames on this stream. */
  readonly RemoteClosed: 1;
  /** The sender keeps the stream open for Data frames (client streaming). */
  readonly RemoteOpen: 2;
  /** The frame carries no payload, not even an empty message. */
  readonly NoData: 4;
} = { RemoteClosed: 1, RemoteOpen: 2, NoData: 4 };

/**
 * The decoded 10-byte header of a frame.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { FrameHeader } from "@skiff/shim/ttrpc";
 * const h: FrameHeader = { length: 0, streamId: 1, type: 1, flags: 0 };
 * strictEqual(h.streamId, 1);
 * ```
 */
export interface FrameHeader {
  /** Payload length in bytes, header excluded. */
  length: number;
  /** Stream the frame belongs to; clients open odd ids. */
  streamId: number;
  /** One of {@linkcode FrameType}; unknown values must be ignored by receivers. */
  type: number;
  /** A combination of {@linkcode FrameFlags}. */
  flags: number;
}

/**
 * What {@linkcode FrameDecoder.push} yields: a complete frame, or the header of a frame whose
 * payload exceeded {@linkcode MAX_PAYLOAD_LENGTH} and was discarded.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { DecodedFrame } from "@skiff/shim/ttrpc";
 * function describe(f: DecodedFrame): string {
 *   return f.oversized ? `too long on ${f.header.streamId}` : `${f.payload.length} bytes`;
 * }
 * strictEqual(describe({ header: { length: 0, streamId: 1, type: 1, flags: 0 }, oversized: false, payload: new Uint8Array() }), "0 bytes");
 * ```
 */
export type DecodedFrame =
  | {
    /** The frame header. */
    header: FrameHeader;
    /** False for a complete frame. */
    oversized: false;
    /** The payload, owned by the caller. */
    payload: Uint8Array;
  }
  | {
    /** The header of the discarded frame; `length` is what the peer announced. */
    header: FrameHeader;
    /** True: the payload was over the limit and has been skipped. */
    oversized: true;
  };

/**
 * Encodes one frame (header and payload) into a new buffer.
 *
 * @param streamId the stream id (u32)
 * @param type a {@linkcode FrameType}
 * @param flags a combination of {@linkcode FrameFlags}
 * @param payload the payload, at most {@linkcode MAX_PAYLOAD_LENGTH} bytes
 * @returns header and payload in one buffer
 * @throws {RangeError} when the payload is too long or an id, type or flags is out of range
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { encodeFrame, FrameType } from "@skiff/shim/ttrpc";
 * const bytes = encodeFrame(1, FrameType.Request, 0, new Uint8Array([7]));
 * strictEqual(bytes.length, 11);
 * strictEqual(bytes[3], 1);
 * strictEqual(bytes[7], 1);
 * strictEqual(bytes[8], 1);
 * ```
 */
export function encodeFrame(
  streamId: number,
  type: number,
  flags: number,
  payload: Uint8Array,
): Uint8Array {
  if (payload.length > MAX_PAYLOAD_LENGTH) {
    throw new RangeError(
      `ttrpc frame payload of ${payload.length} bytes exceeds the maximum of ${MAX_PAYLOAD_LENGTH}`,
    );
  }
  if (!Number.isInteger(streamId) || streamId < 0 || streamId > 0xffff_ffff) {
    throw new RangeError(`ttrpc stream id ${streamId} is not a u32`);
  }
  if ((type & 0xff) !== type || (flags & 0xff) !== flags) {
    throw new RangeError(`ttrpc frame type ${type} or flags ${flags} is not a u8`);
  }
  const out = new Uint8Array(FRAME_HEADER_LENGTH + payload.length);
  const view = new DataView(out.buffer);
  view.setUint32(0, payload.length);
  view.setUint32(4, streamId);
  out[8] = type;
  out[9] = flags;
  out.set(payload, FRAME_HEADER_LENGTH);
  return out;
}

/**
 * Incremental frame decoder: feed it whatever chunks a socket read returned (split or
 * coalesced frames alike) and it returns the frames those bytes completed.
 *
 * Memory stays bounded by one maximum payload: the payload buffer of the frame in progress is
 * the only thing held, and an over-limit frame is skipped byte by byte as it arrives instead of
 * being buffered, so that a peer cannot make the receiver hold more than that. The buffer grows
 * with the bytes that actually arrive (doubling, from 64 KiB), so a header that claims 4 MiB
 * and is never completed costs what was sent, not what was claimed.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { encodeFrame, FrameDecoder, FrameType } from "@skiff/shim/ttrpc";
 * const bytes = encodeFrame(3, FrameType.Response, 0, new Uint8Array([1, 2]));
 * const decoder = new FrameDecoder();
 * strictEqual(decoder.push(bytes.subarray(0, 4)).length, 0);
 * const [frame] = decoder.push(bytes.subarray(4));
 * strictEqual(frame.header.streamId, 3);
 * strictEqual(frame.oversized, false);
 * strictEqual(frame.payload.length, 2);
 * ```
 */
export class FrameDecoder {
  #maxPayload: number;
  #header = new Uint8Array(FRAME_HEADER_LENGTH);
  #headerFill = 0;
  #current: FrameHeader | undefined;
  #payload: Uint8Array | undefined;
  #payloadFill = 0;
  #skipRemaining = 0;

  /**
   * Creates a decoder for one connection's byte stream.
   *
   * @param maxPayload payload limit; larger frames are reported as oversized and skipped
   */
  constructor(maxPayload: number = MAX_PAYLOAD_LENGTH) {
    this.#maxPayload = maxPayload;
  }

  /**
   * True while a frame has been started but not completed, i.e. the stream would be truncated if
   * it ended now.
   */
  get partial(): boolean {
    return this.#headerFill > 0 || this.#current !== undefined;
  }

  /** Payload bytes held for the frame in progress (what a truncated frame costs). */
  get buffered(): number {
    return this.#payload?.length ?? 0;
  }

  /**
   * The bytes of the frame in progress, exactly as they were read (its header and the payload so
   * far): what a live upgrade hands to the code that continues the connection. `undefined` while
   * an oversized frame is being skipped, which cannot be handed over.
   *
   * @example Usage
   * ```ts
   * import { deepStrictEqual } from "node:assert/strict";
   * import { encodeFrame, FrameDecoder, FrameType } from "./frame.ts";
   * const frame = encodeFrame(1, FrameType.Request, 0, new Uint8Array([1, 2, 3]));
   * const d = new FrameDecoder();
   * d.push(frame.subarray(0, 12)); // the header and two payload bytes
   * deepStrictEqual(d.pendingBytes(), frame.subarray(0, 12));
   * ```
   */
  pendingBytes(): Uint8Array | undefined {
    if (this.#current === undefined) return this.#header.slice(0, this.#headerFill);
    if (this.#payload === undefined) return undefined;
    const out = new Uint8Array(FRAME_HEADER_LENGTH + this.#payloadFill);
    const view = new DataView(out.buffer);
    view.setUint32(0, this.#current.length);
    view.setUint32(4, this.#current.streamId);
    out[8] = this.#current.type;
    out[9] = this.#current.flags;
    out.set(this.#payload.subarray(0, this.#payloadFill), FRAME_HEADER_LENGTH);
    return out;
  }

  /**
   * Consumes a chunk and returns every frame it completed, in order. The chunk is copied where
   * needed, so the caller may reuse its buffer.
   *
   * @param chunk bytes read from the connection
   * @returns the completed frames (possibly none)
   */
  push(chunk: Uint8Array): DecodedFrame[] {
    const out: DecodedFrame[] = [];
    let pos = 0;
    while (pos < chunk.length) {
      if (this.#current === undefined) {
        const take = Math.min(FRAME_HEADER_LENGTH - this.#headerFill, chunk.length - pos);
        this.#header.set(chunk.subarray(pos, pos + take), this.#headerFill);
        this.#headerFill += take;
        pos += take;
        if (this.#headerFill < FRAME_HEADER_LENGTH) break;
        this.#headerFill = 0;
        const header = this.#parseHeader();
        if (header.length > this.#maxPayload) {
          this.#current = header;
          this.#skipRemaining = header.length;
        } else if (header.length === 0) {
          out.push({ header, oversized: false, payload: new Uint8Array(0) });
          continue;
        } else {
          this.#current = header;
          this.#payload = new Uint8Array(Math.min(header.length, INITIAL_PAYLOAD_BUFFER));
          this.#payloadFill = 0;
        }
      }
      const header = this.#current!;
      if (this.#payload === undefined) {
        const skip = Math.min(this.#skipRemaining, chunk.length - pos);
        this.#skipRemaining -= skip;
        pos += skip;
        if (this.#skipRemaining > 0) break;
        this.#current = undefined;
        out.push({ header, oversized: true });
        continue;
      }
      const take = Math.min(header.length - this.#payloadFill, chunk.length - pos);
      if (this.#payloadFill + take > this.#payload.length) {
        let size = this.#payload.length * 2;
        while (size < this.#payloadFill + take) size *= 2;
        const grown = new Uint8Array(Math.min(size, header.length));
        grown.set(this.#payload.subarray(0, this.#payloadFill));
        this.#payload = grown;
      }
      this.#payload.set(chunk.subarray(pos, pos + take), this.#payloadFill);
      this.#payloadFill += take;
      pos += take;
      if (this.#payloadFill < header.length) break;
      out.push({ header, oversized: false, payload: this.#payload });
      this.#current = undefined;
      this.#payload = undefined;
    }
    return out;
  }

  #parseHeader(): FrameHeader {
    const view = new DataView(this.#header.buffer);
    return {
      length: view.getUint32(0),
      streamId: view.getUint32(4),
      type: this.#header[8],
      flags: this.#header[9],
    };
  }
}
