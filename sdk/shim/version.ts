/**
 * skiff's own version (deno.json's), which `-v` prints beside the shim's.
 *
 * @module
 */

/**
 * The version of skiff a shim runs on.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { SKIFF_VERSION } from "@skiff/shim";
 * strictEqual(/^\d+\.\d+\.\d+/.test(SKIFF_VERSION), true);
 * ```
 */
export const SKIFF_VERSION: string = "0.1.0";
