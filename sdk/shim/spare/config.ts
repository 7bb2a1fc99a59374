/**
 * Where a shim binary's warm spare lives for one containerd, and whether there is one. A spare
 * is keyed by the installed code (the launcher's text, which names the content-hashed bundle and
 * the V8 flags) and by containerd's address: a reinstalled shim never finds an older spare, and
 * two containerds on one node never share one. It is on for bundled launchers unless
 * `SKIFF_SPARE=0`; source launchers never use one (their code can change under the same text).
 *
 * @module
 */

import { LAUNCHER_ENV } from "../contract/launcher_env.ts";
import { sha256Hex } from "../contract/sha256.ts";
import { DEFAULT_SOCKET_DIR } from "../contract/socket_address.ts";

/** Where one shim binary's spare lives for one containerd, and how it behaves. */
export interface SpareConfig {
  /** The directory of this containerd's spares (0700). */
  dir: string;
  /** The spare's handoff socket. */
  socket: string;
  /** The lock a live (or loading) spare holds. */
  lock: string;
  /** The counters file of this launcher. */
  stats: string;
  /** The installed code's identity. */
  codeId: string;
  /** The launcher that runs this shim. */
  launcher: string;
  /** Seconds an unused spare waits before it exits. */
  idleSeconds: number;
}

/** Default seconds an unused spare waits (`SKIFF_SPARE_IDLE_SECONDS`). */
export const DEFAULT_SPARE_IDLE_SECONDS = 600;

const OFF = /^(0|off|false|no)$/i;

/**
 * How long an unused spare waits: `SKIFF_SPARE_IDLE_SECONDS` when it is a positive number,
 * else {@linkcode DEFAULT_SPARE_IDLE_SECONDS}.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { spareIdleSeconds } from "./config.ts";
 * strictEqual(spareIdleSeconds(new Map([["SKIFF_SPARE_IDLE_SECONDS", "-1"]])), 600);
 * ```
 */
export function spareIdleSeconds(
  env: { get(key: string): string | undefined } = Deno.env,
): number {
  const idle = Number(env.get(LAUNCHER_ENV.spareIdleSeconds) ?? DEFAULT_SPARE_IDLE_SECONDS);
  return Number.isFinite(idle) && idle > 0 ? idle : DEFAULT_SPARE_IDLE_SECONDS;
}

/** Most pods a shared server may serve: beyond this, one process holds too much of a node's fate. */
export const MAX_SHARED_PODS = 1000;

/**
 * How many pods one server process may serve (`SKIFF_SHARED_PODS`): a number from 2 up turns
 * shared servers on; unset, empty, `0` or `1` is one pod per server (undefined). Anything else
 * is refused, naming the value: an operator's typo must not silently change a node's fate.
 *
 * @example Usage
 * ```ts
 * import { strictEqual, throws } from "node:assert/strict";
 * import { sharedPodsLimit } from "./config.ts";
 * strictEqual(sharedPodsLimit(new Map([["SKIFF_SHARED_PODS", "8"]])), 8);
 * strictEqual(sharedPodsLimit(new Map([["SKIFF_SHARED_PODS", "1"]])), undefined);
 * strictEqual(sharedPodsLimit(new Map()), undefined);
 * throws(() => sharedPodsLimit(new Map([["SKIFF_SHARED_PODS", "eight"]])), /SKIFF_SHARED_PODS="eight"/);
 * ```
 */
export function sharedPodsLimit(
  env: { get(key: string): string | undefined } = Deno.env,
): number | undefined {
  const text = (env.get(LAUNCHER_ENV.sharedPods) ?? "").trim();
  if (text === "" || text === "0" || text === "1") return undefined;
  const n = Number(text);
  if (!/^\d+$/.test(text) || n > MAX_SHARED_PODS) {
    throw new Error(
      `${LAUNCHER_ENV.sharedPods}="${text}": expected the most pods one shim server serves, ` +
        `a whole number from 2 to ${MAX_SHARED_PODS} (0 or 1: one pod per server)`,
    );
  }
  return n;
}

/** Where a shared server with room takes `start`s (`./shared.ts`), in the spares' directory. */
export interface SharedJoinPaths {
  /** The join socket (JSON lines, as a spare's handoff socket). */
  socket: string;
  /** The launcher's door (as a spare's, `./door.ts`). */
  door: string;
  /** The lock the open server holds: one server takes new pods at a time. */
  lock: string;
  /** The lock of the `start` that brings the next server up while none takes pods. */
  create: string;
}

