/**
 * The hostile-peer fuzz against real shims: a private containerd with skiff's runc example shim
 * (and, on request, containerd's Go runc shim), one running container per shim, the seeded
 * fuzzer on the shim's socket, then what the shim holds and spends afterwards and whether
 * containerd can still exec in, kill and delete the container. The CI test
 * (tests/integration/ttrpc_fuzz_containerd_test.ts) and `deno task fuzz-ttrpc` share it.
 *
 * @example Usage
 * ```ts ignore
 * const rows = await fuzzShims({ binDir: "/usr/bin", frames: 2000, seed: 1, shims: ["skiff"] });
 * console.log(fuzzTable(rows));
 * ```
 *
 * @module
 */

import { type Bed, type ShimUnderTest, startBed } from "../soak/bed.ts";
import { shimOf } from "../soak/procs.ts";
import { cpuPercent, formatUsage, type ProcUsage, usageOf } from "./proc_usage.ts";
import { fuzzTtrpc, type TtrpcFuzzStats } from "./ttrpc_fuzz.ts";
import { fuzzLines } from "./line_fuzz.ts";

/** Which of a shim's sockets to fuzz ("spare": the warm spare's, measured on the spare). */
export type FuzzTarget = "ttrpc" | "ops" | "spare";

/** Options of {@linkcode fuzzShims}. */
export interface ShimFuzzOptions {
  /** containerd's binary dir (containerd, ctr, containerd-shim-runc-v2). */
  binDir: string;
  /** Frames (ttrpc) or chunks (ops, spare) to send per shim. */
  frames: number;
  /** The fuzzer's seed. */
  seed: number;
  /** Shims to fuzz: "skiff" (the runc example) and/or "go" (containerd's runc shim). */
  shims: ("skiff" | "go")[];
  /** Which socket (default "ttrpc"; "ops" and "spare" apply to skiff only). */
  target?: FuzzTarget;
  /** Extra environment for skiff's shim (e.g. SKIFF_OPS=1 for the ops endpoint). */
  shimEnv?: Record<string, string>;
  /** Fuzz a skiff server adopted from a warm spare (a first container is run before). */
  adopted?: boolean;
  /** Run containerd (and so the shims) at debug level. */
  debug?: boolean;
  /** Leave some connections open, unfinished (`TtrpcFuzzOptions.hold`), through the measure. */
  hold?: { chance: number; max: number };
  /** After the fuzzer stops, wait up to this long for descriptors to return (default 60000). */
  settleMs?: number;
  /** Progress lines. */
  log?: (line: string) => void;
}

/** One shim's outcome. */
export interface ShimFuzzRow {
  /** `skiff-runc` or `go-runc`. */
  shim: string;
  /** The socket fuzzed. */
  target: FuzzTarget;
  /** Before the fuzz (after the container settled). */
  before: ProcUsage;
  /** After the fuzz and the settle wait; undefined when the shim died. */
  after: ProcUsage | undefined;
  /** Highest descriptor count seen while fuzzing. */
  peakFds: number;
  /** CPU use of the shim over 2 s once settled, percent of one core. */
  cpuAfter: number | undefined;
  /** What the fuzzer sent. */
  stats: TtrpcFuzzStats;
  /** Wall time of the fuzz, ms. */
  fuzzMs: number;
  /** Shim still alive afterwards. */
  alive: boolean;
  /** The server was a warm spare adopted for this container. */
  adopted?: boolean;
  /** containerd's view of the task afterwards (`ctr task ls` status). */
  taskStatus: string;
  /** `ctr task exec ... true` exit code (undefined when not tried). */
  execCode: number | undefined;
  /** Kill, wait for STOPPED, delete task and container all succeeded. */
  killDeleteOk: boolean;
  /** Problems seen, for the report. */
  problems: string[];
}

async function sha256Hex(text: string): Promise<string> {
  const h = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)));
  return Array.from(h, (b) => b.toString(16).padStart(2, "0")).join("");
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

function alive(pid: number): boolean {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    return stat.slice(stat.lastIndexOf(")") + 2)[0] !== "Z";
  } catch {
    return false;
  }
}

async function taskStatus(bed: Bed, id: string): Promise<string> {
  const r = await bed.ctr(["tasks", "ls"], 30_000);
  for (const line of r.stdout.split("\n").slice(1)) {
    const [tid, , status] = line.trim().split(/\s+/);
    if (tid === id) return status ?? "?";
  }
  return r.code === 0 ? "absent" : `ctr failed: ${r.stderr.trim()}`;
}

