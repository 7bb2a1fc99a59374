/**
 * What a live upgrade's three parties agree on: the `upgrade` command, the server that
 * re-executes itself, and the code it re-executes into. The state file's format is versioned:
 * code that does not know a format refuses it in its check, before anything is touched.
 *
 * @module
 */

/** The state format this code writes and reads. */
export const UPGRADE_STATE_FORMAT = "skiff.upgrade/1";

/**
 * The state file's name beside the server's socket (`<socket>.upgrade`); the `delete` action
 * removes one a failed upgrade left.
 */
export const UPGRADE_STATE_SUFFIX = ".upgrade";

/** The flag that asks installed code whether it can take a state format (`-upgrade-check F`). */
export const UPGRADE_CHECK_FLAG = "upgrade-check";

/**
 * How a server that is shutting down answers an upgrade (status Unavailable): its containers
 * are gone, so the `upgrade` command reports it as ended, not as a failure.
 */
export const UPGRADE_ENDED = "ended";

/** The private ttrpc service a shim serves on its own socket, and its one method. */
export const UPGRADE_SERVICE = "skiff.shim.v1.Upgrade";
/** See {@linkcode UPGRADE_SERVICE}. */
export const UPGRADE_METHOD = "Upgrade";

/**
 * What the `upgrade` command asks a shim.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { UpgradeRequest } from "./upgrade.ts";
 * const r: UpgradeRequest = { token: "a1b2", force: false };
 * strictEqual(r.force, false);
 * ```
 */
export interface UpgradeRequest {
  /** Chosen by the caller; the upgraded code answers the call that carries it. */
  token: string;
  /** Re-execute even when the installed code is the code running. */
  force?: boolean;
  /** How long to wait for in-flight calls and exits to settle (ms); default 5000. */
  settleTimeoutMs?: number;
}

/**
 * A shim's answer: the code before and after, and how long containerd's requests were held.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { UpgradeReport } from "./upgrade.ts";
 * const r: UpgradeReport = {
 *   pid: 4242, from: { code: "aa", version: "0.9.0" }, to: { code: "bb", version: "0.9.1" },
 *   upgraded: true, heldMs: 180, containers: 1, connections: 2,
 * };
 * strictEqual(r.upgraded, true);
 * ```
 */
export interface UpgradeReport {
  /** The shim's pid (unchanged). */
  pid: number;
  /** The code it ran. */
  from: CodeIdentity;
  /** The code it runs now. */
  to: CodeIdentity;
  /** False when nothing was done (the installed code already runs). */
  upgraded: boolean;
  /** From holding containerd's requests to serving them again, in ms. */
  heldMs: number;
  /** Containers carried over. */
  containers: number;
  /** Connections carried over. */
  connections: number;
}

/**
 * Which code a shim runs: the launcher's code identity and skiff's version.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { CodeIdentity } from "./upgrade.ts";
 * const c: CodeIdentity = { code: "unknown", version: "0.9.0" };
 * strictEqual(c.version, "0.9.0");
 * ```
 */
export interface CodeIdentity {
  /** The launcher's code identity (`SKIFF_SHIM_CODE`), or "unknown". */
  code: string;
  /** skiff's version. */
  version: string;
}

/**
 * The state file a server writes before it re-executes: its format, then the parts each layer
 * carries (the ttrpc connections, the containers); the code that reads it checks the format
 * first.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { UPGRADE_STATE_FORMAT, type UpgradeState } from "./upgrade.ts";
 * const s: UpgradeState = {
 *   format: UPGRADE_STATE_FORMAT, token: "t", from: { code: "aa", version: "0.9.0" },
 *   heldAt: 0, socket: "/run/containerd/s/x", bundle: "/b", listener: 5, connections: [], containers: [],
 *   sandboxes: [],
 *   inheritedOptions: null,
 * };
 * strictEqual(s.format, "skiff.upgrade/1");
 * ```
 */
export interface UpgradeState {
  /** {@linkcode UPGRADE_STATE_FORMAT} of the code that wrote it. */
  format: string;
  /** The token of the request that started it. */
  token: string;
  /** The code that wrote it. */
  from: CodeIdentity;
  /** When requests were first held (ms since the epoch). */
  heldAt: number;
  /** The server's socket path. */
  socket: string;
  /** The bundle the server was started in. */
  bundle: string;
  /** The listening socket's descriptor. */
  listener: number;
  /** Each connection: its descriptor and what the ttrpc server carries for it (base64 bytes). */
  connections: {
    fd: number;
    lastStreamId: number;
    replay: { id: number; payload: string }[];
    partial: string;
  }[];
  /** The containers (sdk/shim/server/carry.ts's `ContainerCarry`). */
  containers: unknown[];
  /** The Sandbox API's sandboxes (sdk/shim/server/sandbox_service.ts's `SandboxCarry`). */
  sandboxes: unknown[];
  /** The runtime options `start` handed the server, if any. */
  inheritedOptions: unknown;
  /**
   * The shim's own state (`Shim.carryUpgrade`, e.g. a VM): descriptors kept open across
   * `execve`, by name, and plain data.
   */
  runtime?: { descriptors?: Record<string, number>; data?: unknown };
  /**
   * How to start the code that wrote this state again, in place: its own command line and
   * environment. The code it re-executed into runs it when it cannot take the state.
   */
  rollback?: { path: string; argv: string[]; env: Record<string, string> };
  /** Set by code that could not take the state and ran {@linkcode UpgradeState.rollback}: why. */
  failed?: { code: CodeIdentity; error: string };
}

