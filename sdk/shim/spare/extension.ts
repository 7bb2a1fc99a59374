/**
 * The warm spare as a server extension: once a server serves (cold or adopted), it spawns the
 * next spare, off `start`'s path, and counts its own start in the node-wide counters. Whether
 * there is a spare at all is the launcher's and the operator's (`./config.ts`: `SKIFF_SPARE`).
 *
 * @module
 */

import type { ServerExtension } from "../server/extension.ts";
import { loadSpareConfig } from "./config.ts";
import { SPARE_DAEMON_ENV } from "./handoff.ts";
import { spawnSpare } from "./spawn.ts";
import { countServerStart } from "./stats.ts";

/** Longest a shutting-down server waits for its own start to be counted. */
const COUNT_WAIT_MS = 2_000;

/**
 * The spare extension.
 *
 * @example Usage
 * ```ts ignore
 * await serveShim(shim, flags, { extensions: [spareExtension()] });
 * ```
 */
export function spareExtension(): ServerExtension {
  return {
    name: "spare",
    setup({ flags, logger, origin, socket, sharedPods }) {
      // A pod that joined a shared server took no spare and started no process.
      if (origin === "shared") return undefined;
      // Ours, not the environment containerd gave: the runtime's processes must not see it.
      const daemon = Deno.env.get(SPARE_DAEMON_ENV) ?? "";
      Deno.env.delete(SPARE_DAEMON_ENV);
      let counting: Promise<void> | undefined;
      return {
        async onServing({ spawn }) {
          const dir = socket.slice(0, socket.lastIndexOf("/")) || "/";
          const spare = await loadSpareConfig(flags.address, dir);
          if (!spare) return;
          // It loads at low priority while this server's container is created; a shared server
          // with room takes the next pods itself (its join point spawns the spare as it fills).
          if (!sharedPods) {
            setTimeout(() => {
              try {
                spawnSpare(spare, flags.address, flags.publishBinary, daemon, spawn);
              } catch (e) {
                logger.debug("no next spare", { error: (e as Error).message });
              }
            }, 0);
          }
          // Counted only for a containerd that exists: a server run by hand or by a test
          // harness leaves no counters behind.
          try {
            Deno.statSync(flags.address.replace(/^unix:\/\//, ""));
          } catch {
            return;
          }
          counting = countServerStart(spare.stats, origin).catch(() => {});
        },
        async onShutdown() {
          // A server whose container is gone at once (`ctr run --rm true`) can reach its exit
          // while its count still waits for the counters' lock behind parallel starts: let it
          // land (bounded), or the node's counters lose that start.
          if (!counting) return;
          let timer: ReturnType<typeof setTimeout> | undefined;
          await Promise.race([counting, new Promise((r) => timer = setTimeout(r, COUNT_WAIT_MS))]);
          clearTimeout(timer);
        },
      };
    },
  };
}
