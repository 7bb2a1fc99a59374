/**
 * A cold shim server's start, launchers side by side: from spawning the server (as `start` does,
 * spare off) to its socket accepting, and to its answer to a first ttrpc call (Task `Connect`,
 * hand-encoded so this process loads no protobuf runtime), next to `deno run` of an empty file.
 * Every round runs the empty file and then each launcher once, so the machine's drift weighs on
 * all of them alike (A/B interleaved); then the `start` action itself, cold (spawn to exit, the
 * server it spawns and waits for included), run as containerd 2.0-2.2 run it (`GRPC_ADDRESS` set,
 * a containerd 2.x binary to ask its version, when one is installed), as
 * `bench/startup_bench.ts`'s cold row measures it inside a whole container lifecycle.
 *
 * Run: `deno run -A bench/cold_server_bench.ts [--runs 15] [launcher ...]`; without launchers it
 * installs this checkout (bundle mode) into a temporary prefix and measures its runc shim. To
 * compare two trees, install each (`deno task install --prefix P`) and pass both launchers.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { installExampleShims } from "../sdk/install/examples.ts";
import { containerdVersions } from "../sdk/testing/containerd.ts";

/** Medians, ms. */
export interface ColdServerRow {
  /** The launcher. */
  launcher: string;
  /** Spawn to the socket accepting. */
  listeningMs: number;
  /** Spawn to the first ttrpc answer. */
  answeredMs: number;
  /** The server's own CPU time (user + system) from its spawn to its first answer. */
  cpuMs: number;
  /** The fastest round, spawn to listening. */
  minListeningMs: number;
  /** The fastest round, spawn to the first answer. */
  minAnsweredMs: number;
  /** The `start` action, spawn to exit (the server it spawns included). */
  startMs: number;
  /** Its fastest round. */
  minStartMs: number;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

const enc = new TextEncoder();
function lengthDelimited(field: number, value: string | Uint8Array): number[] {
  const b = typeof value === "string" ? enc.encode(value) : value;
  return [(field << 3) | 2, b.length, ...b]; // every length here is below 128
}

/** One ttrpc request frame: `containerd.task.v2.Task/Connect` with `ConnectRequest{id}`. */
function connectFrame(id: string): Uint8Array {
  const payload = new Uint8Array(lengthDelimited(1, id));
  const req = new Uint8Array([
    ...lengthDelimited(1, "containerd.task.v2.Task"),
    ...lengthDelimited(2, "Connect"),
    ...lengthDelimited(3, payload),
  ]);
  const frame = new Uint8Array(10 + req.length);
  const view = new DataView(frame.buffer);
  view.setUint32(0, req.length);
  view.setUint32(4, 1); // stream id
  frame[8] = 1; // request
  frame.set(req, 10);
  return frame;
}

async function dial(path: string): Promise<Deno.UnixConn | undefined> {
  try {
    return await Deno.connect({ transport: "unix", path });
  } catch {
    return undefined;
  }
}

/** A process's CPU time (user + system) so far, ms (clock ticks of 10 ms). */
function cpuMsOf(pid: number): number {
  const f = Deno.readTextFileSync(`/proc/${pid}/stat`).split(") ")[1].split(" ");
  return (Number(f[11]) + Number(f[12])) * 10;
}

/** Spawns one cold server, times it (and its CPU to its first answer), and kills it. */
async function coldServer(
  launcher: string,
  dir: string,
  n: number,
): Promise<[number, number, number]> {
  const bundle = `${dir}/b${n}`;
  const socket = `${dir}/s${n}.sock`;
  await Deno.mkdir(bundle);
  const t0 = performance.now();
  const child = new Deno.Command(launcher, {
    args: [
      ...["-namespace", "coldbench", "-id", `cold${n}`, "-address", `${dir}/containerd.sock`],
      ...["-publish-binary", "/bin/true", "-socket", socket],
    ],
    cwd: bundle,
    stdin: "null",
    stdout: "null",
    stderr: "null",
    env: { SKIFF_SPARE: "0" },
  }).spawn();
  let exited = false;
  child.status.then(() => exited = true);
  try {
    let conn: Deno.UnixConn | undefined;
    const deadline = Date.now() + 60_000;
    while (!(conn = await dial(socket))) {
      if (exited || Date.now() > deadline) throw new Error(`${launcher}: no server on ${socket}`);
      await new Promise((r) => setTimeout(r, 1));
    }
    const listening = performance.now() - t0;
    try {
      await conn.write(connectFrame(`cold${n}`));
      const head = new Uint8Array(10);
      const got = await conn.read(head);
      if (got === null || head[8] !== 2) throw new Error(`${launcher}: no ttrpc response`);
    } finally {
      conn.close();
    }
    const answered = performance.now() - t0;
    // The launcher execs deno: the child's pid is the server's.
    return [listening, answered, cpuMsOf(child.pid)];
  } finally {
    if (!exited) child.kill("SIGKILL");
    await child.status;
  }
}

/**
 * Times the `start` action itself with no spare (spawn to exit: it spawns the server and waits
 * for its socket), then kills that server and removes its socket.
 */
async function coldStart(
  launcher: string,
  dir: string,
  n: number,
  publishBinary: string,
): Promise<number> {
  const bundle = `${dir}/b${n}`;
  await Deno.mkdir(bundle);
  const t0 = performance.now();
  const out = await new Deno.Command(launcher, {
    args: [
      ...["-namespace", "coldbench", "-id", `start${n}`, "-address", `${dir}/containerd.sock`],
      ...["-publish-binary", publishBinary, "start"],
    ],
    cwd: bundle,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    // As containerd 2.0-2.2 run it: `start` asks the binary its version for its answer's format.
    env: {
      SKIFF_SPARE: "0",
      GRPC_ADDRESS: `${dir}/containerd.sock`,
      TTRPC_ADDRESS: `${dir}/containerd.sock.ttrpc`,
    },
  }).output();
  const ms = performance.now() - t0;
  try {
    Deno.kill(Number(await Deno.readTextFile(`${bundle}/shim.pid`)), "SIGKILL");
  } catch { /* gone */ }
  const answer = new TextDecoder().decode(out.stdout).trim();
  const address = answer.startsWith("{") ? JSON.parse(answer).address as string : answer;
  await Deno.remove(address.replace(/^unix:\/\//, "")).catch(() => {});
  if (!out.success) throw new Error(`${launcher} start: ${new TextDecoder().decode(out.stderr)}`);
  return ms;
}

/** Runs the rounds; returns the empty-`deno run` median and one row per launcher. */
export async function runColdServerBench(
  launchers: string[],
  runs: number,
): Promise<{ emptyMs: number; rows: ColdServerRow[]; markdown: string }> {
  const dir = await Deno.makeTempDir({ prefix: "skiff-cold-" });
  const load = Deno.readTextFileSync("/proc/loadavg").trim();
  try {
    await Deno.writeTextFile(`${dir}/empty.js`, "");
    const empty: number[] = [];
    const times = launchers.map(() => ({
      listening: [] as number[],
      answered: [] as number[],
      cpu: [] as number[],
      start: [] as number[],
    }));
    // containerd 2.x's binary where one is installed (tests/setup/prepare.sh), as startup_bench.
    const publish = containerdVersions().find((v) => v.version.startsWith("2."));
    const publishBinary = publish ? `${publish.binDir}/containerd` : "/bin/true";
    let n = 0;
    for (let i = 0; i < runs; i++) {
      const t0 = performance.now();
      await new Deno.Command(Deno.execPath(), {
        args: ["run", "--quiet", `${dir}/empty.js`],
        stdout: "null",
        stderr: "null",
      }).output();
      empty.push(performance.now() - t0);
      for (const [j, launcher] of launchers.entries()) {
        const [listening, answered, cpu] = await coldServer(launcher, dir, n++);
        times[j].listening.push(listening);
        times[j].answered.push(answered);
        times[j].cpu.push(cpu);
        times[j].start.push(await coldStart(launcher, dir, n++, publishBinary));
      }
    }
    const emptyMs = median(empty);
    const rows = launchers.map((launcher, j) => ({
      launcher,
      listeningMs: median(times[j].listening),
      answeredMs: median(times[j].answered),
      cpuMs: median(times[j].cpu),
      minListeningMs: Math.min(...times[j].listening),
      minAnsweredMs: Math.min(...times[j].answered),
      startMs: median(times[j].start),
      minStartMs: Math.min(...times[j].start),
    }));
    const minEmpty = Math.min(...empty);
    const x = (ms: number, min: number) =>
      `${ms.toFixed(1)} ms (${(ms / emptyMs).toFixed(2)}x) [${min.toFixed(1)}, ${
        (min / minEmpty).toFixed(2)
      }x]`;
    const markdown = [
      `median of ${runs} rounds; \`deno run\` of an empty file: ${emptyMs.toFixed(1)} ms ` +
      `[${minEmpty.toFixed(1)}]; ` +
      `load average before: ${load}, after: ${Deno.readTextFileSync("/proc/loadavg").trim()}; ` +
      "in brackets the fastest round (less moved by other processes on a shared machine)",
      "",
      "| launcher | server: spawn → listening (x empty deno) | server: spawn → first ttrpc answer | server's CPU to its first answer | `start` action, cold: spawn → exit |",
      "| --- | ---: | ---: | ---: | ---: |",
      ...rows.map((r) =>
        `| ${r.launcher} | ${x(r.listeningMs, r.minListeningMs)} | ${
          x(r.answeredMs, r.minAnsweredMs)
        } | ${r.cpuMs} ms | ${x(r.startMs, r.minStartMs)} |`
      ),
    ].join("\n");
    return { emptyMs, rows, markdown };
  } finally {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

if (import.meta.main) {
  const { values, positionals } = parseArgs({
    args: Deno.args,
    options: { runs: { type: "string", default: "15" } },
    allowPositionals: true,
  });
  let prefix: string | undefined;
  let launchers = positionals;
  if (launchers.length === 0) {
    prefix = await Deno.makeTempDir({ prefix: "skiff-cold-install-" });
    launchers = [(await installExampleShims({ prefix, spare: false }))[0]];
  }
  try {
    console.log((await runColdServerBench(launchers, Number(values.runs))).markdown);
  } finally {
    if (prefix) await Deno.remove(prefix, { recursive: true }).catch(() => {});
  }
}
