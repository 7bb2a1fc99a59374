/**
 * Files the server leaves in a container's bundle for the `delete` action to read.
 *
 * @module
 */

/**
 * Written by the server once the runtime has deleted the container and its rootfs is unmounted
 * (a Task `Delete` of the init process that succeeded); it holds the marshalled
 * `DeleteResponse` of that delete (pid, exit status, exit time). The `delete` action then has
 * nothing to clean in the runtime and prints it: the common case, after a clean exit, costs no
 * `runc delete` process, and a bundled launcher answers it without starting deno at all once
 * the server's socket is gone (`deleteFastPath` in sdk/testing/install.ts).
 *
 * @example Usage
 * ```ts ignore
 * await Deno.writeTextFile(`${bundle}/${RUNTIME_DELETED_FILE}`, "");
 * ```
 */
export const RUNTIME_DELETED_FILE = "skiff-runtime-deleted";