/** Descriptors come back down: waits until `pid` holds at most `fds`, or `ms` passed. */
async function settle(pid: number, fds: number, ms: number): Promise<void> {
  const until = Date.now() + ms;
  while (Date.now() < until && alive(pid)) {
    if (usageOf(pid).fds <= fds) return;
    await sleep(250);
  }
}

async function fuzzOne(
  bed: Bed,
  shim: ShimUnderTest,
  opts: ShimFuzzOptions,
): Promise<ShimFuzzRow> {
  const log = opts.log ?? (() => {});
  const target = opts.target ?? "ttrpc";
  const id = `fuzz-${shim.label}-${crypto.randomUUID().slice(0, 6)}`;
  const run = await bed.runDetached(shim, id);
  if (run.code !== 0) throw new Error(`ctr run ${id} (${shim.label}): ${run.stderr}`);
  const socket = `/run/containerd/s/${await sha256Hex(`${bed.c.address}/${bed.ns}/${id}`)}`;
  // A server adopted from a warm spare keeps the spare's argv (no -id): find it by its socket.
  const pid = shimOf(bed.c, bed.ns, id) ?? socketOwner(socket);
  if (pid === undefined) throw new Error(`no shim process found for ${id}`);
  const path = target === "ttrpc" ? socket : `${socket}.ops`;
  // The container's start-up work (a first trim, a spare being spawned) is over before the
  // baseline is taken; then a first status call opens and closes containerd's usual connection.
  await sleep(3000);
  await taskStatus(bed, id);
  await sleep(1000);
  const before = usageOf(pid);
  const adopted = Deno.readTextFileSync(`/proc/${pid}/cmdline`).split("\0").includes("-spare");
  log(
    `${shim.label} (pid ${pid}${adopted ? ", adopted from a spare" : ""}) ${target} ${path}: ` +
      `before ${formatUsage(before)}`,
  );
  let peakFds = before.fds;
  const sampler = setInterval(() => {
    try {
      peakFds = Math.max(peakFds, usageOf(pid).fds);
    } catch { /* gone */ }
  }, 500);
  const t0 = performance.now();
  let stats: TtrpcFuzzStats;
  const held: Deno.Conn[] = [];
  const hold = opts.hold ? { ...opts.hold, into: held } : undefined;
  try {
    stats = target === "ttrpc"
      ? await fuzzTtrpc({
        path,
        frames: opts.frames,
        seed: opts.seed,
        log,
        ...(hold ? { hold } : {}),
      })
      : await fuzzLines({
        path,
        chunks: opts.frames,
        seed: opts.seed,
        http: target === "ops",
        log,
        ...(hold ? { hold } : {}),
      });
  } finally {
    clearInterval(sampler);
  }
  const fuzzMs = performance.now() - t0;
  const problems: string[] = [];
  // The held connections stay open through the measurement: the server must drop them itself.
  await settle(pid, before.fds, opts.settleMs ?? 60_000);
  const up = alive(pid);
  const after = up ? usageOf(pid) : undefined;
  const cpuAfter = up ? await cpuPercent(pid, 2000) : undefined;
  for (const c of held) {
    try {
      c.close();
    } catch { /* closed */ }
  }
  log(
    `${shim.label}: after ${after ? formatUsage(after) : "shim gone"}, peak fds ${peakFds}, ` +
      `CPU ${cpuAfter?.toFixed(0) ?? "-"}% ` +
      `(${stats.connections} connections, ${stats.frames} frames, ${fuzzMs.toFixed(0)} ms)`,
  );
  const status = await taskStatus(bed, id);
  if (status !== "RUNNING") problems.push(`task ${id} is ${status} after the fuzz`);
  let execCode: number | undefined;
  let killDeleteOk = false;
  if (status === "RUNNING") {
    const exec = await bed.ctr(["tasks", "exec", "--exec-id", "after-fuzz", id, "true"], 60_000);
    execCode = exec.code;
    if (exec.code !== 0) problems.push(`exec after the fuzz: ${exec.code} ${exec.stderr.trim()}`);
  }
  const kill = await bed.ctr(["tasks", "kill", "-s", "SIGKILL", id], 60_000);
  let stopped = false;
  for (let i = 0; i < 240 && kill.code === 0; i++) {
    const s = await taskStatus(bed, id);
    if (s === "STOPPED") {
      stopped = true;
      break;
    }
    await sleep(250);
  }
  const delTask = await bed.ctr(["tasks", "delete", id], 60_000);
  const delContainer = await bed.ctr(["containers", "delete", id], 60_000);
  killDeleteOk = kill.code === 0 && stopped && delTask.code === 0 && delContainer.code === 0;
  if (!killDeleteOk) {
    problems.push(
      `kill ${kill.code} ${kill.stderr.trim()}, stopped ${stopped}, ` +
        `task delete ${delTask.code} ${delTask.stderr.trim()}, ` +
        `container delete ${delContainer.code} ${delContainer.stderr.trim()}`,
    );
  }
  return {
    shim: shim.label,
    target,
    before,
    after,
    peakFds,
    cpuAfter,
    stats,
    fuzzMs,
    alive: up,
    adopted,
    taskStatus: status,
    execCode,
    killDeleteOk,
    problems,
  };
}

