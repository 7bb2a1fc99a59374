/**
 * The process-table helpers a private containerd's teardown needs: finding processes by an
 * argument, their descendants, and waiting for them to be gone.
 *
 * @module
 */

import { processAlive } from "../linux/proc_stat.ts";

/** Processes (pid, argv) whose argv contains `needle` as a whole argument. */
export function processesWithArg(needle: string): { pid: number; argv: string[] }[] {
  const out: { pid: number; argv: string[] }[] = [];
  for (const e of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(e.name)) continue;
    try {
      const argv = Deno.readTextFileSync(`/proc/${e.name}/cmdline`).split("\0");
      if (argv.includes(needle)) out.push({ pid: Number(e.name), argv });
    } catch { /* exited */ }
  }
  return out;
}

/** All descendants of the given pids (children, grandchildren, ...). */
export function descendantsOf(pids: number[]): number[] {
  const children = new Map<number, number[]>();
  for (const e of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(e.name)) continue;
    try {
      const stat = Deno.readTextFileSync(`/proc/${e.name}/stat`);
      // The comm field may contain spaces and parens: ppid is the 2nd field after the last ")".
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      const list = children.get(ppid) ?? [];
      list.push(Number(e.name));
      children.set(ppid, list);
    } catch { /* exited */ }
  }
  const out: number[] = [];
  const queue = [...pids];
  while (queue.length > 0) {
    for (const c of children.get(queue.shift()!) ?? []) {
      if (!out.includes(c)) {
        out.push(c);
        queue.push(c);
      }
    }
  }
  return out;
}

/** Sends `sig` to `pid`; a process already gone is no error. */
export function kill(pid: number, sig: Deno.Signal): void {
  try {
    Deno.kill(pid, sig);
  } catch { /* already gone */ }
}

/** Resolves after `ms` milliseconds. */
export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Waits until none of `pids` is alive: true, or false after `ms` milliseconds. */
export async function waitGone(pids: number[], ms: number): Promise<boolean> {
  const until = Date.now() + ms;
  while (pids.some(processAlive)) {
    if (Date.now() > until) return false;
    await sleep(20);
  }
  return true;
}
