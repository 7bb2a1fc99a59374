/**
 * The node the scale benchmark (bench/scale_bench.ts) measures: one private containerd with both
 * shims (Debian's Go `containerd-shim-runc-v2` and skiff's runc example, installed as
 * `deno task install` installs it: bundled launchers, warm spare on), optionally with CRI and the
 * two as its runtime handlers; and what the parts read from it: the shim processes of each side
 * (warm spares included: the node pays for them), their PSS, their CPU time, the spare counters.
 *
 * @module
 */

import {
  containerdVersions,
  type PrivateContainerd,
  type RuntimeConfig,
  startContainerd,
} from "../sdk/testing/containerd.ts";
import { launchedBy, type ShimProcess } from "../sdk/testing/containerd_shims.ts";
import { type ExampleInstallOptions, installExampleShims } from "../sdk/install/examples.ts";
import { processMemory } from "../sdk/linux/smaps.ts";
import { readSpareStatsSync, spareDir } from "../sdk/shim/spare/mod.ts";
import { sleep } from "../sdk/testing/processes.ts";

/** The two sides of every figure. */
export type Side = "go" | "skiff";
/** Both sides, in the order they are measured. */
export const SIDES: readonly Side[] = ["go", "skiff"];
/** Runtime types (`ctr run --runtime`). */
export const RUNTIME: Readonly<Record<Side, string>> = {
  go: "io.containerd.runc.v2",
  skiff: "io.containerd.skiff-runc.v2",
};
/** CRI runtime handler names. */
export const HANDLER: Readonly<Record<Side, string>> = { go: "runc", skiff: "skiff-runc" };
/** The Go shim's binary name. */
const GO_SHIM = "containerd-shim-runc-v2";

/** A private containerd with both shims, and where skiff's launcher is. */
export interface ScaleNode {
  /** The containerd. */
  c: PrivateContainerd;
  /** skiff's runc launcher (a `#!/bin/sh` script). */
  launcher: string;
  /** The Go shim binary containerd resolves (its binDir's, else PATH's). */
  goShim: string;
  /** Stops containerd: everything it started goes; the install stays (the floor reads it). */
  stopContainerd(): Promise<void>;
  /** Stops containerd and removes the install prefix. */
  stop(): Promise<void>;
}

/** The CRI handlers: both with their runc state in the instance's private root. */
function criHandlers(version: string): Record<string, RuntimeConfig> {
  // 1.6's CRI sends a runtime other than io.containerd.runc.v2 only a ConfigPath (see
  // tests/integration/cri_containerd_test.ts); 1.7+ sends the options table itself.
  const old = version.startsWith("1.6.");
  return {
    [HANDLER.go]: { runtimeType: RUNTIME.go, options: (c) => ({ Root: c.runcRoot }) },
    [HANDLER.skiff]: {
      runtimeType: RUNTIME.skiff,
      options: (c) => old ? { ConfigPath: `${c.dir}/skiff-runc.toml` } : { Root: c.runcRoot },
    },
  };
}

/**
 * Installs skiff's runc example into a temp prefix and starts a private containerd of the
 * version `want` (a prefix such as `2.1`) with it on PATH; with `cri`, CRI on and the two
 * handlers {@linkcode HANDLER}.
 */
export async function startNode(
  want: string,
  opts: { cri?: boolean; install?: Omit<ExampleInstallOptions, "prefix"> } = {},
): Promise<ScaleNode> {
  const v = containerdVersions().find((x) => x.version.startsWith(want));
  if (!v) throw new Error(`containerd ${want} not found; run tests/setup/prepare.sh`);
  const prefix = await Deno.makeTempDir({ prefix: "skiff-scale-" });
  try {
    const [launcher] = await installExampleShims({
      ...opts.install,
      prefix,
      shims: { "containerd-shim-skiff-runc-v2": "examples/runc/main.ts" },
    });
    const c = await startContainerd({
      binDir: v.binDir,
      extraPath: [launcher!.slice(0, launcher!.lastIndexOf("/"))],
      ...(opts.cri ? { runtimes: criHandlers(v.version), cri: { defaultHandler: "runc" } } : {}),
    });
    if (opts.cri) await Deno.writeTextFile(`${c.dir}/skiff-runc.toml`, `Root = "${c.runcRoot}"\n`);
    const goShim = [c.binDir, ...(Deno.env.get("PATH") ?? "").split(":")]
      .map((d) => `${d}/${GO_SHIM}`).find((p) => isFile(p)) ?? GO_SHIM;
    return {
      c,
      launcher: launcher!,
      goShim,
      stopContainerd: () => c.stop(),
      stop: async () => {
        await c.stop();
        await Deno.remove(prefix, { recursive: true }).catch(() => {});
      },
    };
  } catch (e) {
    await Deno.remove(prefix, { recursive: true }).catch(() => {});
    throw e;
  }
}