/** The process holding the listening unix socket bound to `path`. */
export function socketOwner(path: string): number | undefined {
  // /proc/net/unix: Num RefCount Protocol Flags Type St Inode Path; listening: Flags 00010000.
  let inode: string | undefined;
  for (const line of Deno.readTextFileSync("/proc/net/unix").split("\n").slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f[7] === path && f[3] === "00010000") inode = f[6];
  }
  if (inode === undefined) return undefined;
  const link = `socket:[${inode}]`;
  for (const p of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(p.name)) continue;
    try {
      for (const fd of Deno.readDirSync(`/proc/${p.name}/fd`)) {
        if (Deno.readLinkSync(`/proc/${p.name}/fd/${fd.name}`) === link) return Number(p.name);
      }
    } catch { /* gone or not ours to read */ }
  }
  return undefined;
}

/** The waiting warm spare of this bed's containerd: its pid and handoff socket. */
export function waitingSpare(bed: Bed): { pid: number; socket: string } | undefined {
  for (const p of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(p.name)) continue;
    let argv: string[];
    try {
      argv = Deno.readTextFileSync(`/proc/${p.name}/cmdline`).split("\0");
    } catch {
      continue;
    }
    const address = argv[argv.indexOf("-address") + 1] ?? "";
    if (!argv.includes("-spare") || !address.endsWith(bed.c.address)) continue;
    const socket = argv[argv.indexOf("-socket") + 1];
    // Still waiting: its socket exists (an adopted spare serves a container's socket instead).
    try {
      if (socket && Deno.lstatSync(socket).isSocket) return { pid: Number(p.name), socket };
    } catch { /* adopted or gone */ }
  }
  return undefined;
}

/**
 * The spare's socket fuzzed: afterwards the spare still waits (garbage never adopts it nor
 * makes it leave) and the next container is adopted by it.
 */
async function fuzzSpare(bed: Bed, opts: ShimFuzzOptions): Promise<ShimFuzzRow> {
  const log = opts.log ?? (() => {});
  const primer = await bed.runDetached(bed.shims[0]!, `primer-${crypto.randomUUID().slice(0, 6)}`);
  if (primer.code !== 0) throw new Error(`ctr run primer: ${primer.stderr}`);
  let spare: { pid: number; socket: string } | undefined;
  for (let i = 0; i < 120 && !(spare = waitingSpare(bed)); i++) await sleep(500);
  if (!spare) throw new Error("no warm spare is waiting");
  await sleep(5000); // its rehearsal and trim are over
  const before = usageOf(spare.pid);
  log(`spare (pid ${spare.pid}) ${spare.socket}: before ${formatUsage(before)}`);
  const t0 = performance.now();
  const held: Deno.Conn[] = [];
  const stats = await fuzzLines({
    path: spare.socket,
    chunks: opts.frames,
    seed: opts.seed,
    http: false,
    log,
    ...(opts.hold ? { hold: { ...opts.hold, into: held } } : {}),
  });
  const fuzzMs = performance.now() - t0;
  await settle(spare.pid, before.fds, opts.settleMs ?? 60_000);
  const up = alive(spare.pid);
  const after = up ? usageOf(spare.pid) : undefined;
  const cpuAfter = up ? await cpuPercent(spare.pid, 2000) : undefined;
  for (const c of held) {
    try {
      c.close();
    } catch { /* closed */ }
  }
  const problems: string[] = [];
  if (!up) problems.push("the spare is gone after the fuzz");
  // The next container goes to the spare that was fuzzed.
  const id = `after-spare-fuzz-${crypto.randomUUID().slice(0, 6)}`;
  const run = await bed.runDetached(bed.shims[0]!, id);
  if (run.code !== 0) problems.push(`ctr run after the fuzz: ${run.stderr.trim()}`);
  const socket = `/run/containerd/s/${await sha256Hex(`${bed.c.address}/${bed.ns}/${id}`)}`;
  const server = socketOwner(socket);
  if (up && server !== spare.pid) {
    problems.push(`the next container is served by pid ${server}, not the fuzzed spare`);
  }
  const status = await taskStatus(bed, id);
  const exec = await bed.ctr(["tasks", "exec", "--exec-id", "after-fuzz", id, "true"], 60_000);
  if (exec.code !== 0) problems.push(`exec: ${exec.stderr.trim()}`);
  const kill = await bed.ctr(["tasks", "kill", "-s", "SIGKILL", id], 60_000);
  let stopped = false;
  for (let i = 0; i < 240 && kill.code === 0 && !stopped; i++) {
    stopped = (await taskStatus(bed, id)) === "STOPPED";
    if (!stopped) await sleep(250);
  }
  const del = await bed.ctr(["tasks", "delete", id], 60_000);
  const delC = await bed.ctr(["containers", "delete", id], 60_000);
  const killDeleteOk = stopped && del.code === 0 && delC.code === 0;
  if (!killDeleteOk) problems.push(`kill/delete: ${del.stderr.trim()} ${delC.stderr.trim()}`);
  log(
    `spare: after ${after ? formatUsage(after) : "spare gone"}, CPU ${
      cpuAfter?.toFixed(0) ?? "-"
    }%, next container served by pid ${server}`,
  );
  return {
    shim: "skiff-spare",
    target: "spare",
    before,
    after,
    peakFds: before.fds,
    cpuAfter,
    stats,
    fuzzMs,
    alive: up,
    taskStatus: status,
    execCode: exec.code,
    killDeleteOk,
    problems,
  };
}

