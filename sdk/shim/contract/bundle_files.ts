/**
 * Files in a container's bundle that the actions, the server and the installed launchers
 * (`deleteFastPath` in sdk/install/install.ts, generated from these constants) agree on; the
 * `address` file is `ADDRESS_FILE` in socket_address.ts, which `start` loads anyway.
 *
 * @module
 */

/**
 * Written by the server once the runtime has deleted the container and its rootfs is unmounted
 * (a Task `Delete` of the init process that succeeded); it holds the `DeleteResponse` the
 * `delete` action answers with (the init's pid, {@linkcode DEAD_SHIM_EXIT_STATUS} as containerd's
 * shims always answer, the time of that delete). The `delete` action then has nothing to clean in
 * the runtime and prints it: the common case, after a clean exit, costs no
 * `runc delete` process, and a bundled launcher answers it without starting deno at all once
 * the server's socket is gone (`deleteFastPath` in sdk/install/install.ts).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { RUNTIME_DELETED_FILE } from "./bundle_files.ts";
 * const bundle = await Deno.makeTempDir();
 * await Deno.writeFile(`${bundle}/${RUNTIME_DELETED_FILE}`, new Uint8Array([0x10, 0x89, 0x01]));
 * strictEqual((await Deno.readFile(`${bundle}/${RUNTIME_DELETED_FILE}`)).length, 3);
 * await Deno.remove(bundle, { recursive: true });
 * ```
 */
export const RUNTIME_DELETED_FILE = "skiff-runtime-deleted";

/**
 * The exit status a `delete` action reports (128+SIGKILL): what containerd's shims answer, and
 * what containerd publishes for a task whose shim died before deleting it.
 */
export const DEAD_SHIM_EXIT_STATUS = 137;
