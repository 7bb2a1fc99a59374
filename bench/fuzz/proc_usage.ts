/**
 * What a process holds and spends, from /proc: open descriptors (and how many are sockets),
 * RSS and PSS, and CPU time used over an interval.
 *
 * @example Usage
 * ```ts ignore
 * const before = usageOf(pid);
 * const cpu = await cpuPercent(pid, 2000);
 * console.log(before.fds, before.rssKiB, cpu);
 * ```
 *
 * @module
 */

/** A snapshot of one process's resources. */
export interface ProcUsage {
  /** Open descriptors. */
  fds: number;
  /** Of those, sockets. */
  sockets: number;
  /** Resident set size, KiB (smaps_rollup `Rss`). */
  rssKiB: number;
  /** Proportional set size, KiB (smaps_rollup `Pss`). */
  pssKiB: number;
}

/**
 * Descriptors, sockets, RSS and PSS of `pid` now.
 *
 * @param pid the process
 * @returns the snapshot
 */
export function usageOf(pid: number): ProcUsage {
  let fds = 0;
  let sockets = 0;
  for (const e of Deno.readDirSync(`/proc/${pid}/fd`)) {
    fds++;
    try {
      if (Deno.readLinkSync(`/proc/${pid}/fd/${e.name}`).startsWith("socket:")) sockets++;
    } catch { /* closed meanwhile */ }
  }
  const rollup = Deno.readTextFileSync(`/proc/${pid}/smaps_rollup`);
  const kib = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(rollup)?.[1]);
  return { fds, sockets, rssKiB: kib("Rss"), pssKiB: kib("Pss") };
}

/** utime + stime of `pid` in clock ticks (USER_HZ, 100 on Linux). */
export function cpuTicks(pid: number): number {
  const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
  // comm may hold spaces and parens: fields after the last ")" start at field 3 (state).
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return Number(f[11]) + Number(f[12]);
}

/**
 * CPU `pid` used over the next `ms` milliseconds, in percent of one core.
 *
 * @param pid the process
 * @param ms how long to measure
 * @returns percent of one core (100 = one core busy the whole interval)
 */
export async function cpuPercent(pid: number, ms: number): Promise<number> {
  const t0 = cpuTicks(pid);
  const w0 = performance.now();
  await new Promise((r) => setTimeout(r, ms));
  const t1 = cpuTicks(pid);
  const wall = (performance.now() - w0) / 1000;
  return ((t1 - t0) / 100 / wall) * 100;
}

/** A one-line summary, for logs and tables. */
export function formatUsage(u: ProcUsage): string {
  return `fds ${u.fds} (${u.sockets} sockets), RSS ${(u.rssKiB / 1024).toFixed(1)} MiB, ` +
    `PSS ${(u.pssKiB / 1024).toFixed(1)} MiB`;
}