/**
 * Starts a bed on `opts.binDir`, fuzzes each requested shim's socket in turn and tears the bed
 * down.
 *
 * @param opts containerd, frame count, seed, shims, target
 * @returns one row per shim
 */
export async function fuzzShims(opts: ShimFuzzOptions): Promise<ShimFuzzRow[]> {
  const bed = await startBed(opts.binDir, {
    ...(opts.shimEnv ? { env: opts.shimEnv } : {}),
    ...(opts.debug ? { debug: true } : {}),
  });
  const rows: ShimFuzzRow[] = [];
  try {
    if (opts.target === "spare") return [await fuzzSpare(bed, opts)];
    for (const want of opts.shims) {
      if (want === "skiff" && opts.adopted) {
        // The first container's server spawns the warm spare the next container adopts; most
        // of a node's skiff servers are adopted ones.
        const primer = await bed.runDetached(
          bed.shims[0]!,
          `primer-${crypto.randomUUID().slice(0, 6)}`,
        );
        if (primer.code !== 0) throw new Error(`ctr run primer: ${primer.stderr}`);
        for (let i = 0; i < 120 && !waitingSpare(bed); i++) await sleep(500);
        await sleep(2000); // its rehearsal is over
      }
      const shim = bed.shims.find((s) => s.label === (want === "skiff" ? "skiff-runc" : "go-runc"));
      if (!shim) throw new Error(`no ${want} shim in the bed`);
      rows.push(await fuzzOne(bed, shim, opts));
    }
  } finally {
    await bed.stop();
  }
  return rows;
}

/** A markdown table of the rows. */
export function fuzzTable(rows: ShimFuzzRow[]): string {
  const mib = (k: number | undefined) => k === undefined ? "-" : (k / 1024).toFixed(1);
  const out = [
    "| shim | socket | connections | frames | fuzz s | fds before -> peak -> after | RSS MiB before -> after | CPU after | task | exec | kill+delete |",
    "|---|---|---|---|---|---|---|---|---|---|---|",
  ];
  for (const r of rows) {
    out.push(
      `| ${r.shim}${
        r.adopted ? " (adopted)" : ""
      } | ${r.target} | ${r.stats.connections} | ${r.stats.frames} | ` +
        `${(r.fuzzMs / 1000).toFixed(1)} | ${r.before.fds} -> ${r.peakFds} -> ${
          r.after?.fds ?? "dead"
        } | ${mib(r.before.rssKiB)} -> ${mib(r.after?.rssKiB)} | ${
          r.cpuAfter?.toFixed(0) ?? "-"
        }% | ${r.taskStatus} | ${r.execCode ?? "-"} | ${r.killDeleteOk ? "ok" : "FAILED"} |`,
    );
  }
  return out.join("\n");
}
