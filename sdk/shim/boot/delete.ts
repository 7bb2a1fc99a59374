/**
 * The `delete` action: containerd runs `<shim> … -id ID -bundle B delete` after the shim's
 * connection closed (normally, or because the server died). It cleans up what a dead server
 * left (the container in the runtime, the rootfs mount, a stale socket) and prints a
 * `DeleteResponse` with exit status 137, as containerd expects.
 *
 * @module
 */

import { encodeDeleteResponse } from "../../../proto/wire.ts";
import type { ShimFlags } from "../contract/flags.ts";
import type { Shim } from "../shim.ts";
import { Logger } from "../logger.ts";
import { groupKey, socketAlive } from "../contract/server_socket.ts";
import {
  ADDRESS_FILE,
  opsSocketPath,
  shimSocketAddress,
  socketPath,
} from "../contract/socket_address.ts";
import { DEAD_SHIM_EXIT_STATUS, RUNTIME_DELETED_FILE } from "../contract/bundle_files.ts";
import { UPGRADE_STATE_SUFFIX } from "../contract/upgrade.ts";

export { DEAD_SHIM_EXIT_STATUS } from "../contract/bundle_files.ts";

/**
 * Runs `delete` and returns the marshalled `DeleteResponse`.
 *
 * @example Usage
 * ```ts ignore
 * const bytes = await runDelete(shim, flags);
 * await Deno.stdout.write(bytes);
 * ```
 */
export async function runDelete<T extends object>(
  shim: Shim<T>,
  flags: ShimFlags,
  logger: Logger = new Logger(),
): Promise<Uint8Array> {
  const bundle = flags.bundle || Deno.cwd();
  const [, pid, answer] = await Promise.all([
    cleanRuntime(shim, flags, bundle, logger),
    readInitPid(bundle),
    Deno.readFile(`${bundle}/${RUNTIME_DELETED_FILE}`).catch(() => undefined),
    removeDeadSocket(bundle, flags),
  ]);
  // After a clean Task Delete the server left the answer (the same, with that delete's time);
  // containerd ignores it then, the task being gone.
  if (answer && answer.length > 0) return answer;
  return encodeDeleteResponse({ pid, exitStatus: DEAD_SHIM_EXIT_STATUS, exitedAt: new Date() });
}

/**
 * Deletes the container in the runtime and unmounts its rootfs, unless the server already did
 * both (it left {@linkcode RUNTIME_DELETED_FILE}).
 */
async function cleanRuntime<T extends object>(
  shim: Shim<T>,
  flags: ShimFlags,
  bundle: string,
  logger: Logger,
): Promise<void> {
  if (await Deno.stat(`${bundle}/${RUNTIME_DELETED_FILE}`).then(() => true, () => false)) return;
  let options = shim.options.defaults() as T;
  try {
    options = JSON.parse(await Deno.readTextFile(`${bundle}/options.json`)) as T;
  } catch { /* never created: defaults rebuild the runtime command */ }
  // No reaper: `delete` is no subreaper, so the runtime command it spawns is its only child and
  // Deno reaps it (loading the reaper's FFI would cost this short-lived action ~10 ms).
  const runtime = shim.runtime({
    id: flags.id,
    namespace: flags.namespace,
    bundle,
    options,
    spawn: (cmd) => cmd.spawn(),
    logger,
  });
  // The runtime command runs while this process reads mountinfo: only the unmount waits for it
  // (the container is gone before its rootfs is unmounted, as with the Go shim).
  const deleted = runtime.delete(flags.id, { force: true }).catch((e) =>
    logger.warn("runtime delete failed", { id: flags.id, error: (e as Error).message })
  );
  await unmountLeftRootfs(`${bundle}/rootfs`, deleted, logger);
  await deleted;
}

/**
 * The server unmounts on a clean exit: read mountinfo first, and load libc only when a dead
 * server left something mounted (then unmount once the runtime has deleted the container).
 */
async function unmountLeftRootfs(
  rootfs: string,
  deleted: Promise<unknown>,
  logger: Logger,
): Promise<void> {
  const { mountsUnder, unmountAll } = await import("../../linux/mount.ts");
  if ((await mountsUnder(rootfs)).length === 0) return;
  await deleted;
  await unmountAll(rootfs).catch((e: unknown) =>
    logger.warn("unmount rootfs failed", { error: (e as Error).message })
  );
}

/**
 * A dead server leaves its socket behind; a live one (other containers in the group) keeps it.
 * `start` wrote the address it served on (with 2.3+'s socket_dir, not the default dir).
 */
async function removeDeadSocket(bundle: string, flags: ShimFlags): Promise<void> {
  const written = await Deno.readTextFile(`${bundle}/${ADDRESS_FILE}`).catch(() => "");
  if (!written.trim() && !flags.address) return;
  const path = socketPath(
    written.trim() ||
      shimSocketAddress(flags.address, flags.namespace, groupKey(bundle, flags.id)),
  );
  if (await socketAlive(path)) return;
  await Deno.remove(path).catch(() => {});
  // The operations endpoint's socket sits beside it (sdk/ops), and what a live upgrade that
  // died half-way leaves: its state file and a new socket not yet renamed onto the path.
  for (const p of [opsSocketPath(path), `${path}${UPGRADE_STATE_SUFFIX}`, `${path}.next`]) {
    await Deno.remove(p).catch(() => {});
  }
}

/** The init process's pid `start`/`create` recorded, or 0. */
async function readInitPid(bundle: string): Promise<number> {
  try {
    return Number((await Deno.readTextFile(`${bundle}/init.pid`)).trim()) || 0;
  } catch {
    return 0; // never created
  }
}
