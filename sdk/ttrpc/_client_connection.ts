/**
 * Internal: the client side of one ttrpc connection. Multiplexes unary calls on odd, strictly
 * increasing stream ids and matches responses by id, in whatever order they arrive.
 *
 * @module
 */

import { Code, statusError } from "./status_error.ts";
import type { Response } from "../../proto/gen/ttrpc/request_pb.ts";
import { shimCodec } from "../../proto/shim_wire.ts";
import {
  type DecodedFrame,
  encodeFrame,
  FrameDecoder,
  FrameType,
  MAX_PAYLOAD_LENGTH,
} from "./frame.ts";
import { FrameWriter } from "./_frame_writer.ts";

const REQUEST = shimCodec("ttrpc.Request");
const RESPONSE = shimCodec("ttrpc.Response");

/** Highest stream id; once passed, the connection takes no new calls and retires. */
const MAX_STREAM_ID = 0xffff_ffff;
const READ_CHUNK = 32 * 1024;

/** One outgoing unary call. */
export interface CallRequest {
  service: string;
  method: string;
  payload: Uint8Array;
  /** Remaining deadline in ns; 0n for none. */
  timeoutNano: bigint;
  metadata: { key: string; value: string }[];
}

interface Pending {
  resolve(res: Response): void;
  reject(err: unknown): void;
}

/** A live connection; closes itself when the peer goes away and tells its owner. */
export class ClientConnection {
  #conn: Deno.Conn;
  #label: string;
  #writer: FrameWriter;
  #decoder = new FrameDecoder();
  #pending = new Map<number, Pending>();
  #nextId: number;
  #closed = false;
  #onClosed: (c: ClientConnection) => void;

  /**
   * @param conn the dialled connection
   * @param label the socket path, for messages
   * @param onClosed called once, when the connection is gone
   * @param firstStreamId 1 per the protocol; tests start higher to reach id exhaustion
   */
  constructor(
    conn: Deno.Conn,
    label: string,
    onClosed: (c: ClientConnection) => void,
    firstStreamId = 1,
  ) {
    this.#conn = conn;
    this.#label = label;
    this.#onClosed = onClosed;
    this.#nextId = firstStreamId;
    this.#writer = new FrameWriter(conn, (err) => {
      const msg = err instanceof Error ? err.message : String(err);
      this.close(statusError(`ttrpc write to ${label} failed: ${msg}`, Code.Unavailable));
    });
    void this.#readLoop();
  }

  /** False once closed or out of stream ids; the owner then dials a new connection. */
  get usable(): boolean {
    return !this.#closed && this.#nextId <= MAX_STREAM_ID;
  }

  /** Calls waiting for a response. */
  get pending(): number {
    return this.#pending.size;
  }

  /**
   * Sends a request and resolves with its Response. Aborting `signal` stops waiting (nothing is
   * sent on the wire, as with Go's client) and rejects with the signal's reason.
   */
  call(req: CallRequest, signal: AbortSignal): Promise<Response> {
    if (!this.usable) {
      return Promise.reject(
        statusError(`ttrpc connection to ${this.#label} is closed`, Code.Unavailable),
      );
    }
    if (signal.aborted) return Promise.reject(signal.reason);
    const bytes = REQUEST.encode(req);
    if (bytes.length > MAX_PAYLOAD_LENGTH) {
      return Promise.reject(
        statusError(
          `message length ${bytes.length} exceed maximum message size of ${MAX_PAYLOAD_LENGTH}`,
          Code.ResourceExhausted,
        ),
      );
    }
    // Allocating the id and queueing the frame happen in one synchronous step, so frames reach
    // the wire in id order, which the server requires.
    const id = this.#nextId;
    this.#nextId += 2;
    return new Promise<Response>((resolve, reject) => {
      const onAbort = () => {
        this.#pending.delete(id);
        reject(signal.reason);
        this.#retireIfDone();
      };
      signal.addEventListener("abort", onAbort, { once: true });
      this.#pending.set(id, {
        resolve: (res) => {
          signal.removeEventListener("abort", onAbort);
          resolve(res);
        },
        reject: (err) => {
          signal.removeEventListener("abort", onAbort);
          reject(err);
        },
      });
      this.#writer.send(encodeFrame(id, FrameType.Request, 0, bytes));
    });
  }

  /** Closes the connection; every waiting call fails with `reason`. */
  close(reason: unknown): void {
    if (this.#closed) return;
    this.#closed = true;
    const pending = [...this.#pending.values()];
    this.#pending.clear();
    for (const p of pending) p.reject(reason);
    try {
      this.#conn.close();
    } catch {
      // already closed
    }
    this.#onClosed(this);
  }

  /** A connection out of ids closes once its last call is answered. */
  #retireIfDone(): void {
    if (this.#nextId > MAX_STREAM_ID && this.#pending.size === 0) {
      this.close(statusError(`ttrpc connection to ${this.#label} retired`, Code.Unavailable));
    }
  }

  async #readLoop(): Promise<void> {
    const buf = new Uint8Array(READ_CHUNK);
    let cause = "closed by the server";
    try {
      while (!this.#closed) {
        const n = await this.#conn.read(buf);
        if (n === null) break;
        for (const frame of this.#decoder.push(buf.subarray(0, n))) this.#onFrame(frame);
      }
    } catch (err) {
      cause = err instanceof Error ? err.message : String(err);
    }
    this.close(
      statusError(`ttrpc connection to ${this.#label} lost: ${cause}`, Code.Unavailable),
    );
  }

  #onFrame(frame: DecodedFrame): void {
    const id = frame.header.streamId;
    // Data frames belong to streaming calls, which this client does not make: skipped whatever
    // their flags. Unknown types are ignored for forward compatibility.
    if (frame.header.type !== FrameType.Response) return;
    const waiter = this.#pending.get(id);
    if (waiter === undefined) return; // a call that was cancelled meanwhile
    this.#pending.delete(id);
    if (frame.oversized) {
      waiter.reject(
        statusError(
          `message length ${frame.header.length} exceed maximum message size of ${MAX_PAYLOAD_LENGTH}`,
          Code.ResourceExhausted,
        ),
      );
    } else {
      try {
        waiter.resolve(RESPONSE.decode(frame.payload));
      } catch (err) {
        const msg = err instanceof Error ? err.message : String(err);
        waiter.reject(
          statusError(`ttrpc response on stream ${id} does not decode: ${msg}`, Code.Internal),
        );
      }
    }
    this.#retireIfDone();
  }
}
