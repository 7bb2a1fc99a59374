/**
 * The launcher contract: the environment variables through which an installed launcher, `start`,
 * the server it spawns and the warm spare talk, named once. The generated launcher shell
 * (`sdk/install/install.ts`) writes these names and the TypeScript reads them from here, so a
 * rename is one edit and a typo does not compile.
 *
 * @module
 */

/**
 * Every variable of the contract, by role.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { LAUNCHER_ENV } from "./launcher_env.ts";
 * strictEqual(LAUNCHER_ENV.launcher, "SKIFF_SHIM_LAUNCHER");
 * ```
 */
export const LAUNCHER_ENV = {
  /** The launcher's own path (`$0`): `start` runs it again for a cold server, and a spare too. */
  launcher: "SKIFF_SHIM_LAUNCHER",
  /** The bundle a bundle launcher runs (its content-hashed path); unset for source launchers. */
  bundle: "SKIFF_SHIM_BUNDLE",
  /** The launcher's code identity (the SHA-256 of the rest of its text), a spare's key. */
  code: "SKIFF_SHIM_CODE",
  /** `0`/`false`/`off`/`no` turns the warm spare off (containerd's environment wins). */
  spare: "SKIFF_SPARE",
  /** Seconds an unused spare waits before it leaves. */
  spareIdleSeconds: "SKIFF_SPARE_IDLE_SECONDS",
  /** containerd's process (`<pid>:<start time>`) for a server or spare; taken out before runtimes run. */
  spareDaemon: "SKIFF_SPARE_DAEMON",
  /** The priority a spare returns to once a start connects. */
  spareNice: "SKIFF_SPARE_NICE",
  /** `start`'s ready socket, named to the cold server it spawns; dropped once used. */
  readySocket: "SKIFF_READY_SOCKET",
  /** A live upgrade's state file, named to the code the server re-executes into; dropped once read. */
  upgradeState: "SKIFF_UPGRADE_STATE",
  /** `0` keeps a launcher's `start` off the warm spare's door (Deno's `start` then runs). */
  spareDoor: "SKIFF_SPARE_DOOR",
  /** Most pods one server process serves (shared servers); unset, `0` or `1`: one pod each. */
  sharedPods: "SKIFF_SHARED_PODS",
  /**
   * The fd on which the launcher's shell holds the shared servers' `create` lock for Deno's
   * `start` (held until that process exits); the server's launcher closes it and drops this.
   */
  createFd: "SKIFF_SHARED_CREATE_FD",
} as const;

/**
 * What a bundle launcher exports to the shim whatever containerd's environment says
 * (`bundleLauncherScript`; a spare answering the launcher's door adds them, since it reads the
 * shell's environment as containerd gave it).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { LAUNCHER_SETS } from "./launcher_env.ts";
 * strictEqual(LAUNCHER_SETS.includes("SKIFF_SHIM_CODE"), true);
 * ```
 */
export const LAUNCHER_SETS: readonly string[] = [
  "DENO_DIR",
  "DENO_NO_UPDATE_CHECK",
  LAUNCHER_ENV.launcher,
  LAUNCHER_ENV.bundle,
  LAUNCHER_ENV.code,
];

/**
 * What a bundle launcher exports only where containerd's environment has no value of its own.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { LAUNCHER_DEFAULTS } from "./launcher_env.ts";
 * strictEqual(LAUNCHER_DEFAULTS.includes("MALLOC_ARENA_MAX"), true);
 * ```
 */
export const LAUNCHER_DEFAULTS: readonly string[] = [
  "MALLOC_ARENA_MAX",
  LAUNCHER_ENV.spare,
  LAUNCHER_ENV.spareIdleSeconds,
  LAUNCHER_ENV.sharedPods,
];

/** The name of one variable of {@linkcode LAUNCHER_ENV}. */
export type LauncherEnvName = (typeof LAUNCHER_ENV)[keyof typeof LAUNCHER_ENV];