/**
 * Reads a state file's text, refusing a format this code does not know.
 *
 * @param text the file's text
 * @throws {Error} naming the format found and the one this code reads
 * @example Usage
 * ```ts
 * import { throws } from "node:assert/strict";
 * import { parseUpgradeState } from "./upgrade.ts";
 * throws(() => parseUpgradeState('{"format":"skiff.upgrade/99"}'), /skiff.upgrade\/99/);
 * ```
 */
export function parseUpgradeState(text: string): UpgradeState {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new Error(`live upgrade state is not JSON: ${(e as Error).message}`);
  }
  const s = raw as Partial<UpgradeState> | null;
  if (!s || typeof s !== "object" || typeof s.format !== "string") {
    throw new Error("live upgrade state has no format");
  }
  checkUpgradeFormat(s.format);
  for (
    const key of [
      "token",
      "socket",
      "bundle",
      "listener",
      "connections",
      "containers",
      "sandboxes",
    ] as const
  ) {
    if (s[key] === undefined) throw new Error(`live upgrade state lacks "${key}"`);
  }
  return s as UpgradeState;
}

/**
 * Refuses a state format this code cannot take.
 *
 * @param format the format the old code writes
 * @throws {Error} naming both formats
 * @example Usage
 * ```ts
 * import { doesNotThrow } from "node:assert/strict";
 * import { checkUpgradeFormat, UPGRADE_STATE_FORMAT } from "./upgrade.ts";
 * doesNotThrow(() => checkUpgradeFormat(UPGRADE_STATE_FORMAT));
 * ```
 */
export function checkUpgradeFormat(format: string): void {
  if (format !== UPGRADE_STATE_FORMAT) {
    throw new Error(
      `live upgrade state format "${format}" is not one this code reads ("${UPGRADE_STATE_FORMAT}")`,
    );
  }
}

/**
 * The wire codec of the upgrade service's messages: one protobuf `string` field (1) holding
 * JSON, so both ends need no generated code.
 *
 * @example Usage
 * ```ts
 * import { deepStrictEqual } from "node:assert/strict";
 * import { jsonMessage } from "./upgrade.ts";
 * const codec = jsonMessage<{ token: string }>("skiff.shim.v1.UpgradeRequest");
 * deepStrictEqual(codec.decode(codec.encode({ token: "x" })), { token: "x" });
 * ```
 */
export function jsonMessage<T>(typeName: string): {
  typeName: string;
  encode(message: T): Uint8Array;
  decode(bytes: Uint8Array): T;
} {
  return {
    typeName,
    encode(message: T): Uint8Array {
      const body = new TextEncoder().encode(JSON.stringify(message));
      const len: number[] = [];
      for (let n = body.length;; n >>>= 7) {
        if (n < 0x80) {
          len.push(n);
          break;
        }
        len.push((n & 0x7f) | 0x80);
      }
      const out = new Uint8Array(1 + len.length + body.length);
      out[0] = 0x0a; // field 1, length-delimited
      out.set(len, 1);
      out.set(body, 1 + len.length);
      return out;
    },
    decode(bytes: Uint8Array): T {
      if (bytes.length === 0) return {} as T;
      if (bytes[0] !== 0x0a) throw new Error(`${typeName}: field 1 (string) expected first`);
      let len = 0;
      let pos = 1;
      for (let shift = 0; pos < bytes.length; shift += 7) {
        const b = bytes[pos++];
        len |= (b & 0x7f) << shift;
        if (b < 0x80) break;
      }
      if (pos + len > bytes.length) throw new Error(`${typeName}: truncated`);
      return JSON.parse(new TextDecoder().decode(bytes.subarray(pos, pos + len))) as T;
    },
  };
}

/**
 * Base64 of bytes, for the state file.
 *
 * @param bytes the bytes
 * @example Usage
 * ```ts
 * import { deepStrictEqual } from "node:assert/strict";
 * import { fromBase64, toBase64 } from "./upgrade.ts";
 * deepStrictEqual(fromBase64(toBase64(new Uint8Array([1, 2, 250]))), new Uint8Array([1, 2, 250]));
 * ```
 */
export function toBase64(bytes: Uint8Array): string {
  let s = "";
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s);
}

/**
 * Bytes of base64 text.
 *
 * @param text the base64 text
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { fromBase64 } from "./upgrade.ts";
 * strictEqual(fromBase64("AQI=").length, 2);
 * ```
 */
export function fromBase64(text: string): Uint8Array {
  return Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
}

/**
 * The upgrade service's request codec, shared by the command and the server.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { UPGRADE_REQUEST } from "./upgrade.ts";
 * strictEqual(UPGRADE_REQUEST.decode(UPGRADE_REQUEST.encode({ token: "t" })).token, "t");
 * ```
 */
export const UPGRADE_REQUEST: ReturnType<typeof jsonMessage<UpgradeRequest>> = jsonMessage<
  UpgradeRequest
>("skiff.shim.v1.UpgradeRequest");

/**
 * The upgrade service's answer codec, shared by the command and the server.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { UPGRADE_REPORT } from "./upgrade.ts";
 * strictEqual(UPGRADE_REPORT.typeName, "skiff.shim.v1.UpgradeReport");
 * ```
 */
export const UPGRADE_REPORT: ReturnType<typeof jsonMessage<UpgradeReport>> = jsonMessage<
  UpgradeReport
>("skiff.shim.v1.UpgradeReport");
