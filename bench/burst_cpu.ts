/**
 * Where a burst's CPU goes, by process: runs `bench/scale_bench.ts --only burst` under a
 * system-wide `perf record` of the scheduler's runtime accounting (`sched:sched_stat_runtime`)
 * and of process execs and forks, classes every process by what it runs and who forked it (Go's
 * `start` and server, skiff's `start`, server and spares, runc under each, containerd, ctr, the
 * containers) and sums each class's CPU over each side's burst: from its first `start` for the
 * burst's wall time that scale_bench reports.
 *
 * Run: `deno run -A bench/burst_cpu.ts [--containerd 2.1] [--shared N]` (`--shared`: skiff's
 * servers shared by up to N pods, as scale_bench's). Needs root and `perf` (Debian's
 * `linux-perf`); not part of `deno task bench`.
 *
 * @module
 */

import { parseArgs } from "node:util";

interface Proc {
  /** Executables in the order the process ran them (the last is what it is). */
  exe: string[];
  parent?: number;
  firstSeen: number;
  runtime: { t: number; ns: number }[];
}

const LINE = /^\s*(.*?)\s+(\d+)\/(\d+)\s+([\d.]+):\s+sched:(\S+):\s+(.*)$/;

/** Parses `perf script -F comm,pid,tid,time,event,trace` output into processes (by tgid). */
export function parsePerfScript(text: string): Map<number, Proc> {
  const procs = new Map<number, Proc>();
  const get = (pid: number, t: number) => {
    let p = procs.get(pid);
    if (!p) procs.set(pid, p = { exe: [], firstSeen: t, runtime: [] });
    return p;
  };
  for (const line of text.split("\n")) {
    const m = LINE.exec(line);
    if (!m) continue;
    const pid = Number(m[2]), t = Number(m[4]), kind = m[5], rest = m[6];
    if (kind === "sched_process_fork") {
      const child = Number(/child_pid=(\d+)/.exec(rest)?.[1]);
      const c = get(child, t);
      c.parent ??= pid;
    } else if (kind === "sched_process_exec") {
      const file = /filename=(\S+)/.exec(rest)?.[1] ?? "";
      get(pid, t).exe.push(file.slice(file.lastIndexOf("/") + 1));
    } else if (kind === "sched_stat_runtime") {
      get(pid, t).runtime.push({ t, ns: Number(/runtime=(\d+)/.exec(rest)?.[1] ?? 0) });
    }
  }
  return procs;
}

const SKIFF_LAUNCHER = /^containerd-shim-skiff-/;
const RUNC = new Set(["runc", "exe", "6"]); // runc, and runc init re-executing itself

/** The class of process `pid`: what it runs, and for shims and runc, whose it is. */
export function classify(procs: Map<number, Proc>, pid: number, depth = 0): string {
  const p = procs.get(pid);
  if (!p || depth > 20) return "other";
  const last = p.exe.at(-1);
  if (last === undefined) {
    return p.parent !== undefined ? classify(procs, p.parent, depth + 1) : "other";
  }
  const parentExe = p.parent !== undefined ? procs.get(p.parent)?.exe.at(-1) : undefined;
  // The installed launcher is a shell script: its exec names the script. A start it hands to a
  // server or spare runs no Deno, only the shell and its tools (flock, sleep, cat).
  if (SKIFF_LAUNCHER.test(last) && parentExe === "containerd") return "skiff start";
  if (p.parent !== undefined && last !== "deno" && last !== "containerd" && !RUNC.has(last)) {
    const by = classify(procs, p.parent, depth + 1);
    if (by === "skiff start") return "skiff start";
  }
  if (last === "deno") {
    if (p.exe.includes("nice")) return "skiff spare";
    if (parentExe === "containerd") return "skiff start";
    if (parentExe === "deno") return "skiff server";
    return "deno (the bench)";
  }
  if (last === "containerd-shim-runc-v2") {
    return parentExe === "containerd" ? "Go start" : "Go server";
  }
  if (RUNC.has(last)) {
    let q = p.parent;
    while (q !== undefined && RUNC.has(procs.get(q)?.exe.at(-1) ?? "")) q = procs.get(q)?.parent;
    const owner = q !== undefined ? procs.get(q)?.exe.at(-1) : undefined;
    return owner === "deno"
      ? "runc (skiff)"
      : owner === "containerd-shim-runc-v2"
      ? "runc (Go)"
      : "runc";
  }
  if (last === "containerd" && p.parent !== undefined) {
    // The daemon is the bench's child; a `containerd --version` is a skiff start's or spare's.
    const by = classify(procs, p.parent, depth + 1);
    if (by.startsWith("skiff ")) return "containerd --version (skiff)";
  }
  return last;
}

