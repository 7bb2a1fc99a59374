/**
 * The `delete` action: containerd runs `<shim> … -id ID -bundle B delete` after the shim's
 * connection closed (normally, or because the server died). It cleans up what a dead server
 * left (the container in the runtime, the rootfs mount, a stale socket) and prints a
 * `DeleteResponse` with exit status 137, as containerd expects.
 *
 * @module
 */

import { encodeDeleteResponse } from "./wire.ts";
import type { ShimFlags } from "../flags.ts";
import type { Shim } from "../shim.ts";
import { Logger } from "../logger.ts";
import { groupKey, socketAlive } from "./start.ts";
import { shimSocketAddress, socketPath } from "../socket_address.ts";

/** Exit status containerd reports for a task cleaned up after its shim died (128+SIGKILL). */
export const DEAD_SHIM_EXIT_STATUS = 137;

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
  await runtime.delete(flags.id, { force: true }).catch((e) =>
    logger.warn("runtime delete failed", { id: flags.id, error: (e as Error).message })
  );
  // The server unmounts on a clean exit: read mountinfo first, and load libc only when a dead
  // server left something mounted.
  const { mountsUnder, unmountAll } = await import("../../linux/mount.ts");
  if ((await mountsUnder(`${bundle}/rootfs`)).length > 0) {
    await unmountAll(`${bundle}/rootfs`).catch((e: unknown) =>
      logger.warn("unmount rootfs failed", { error: (e as Error).message })
    );
  }
  // A dead server leaves its socket behind; a live one (other containers in the group) keeps it.
  // `start` wrote the address it served on (with 2.3+'s socket_dir, not the default dir).
  const written = await Deno.readTextFile(`${bundle}/address`).catch(() => "");
  if (written.trim() || flags.address) {
    const path = socketPath(
      written.trim() ||
        shimSocketAddress(flags.address, flags.namespace, await groupKey(bundle, flags.id)),
    );
    if (!(await socketAlive(path))) {
      await Deno.remove(path).catch(() => {});
      // The operations endpoint's socket sits beside it (sdk/ops, OPS_SOCKET_SUFFIX).
      await Deno.remove(`${path}.ops`).catch(() => {});
    }
  }
  let pid = 0;
  try {
    pid = Number((await Deno.readTextFile(`${bundle}/init.pid`)).trim()) || 0;
  } catch { /* never created */ }
  return encodeDeleteResponse({ pid, exitStatus: DEAD_SHIM_EXIT_STATUS, exitedAt: new Date() });
}
