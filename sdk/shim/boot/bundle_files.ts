/**
 * Files the server leaves in a container's bundle for the `delete` action to read.
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
 * ```ts ignore
 * await Deno.writeTextFile(`${bundle}/${RUNTIME_DELETED_FILE}`, "");
 * ```
 */
export const RUNTIME_DELETED_FILE = "skiff-runtime-deleted";

/**
 * The exit status a `delete` action reports (128+SIGKILL): what containerd's shims answer, and
 * what containerd publishes for a task whose shim died before deleting it.
 */
export const DEAD_SHIM_EXIT_STATUS = 137;