/**
 * The join point of the shared servers of one launcher's code for one containerd and one of its
 * namespaces (a server serves the pods of its first pod's namespace only):
 * `shared-<code[:16]>-<sha256(namespace)[:8]>.*`.
 *
 * @param dir the spares' directory ({@linkcode spareDir})
 * @param codeId the launcher's code identity
 * @param namespace the containerd namespace
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { sharedJoinPaths } from "./config.ts";
 * const paths = sharedJoinPaths("/run/containerd/s/skiff-ab", "0123456789abcdef99", "k8s.io");
 * strictEqual(paths.door.startsWith("/run/containerd/s/skiff-ab/shared-0123456789abcdef-"), true);
 * ```
 */
export function sharedJoinPaths(dir: string, codeId: string, namespace: string): SharedJoinPaths {
  const base = `${dir}/shared-${codeId.slice(0, 16)}-${sha256Hex(namespace).slice(0, 8)}`;
  return {
    socket: `${base}.sock`,
    door: `${base}.door`,
    lock: `${base}.lock`,
    create: `${base}.create`,
  };
}

/**
 * How long a `start` (Deno's, or the launcher's shell) waits for a shared server another
 * `start` is bringing up, before it brings one up itself.
 */
export const CREATE_WAIT_MS = 30_000;

/**
 * How long a `start` (Deno's, or the launcher's shell holding `create`) waits for a spare that
 * is still loading: a cold start takes longer.
 */
export const LOADING_WAIT_MS = 2_000;

/** The launcher line that states its code identity (installShims writes it). */
const CODE_LINE = new RegExp(`^${LAUNCHER_ENV.code}=([0-9a-f]{64})$`, "m");

/**
 * The code identity of an installed launcher, from its text: the `SKIFF_SHIM_CODE=` line that
 * `installShims` writes (the SHA-256 of the rest of the text, so that `start` reads it from its
 * environment instead of hashing the file), else the SHA-256 of the whole text.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { launcherCodeId } from "./config.ts";
 * const id = "ab".repeat(32);
 * strictEqual(launcherCodeId(new TextEncoder().encode(`#!/bin/sh\nSKIFF_SHIM_CODE=${id}\n`)), id);
 * ```
 */
export function launcherCodeId(text: Uint8Array): string {
  const m = CODE_LINE.exec(new TextDecoder().decode(text));
  return m ? m[1] : sha256Hex(text);
}

/**
 * The code identity of an installed launcher file ({@linkcode launcherCodeId}).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { spareCodeId } from "./config.ts";
 * // A bundle launcher states its code identity in a SKIFF_SHIM_CODE= line.
 * const dir = Deno.makeTempDirSync();
 * const launcher = `${dir}/containerd-shim-skiff-runc-v2`;
 * Deno.writeTextFileSync(launcher, "#!/bin/sh\nSKIFF_SHIM_CODE=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n");
 * strictEqual(spareCodeId(launcher), "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export function spareCodeId(launcher: string): string {
  return launcherCodeId(Deno.readFileSync(launcher));
}

/**
 * The spare of this shim binary for containerd at `address`, or undefined when spares are off:
 * `SKIFF_SPARE=0`, no launcher (a shim run by hand), or a source launcher.
 *
 * @param address containerd's address (`-address`)
 * @param socketDir the directory of shim sockets
 * @param env the environment to read the settings from
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { spareConfig } from "./config.ts";
 * strictEqual(spareConfig("/run/containerd/containerd.sock", "/run/containerd/s", new Map()), undefined);
 * ```
 */
export function spareConfig(
  address: string,
  socketDir: string,
  env: { get(key: string): string | undefined } = Deno.env,
  knownCodeId?: string,
): SpareConfig | undefined {
  const launcher = spareLauncher(env);
  if (!launcher) return undefined;
  let codeId: string;
  try {
    codeId = knownCodeId ?? spareCodeId(launcher);
  } catch {
    return undefined; // the launcher is gone: nothing to key a spare on
  }
  const dir = spareDir(address, socketDir);
  const code = codeId.slice(0, 16);
  return {
    dir,
    socket: `${dir}/spare-${code}.sock`,
    lock: `${dir}/spare-${code}.lock`,
    stats: `${dir}/stats-${sha256Hex(launcher).slice(0, 16)}.json`,
    codeId,
    launcher,
    idleSeconds: spareIdleSeconds(env),
  };
}

