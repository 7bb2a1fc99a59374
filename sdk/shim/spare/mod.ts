/**
 * The warm spare's public surface for the rest of skiff (the operations endpoint, the testing
 * kit, benchmarks): where a containerd's spares live, a launcher's code identity, and the
 * node-wide start counters. The spare plugs into the server as `./extension.ts`, into `start`
 * as `./handoff.ts`, and runs as its own process from `./spare.ts`; nothing else in it is meant
 * to be imported from outside this folder.
 *
 * @module
 */

export { launcherCodeId, spareDir, spareDirCache } from "./config.ts";
export {
  countServerStart,
  readSpareStatsSync,
  serverSpareStats,
  type SpareStats,
  spareStatsPath,
} from "./stats.ts";