function isFile(path: string): boolean {
  try {
    return Deno.statSync(path).isFile;
  } catch {
    return false;
  }
}

/** Whether a shim process is the Go shim (its executable is `containerd-shim-runc-v2`). */
function isGo(p: ShimProcess): boolean {
  try {
    return Deno.readLinkSync(`/proc/${p.pid}/exe`).endsWith(`/${GO_SHIM}`);
  } catch {
    return p.argv[0]?.endsWith(GO_SHIM) ?? false;
  }
}

/**
 * Every shim process of one side under this containerd: processes whose argv has
 * `-address <its socket>` (servers, skiff's waiting spares, any `start`/`delete` still running),
 * the Go shim's by executable, everything else skiff's (the node runs only these two).
 */
export function shimProcesses(c: PrivateContainerd, side: Side): ShimProcess[] {
  return launchedBy(c.address).filter((p) => isGo(p) === (side === "go"));
}

/** Those of {@linkcode shimProcesses} that are skiff's waiting spares (argv has `-spare`). */
export function waitingSpares(c: PrivateContainerd): number[] {
  return c.spares().map((s) => s.pid);
}

/** Summed PSS of `pids` in MiB, from each process's `smaps_rollup`. */
export function pssMiB(pids: number[]): number {
  let total = 0;
  for (const pid of pids) total += processMemory(pid).pss;
  return total / (1024 * 1024);
}

const TICKS = 100; // USER_HZ on Linux

/**
 * CPU seconds (user + system) `pids` have used so far: their own, and their children's that they
 * waited for (runc, the container's init once reaped).
 */
export function cpuSeconds(pids: number[]): { self: number; children: number } {
  let self = 0;
  let children = 0;
  for (const pid of pids) {
    try {
      const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
      const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      // utime, stime, cutime, cstime: fields 14-17, i.e. 11-14 after the comm.
      self += Number(f[11]) + Number(f[12]);
      children += Number(f[13]) + Number(f[14]);
    } catch { /* gone */ }
  }
  return { self: self / TICKS, children: children / TICKS };
}

/** How long every memory figure waits after its containers started, as the issue measured it. */
export const SETTLE_MS = 8_000;

/** Waits {@linkcode SETTLE_MS} (or `ms`) for the shims to finish their after-start work. */
export function settle(ms: number = SETTLE_MS): Promise<void> {
  return sleep(ms);
}

/** The spare counters of every launcher under this containerd, summed. */
export function spareStats(c: PrivateContainerd): { adopted: number; cold: number } {
  const out = { adopted: 0, cold: 0 };
  try {
    for (const e of Deno.readDirSync(spareDir(c.address))) {
      if (!e.name.startsWith("stats-")) continue;
      const v = readSpareStatsSync(`${spareDir(c.address)}/${e.name}`);
      out.adopted += v.adopted;
      out.cold += v.cold;
    }
  } catch { /* no spare ever ran */ }
  return out;
}

/**
 * Waits (at most `ms`) until a skiff spare is waiting: a `-spare` process whose socket exists in
 * the spare dir; false when none came.
 */
export async function waitForSpare(c: PrivateContainerd, ms = 60_000): Promise<boolean> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    if (waitingSpares(c).length > 0) {
      try {
        if ([...Deno.readDirSync(spareDir(c.address))].some((e) => e.name.endsWith(".sock"))) {
          return true;
        }
      } catch { /* not yet */ }
    }
    await sleep(100);
  }
  return false;
}

/**
 * Waits (at most `ms`) until the side's only shim processes left are waiting spares; returns
 * the pids still serving after that (none on a clean teardown).
 */
export async function waitShimsGone(c: PrivateContainerd, side: Side, ms = 60_000) {
  const until = Date.now() + ms;
  for (;;) {
    const spares = new Set(waitingSpares(c));
    const left = shimProcesses(c, side).filter((p) => !spares.has(p.pid)).map((p) => p.pid);
    if (left.length === 0 || Date.now() > until) return left;
    await sleep(200);
  }
}

/** The load average line (`/proc/loadavg`'s first three fields). */
export function loadavg(): string {
  return Deno.readTextFileSync("/proc/loadavg").split(" ").slice(0, 3).join(" ");
}