/**
 * The directory of one containerd's spares and counters: `<socket dir>/skiff-<sha256(address)[:12]>`.
 *
 * @param address containerd's address (`-address`)
 * @param socketDir the directory of shim sockets
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { spareDir } from "./config.ts";
 * strictEqual(spareDir("/run/containerd/containerd.sock").startsWith("/run/containerd/s/skiff-"), true);
 * ```
 */
export function spareDir(address: string, socketDir: string = DEFAULT_SOCKET_DIR): string {
  return `${socketDir}/skiff-${sha256Hex(address).slice(0, 12)}`;
}

/**
 * Where the launcher's shell keeps {@linkcode spareDir}'s hash for `address`, so that a `start`
 * runs no `sha256sum` (`startDoorPath` in sdk/install/install.ts writes and reads it):
 * `<socket dir>/skiff-address-<address, '/' as '%'>`. Undefined for an address the shell does not
 * name a file after (not absolute, or with characters other than letters, digits and `/._-`):
 * its shell hashes at every start. It goes with the directory once that containerd is gone
 * (`tidySpareDir` in ./lifetime.ts).
 *
 * @param address containerd's address (`-address`)
 * @param socketDir the directory of shim sockets
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { spareDirCache } from "./config.ts";
 * strictEqual(spareDirCache("/run/containerd/containerd.sock"), "/run/containerd/s/skiff-address-%run%containerd%containerd.sock");
 * strictEqual(spareDirCache("/run/with space.sock"), undefined);
 * ```
 */
export function spareDirCache(
  address: string,
  socketDir: string = DEFAULT_SOCKET_DIR,
): string | undefined {
  if (!/^\/[A-Za-z0-9/._-]*$/.test(address)) return undefined;
  return `${socketDir}/skiff-address-${address.replaceAll("/", "%")}`;
}

/** The launcher a spare is keyed on, or undefined when spares are off. */
function spareLauncher(env: { get(key: string): string | undefined }): string | undefined {
  const launcher = env.get(LAUNCHER_ENV.launcher);
  if (
    !launcher || !env.get(LAUNCHER_ENV.bundle) || OFF.test(env.get(LAUNCHER_ENV.spare) ?? "")
  ) {
    return undefined;
  }
  return launcher;
}

/**
 * {@linkcode spareConfig} where time counts (`start`, a server that has just begun to serve):
 * the launcher's hash comes from WebCrypto (native: 0.5 ms here, against 2.5 ms for the
 * TypeScript SHA-256 of a launcher in V8's lite mode).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { loadSpareConfig } from "./config.ts";
 * // A bundle launcher states its code identity in a SKIFF_SHIM_CODE= line.
 * const dir = Deno.makeTempDirSync();
 * const launcher = `${dir}/containerd-shim-skiff-runc-v2`;
 * Deno.writeTextFileSync(launcher, "#!/bin/sh\nSKIFF_SHIM_CODE=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n");
 * // The environment a bundle launcher exports to the shim (its code identity included).
 * const env = new Map([
 *   ["SKIFF_SHIM_LAUNCHER", launcher],
 *   ["SKIFF_SHIM_BUNDLE", "1"],
 *   ["SKIFF_SHIM_CODE", "a".repeat(64)],
 * ]);
 * const spare = await loadSpareConfig("/run/containerd/containerd.sock", dir, env);
 * strictEqual(spare?.socket.endsWith("/spare-aaaaaaaaaaaaaaaa.sock"), true);
 * strictEqual(await loadSpareConfig("/run/containerd/containerd.sock", dir, new Map()), undefined);
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export async function loadSpareConfig(
  address: string,
  socketDir: string,
  env: { get(key: string): string | undefined } = Deno.env,
): Promise<SpareConfig | undefined> {
  const launcher = spareLauncher(env);
  if (!launcher) return undefined;
  // The launcher states it (and exported it): no file to read, nothing to hash.
  const stated = env.get(LAUNCHER_ENV.code);
  if (stated && /^[0-9a-f]{64}$/.test(stated)) return spareConfig(address, socketDir, env, stated);
  let text: Uint8Array<ArrayBuffer>;
  try {
    text = Deno.readFileSync(launcher);
  } catch {
    return undefined;
  }
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", text));
  const codeId = Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
  return spareConfig(address, socketDir, env, codeId);
}

/** Reads `\n`-terminated JSON lines (each at most 1 MiB) from a connection, keeping what follows. */
