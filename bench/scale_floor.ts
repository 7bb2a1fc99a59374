/**
 * The floor of the scale benchmark (bench/scale_bench.ts): what `n` idle Deno processes cost
 * when started exactly as the installed skiff launcher starts its shim: the launcher's own text
 * (its environment: `MALLOC_ARENA_MAX=1`, `DENO_DIR`, …; its `deno run` flags: `--no-code-cache`,
 * `--v8-flags=--lite-mode,…`), with the bundle it runs swapped for a script that only waits.
 * Nothing a shim does beyond being a Deno process is in it: a shim's PSS over this floor is what
 * skiff's own code and state cost.
 *
 * @module
 */

import { pssMiB, settle } from "./scale_node.ts";
import { kill, waitGone } from "../sdk/testing/processes.ts";

/** What `n` idle processes cost. */
export interface FloorFigure {
  /** Processes started. */
  processes: number;
  /** Summed PSS after settling, MiB. */
  pssMiB: number;
  /** The `exec` line they ran (the launcher's, with the idle script). */
  exec: string;
}

/**
 * The launcher's text with the entry it runs (the last quoted path before `"$@"` on its `exec`
 * line, in bundle and source mode alike) replaced by `idle`, everywhere it occurs.
 */
export function idleLauncher(text: string, idle: string): string {
  const exec = text.split("\n").find((l) => l.startsWith("exec "));
  const m = exec && /'([^']+)' "\$@"$/.exec(exec);
  if (!m) throw new Error(`no "exec … '<entry>' \\"$@\\"" line in the launcher:\n${text}`);
  return text.replaceAll(`'${m[1]}'`, `'${idle}'`);
}

/**
 * Starts `n` idle Deno processes with the launcher's flags and environment, waits for them to
 * settle as the shims did, sums their PSS and stops them.
 *
 * @param launcher the installed skiff launcher
 * @param n how many (as many as the shim processes measured)
 */
export async function idleDenoFloor(launcher: string, n: number): Promise<FloorFigure> {
  const dir = await Deno.makeTempDir({ prefix: "skiff-scale-floor-" });
  const children: Deno.ChildProcess[] = [];
  try {
    // A timer keeps the event loop alive (a never-settling promise would end the process).
    await Deno.writeTextFile(`${dir}/idle.js`, "setInterval(() => {}, 1 << 30);\n");
    const text = idleLauncher(await Deno.readTextFile(launcher), `${dir}/idle.js`);
    await Deno.writeTextFile(`${dir}/idle-launcher`, text, { mode: 0o755 });
    for (let i = 0; i < n; i++) {
      children.push(
        new Deno.Command("/bin/sh", {
          args: [`${dir}/idle-launcher`],
          stdin: "null",
          stdout: "null",
          stderr: "null",
        }).spawn(),
      );
    }
    await settle();
    // The launcher execs deno: each child's pid is the Deno process.
    const pids = children.map((ch) => ch.pid);
    const alive = pids.filter((p) => {
      try {
        return Deno.readLinkSync(`/proc/${p}/exe`) !== "/bin/dash";
      } catch {
        return false;
      }
    });
    if (alive.length !== n) throw new Error(`only ${alive.length} of ${n} idle Deno processes run`);
    return {
      processes: n,
      pssMiB: pssMiB(pids),
      exec: text.split("\n").find((l) => l.startsWith("exec "))!,
    };
  } finally {
    for (const ch of children) kill(ch.pid, "SIGKILL");
    await waitGone(children.map((ch) => ch.pid), 10_000);
    await Promise.all(children.map((ch) => ch.status));
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}