/** CPU seconds per class over [from, from + seconds). */
export function cpuByClass(
  procs: Map<number, Proc>,
  from: number,
  seconds: number,
): Map<string, number> {
  const out = new Map<string, number>();
  for (const [pid, p] of procs) {
    let ns = 0;
    for (const r of p.runtime) if (r.t >= from && r.t < from + seconds) ns += r.ns;
    if (ns === 0) continue;
    const c = classify(procs, pid);
    out.set(c, (out.get(c) ?? 0) + ns / 1e9);
  }
  return out;
}

/** The first of 15 `start`s of `cls` seen within 2 s of each other: a burst's beginning. */
function burstStart(procs: Map<number, Proc>, cls: string): number | undefined {
  const starts = [...procs].filter(([pid]) => classify(procs, pid) === cls)
    .map(([, p]) => p.firstSeen).sort((a, b) => a - b);
  for (let i = 0; i + 14 < starts.length; i++) {
    if (starts[i + 14] - starts[i] < 2) return starts[i] - 0.03;
  }
  return undefined;
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: { containerd: { type: "string", default: "2.1" }, shared: { type: "string" } },
  });
  const data = await Deno.makeTempFile({ prefix: "skiff-burst-cpu-", suffix: ".data" });
  const perf = new Deno.Command("perf", {
    args: [
      "record",
      "-q",
      "-a",
      "-e",
      "sched:sched_stat_runtime,sched:sched_process_exec,sched:sched_process_fork",
      "-o",
      data,
    ],
    stdout: "null",
    stderr: "inherit",
  }).spawn();
  await new Promise((r) => setTimeout(r, 1000));
  const bench = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      new URL("./scale_bench.ts", import.meta.url).pathname,
      "--containerd",
      values.containerd!,
      "--only",
      "burst",
      ...(values.shared ? ["--shared", values.shared] : []),
    ],
    stderr: "inherit",
  }).output();
  perf.kill("SIGINT");
  await perf.status;
  const report = new TextDecoder().decode(bench.stdout);
  console.log(report);
  const wall = /first launch to last return \(s\) \| ([\d.]+) \| ([\d.]+) \|/.exec(report);
  if (!bench.success || !wall) throw new Error("scale_bench's burst failed; see its output above");
  const script = await new Deno.Command("perf", {
    args: ["script", "-i", data, "-F", "comm,pid,tid,time,event,trace"],
    stdout: "piped",
    stderr: "null",
  }).output();
  await Deno.remove(data);
  const procs = parsePerfScript(new TextDecoder().decode(script.stdout));
  const sides = [
    { name: "Go", from: burstStart(procs, "Go start"), seconds: Number(wall[1]) },
    { name: "skiff", from: burstStart(procs, "skiff start"), seconds: Number(wall[2]) },
  ];
  const rows = new Map<string, number[]>();
  sides.forEach((side, i) => {
    if (side.from === undefined) return;
    for (const [c, s] of cpuByClass(procs, side.from, side.seconds)) {
      if (!rows.has(c)) rows.set(c, [0, 0]);
      rows.get(c)![i] = s;
    }
  });
  const sorted = [...rows].sort((a, b) => b[1][0] + b[1][1] - a[1][0] - a[1][1]);
  console.log(`\n| CPU in the burst window (s), containerd ${values.containerd} | Go | skiff |`);
  console.log("| --- | ---: | ---: |");
  for (const [c, [g, s]] of sorted) {
    if (g + s >= 0.005) console.log(`| ${c} | ${g.toFixed(2)} | ${s.toFixed(2)} |`);
  }
  const total = (i: number) => sorted.reduce((a, [, v]) => a + v[i], 0);
  console.log(`| all | ${total(0).toFixed(2)} | ${total(1).toFixed(2)} |`);
  console.log(`| the burst's wall time (s) | ${wall[1]} | ${wall[2]} |`);
}
