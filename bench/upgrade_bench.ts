/**
 * Live shim upgrade, measured (docs/performance.md, "Live shim upgrade"): under one private
 * containerd with the runc example installed as a bundle launcher,
 *
 * - the window: how long containerd's requests are held per upgrade (the shim's own report,
 *   from holding requests to serving them in the new code) and the `upgrade` command's wall
 *   time, over `--runs` upgrades of one shim with a running container;
 * - 20 shims (20 detached containers) upgraded by one `upgrade --all`;
 * - the shim's PSS before and after 100 upgrades (no growth expected);
 * - beside it, what the Go runc shim offers for a fix to reach a running container: a new
 *   container (`ctr run -d` + kill + delete of the old one), timed in the same run.
 *
 *   deno run -A bench/upgrade_bench.ts [--containerd 2.1] [--runs 50] [--shims 20] [--memory-runs 100]
 *
 * @module
 */

import { parseArgs } from "node:util";
import { containerdVersions, type PrivateContainerd } from "../sdk/testing/containerd.ts";
import { processMemory } from "../sdk/linux/smaps.ts";
import { kit, LAUNCHER } from "../tests/_spare.ts";
import { ctrRun } from "../sdk/testing/ctr.ts";

interface Options {
  containerd: string;
  runs: number;
  shims: number;
  memoryRuns: number;
}

const dec = new TextDecoder();

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}

/** `<bin> upgrade --all --force` under `c`: its wall time and output; throws when it fails. */
export async function upgradeAll(
  bin: string,
  c: Pick<PrivateContainerd, "state">,
): Promise<{ ms: number; out: string }> {
  const t0 = performance.now();
  const r = await new Deno.Command(bin, {
    args: [
      "upgrade",
      "--all",
      "--force",
      "--state-dir",
      `${c.state}/io.containerd.runtime.v2.task`,
    ],
  }).output();
  const ms = performance.now() - t0;
  const out = dec.decode(r.stdout) + dec.decode(r.stderr);
  if (r.code !== 0) throw new Error(`upgrade failed: ${out}`);
  return { ms, out };
}

function shimPid(c: PrivateContainerd, ns: string, id: string): number {
  return Number(
    Deno.readTextFileSync(`${c.state}/io.containerd.runtime.v2.task/${ns}/${id}/shim.pid`).trim(),
  );
}

/** Runs the benchmark; its markdown. */
export async function runUpgradeBench(o: Partial<Options> = {}): Promise<{ markdown: string }> {
  const opts: Options = { containerd: "2.1", runs: 50, shims: 20, memoryRuns: 100, ...o };
  const v = containerdVersions().find((x) => x.version.startsWith(opts.containerd));
  if (!v) throw new Error(`containerd ${opts.containerd} is not installed`);
  const k = await kit(v.binDir);
  const bin = `${k.prefix}/bin/${LAUNCHER}`;
  const c = await k.containerd();
  const ns = "bench";
  try {
    await k.run(c, { id: "warm", namespace: ns, args: ["true"] });
    // The window, on one shim with a running container.
    const r1 = await k.run(c, { id: "one", namespace: ns, detach: true, args: ["sleep", "3600"] });
    if (r1.code !== 0) throw new Error(`ctr run: ${r1.stderr}`);
    const pid = shimPid(c, ns, "one");
    await new Promise((r) => setTimeout(r, 2000));
    const fresh = processMemory(pid).pss;
    const held: number[] = [];
    const wall: number[] = [];
    for (let i = 0; i < opts.runs; i++) {
      const r = await upgradeAll(bin, c);
      wall.push(r.ms);
      held.push(Number(/requests held (\d+) ms/.exec(r.out)?.[1] ?? NaN));
    }
    // Memory after many upgrades of the same shim.
    await new Promise((r) => setTimeout(r, 2000));
    const before = processMemory(pid).pss;
    for (let i = 0; i < opts.memoryRuns; i++) await upgradeAll(bin, c);
    await new Promise((r) => setTimeout(r, 2000));
    const after = processMemory(pid).pss;
    // 20 shims at once.
    for (let i = 0; i < opts.shims; i++) {
      const r = await k.run(c, {
        id: `many${i}`,
        namespace: ns,
        detach: true,
        args: ["sleep", "3600"],
      });
      if (r.code !== 0) throw new Error(`ctr run many${i}: ${r.stderr}`);
    }
    const many = await upgradeAll(bin, c);
    const upgraded = many.out.split("\n").filter((l) => l.includes(": upgraded")).length;
    // The Go shim's way for a fix to reach a running container: replace the container.
    const replace: number[] = [];
    for (let i = 0; i < 5; i++) {
      const t0 = performance.now();
      const r = await ctrRun(c, {
        id: `go${i}`,
        namespace: ns,
        image: k.image,
        detach: true,
        args: ["sleep", "3600"],
      });
      if (r.code !== 0) throw new Error(`ctr run (Go shim): ${r.stderr}`);
      replace.push(performance.now() - t0);
      await c.ctr(["tasks", "kill", "-s", "KILL", `go${i}`], { namespace: ns });
    }
    const mib = (b: number) => (b / (1 << 20)).toFixed(1);
    const markdown = [
      `containerd ${v.version}, runc example (bundle launcher), ${opts.runs} upgrades of one shim:`,
      "",
      "| figure | p50 | p99 |",
      "|---|---|---|",
      `| requests held per upgrade (the shim's report) | ${pct(held, 50)} ms | ${
        pct(held, 99)
      } ms |`,
      `| \`upgrade --all\` wall time, one shim | ${pct(wall, 50).toFixed(0)} ms | ${
        pct(wall, 99).toFixed(0)
      } ms |`,
      "",
      `| figure | value |`,
      `|---|---|`,
      `| ${opts.shims + 1} shims upgraded by one \`upgrade --all\` (4 at a time) | ${
        many.ms.toFixed(0)
      } ms (${upgraded} upgraded) |`,
      `| shim PSS: never upgraded / after ${opts.runs} upgrades / after ${
        opts.runs + opts.memoryRuns
      } | ${mib(fresh)} / ${mib(before)} / ${mib(after)} MiB |`,
      `| Go runc shim: a fix reaches a running container only by a new one: \`ctr run -d\` p50 | ${
        pct(replace, 50).toFixed(0)
      } ms, and the container restarts |`,
    ].join("\n");
    return { markdown };
  } finally {
    await c.stop();
    await k.close();
  }
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      containerd: { type: "string", default: "2.1" },
      runs: { type: "string", default: "50" },
      shims: { type: "string", default: "20" },
      "memory-runs": { type: "string", default: "100" },
    },
  });
  const r = await runUpgradeBench({
    containerd: values.containerd!,
    runs: Number(values.runs),
    shims: Number(values.shims),
    memoryRuns: Number(values["memory-runs"]),
  });
  console.log(r.markdown);
}
