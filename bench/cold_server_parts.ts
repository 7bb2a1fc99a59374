/**
 * What each part of a cold server's module graph costs to evaluate: one small entry per part,
 * bundled as `installExampleShims` bundles a shim (`deno bundle --code-splitting --minify --keep-names`),
 * run with the bundle launchers' Deno and V8 flags; each entry times its own `await import()` and
 * reports V8's used heap after a full collection. Parts are cumulative (each includes what it
 * imports), so the differences between rows are what a part adds. Rounds are interleaved.
 *
 * Run: `deno run -A bench/cold_server_parts.ts [--runs 15]`.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { DEFAULT_SHIM_V8_FLAGS, SHIM_MALLOC_ARENA_MAX } from "../sdk/install/install.ts";

const ROOT = new URL("..", import.meta.url).pathname;

/**
 * The protobuf-es runtime and every generated file the server imported before it served the Task
 * API from wire tables (proto/shim_wire.ts); kept as the comparison.
 */
const SERVER_GENERATED: string[] = [
  "@bufbuild/protobuf",
  "proto/gen/containerd/task/v2/shim_pb.ts",
  "proto/gen/containerd/types/task/task_pb.ts",
  "proto/gen/containerd/events/task_pb.ts",
  "proto/gen/containerd/runc/v1/oci_pb.ts",
  "proto/gen/containerd/services/events/ttrpc/v1/events_pb.ts",
  "proto/gen/ttrpc/request_pb.ts",
  "proto/gen/google/rpc/status_pb.ts",
  "proto/any.ts",
];

/** Part → the modules its entry imports (relative to the checkout, or bare npm specifiers). */
const PARTS: [string, string[]][] = [
  ["nothing (an empty module)", []],
  ["protobuf-es wire runtime (what the actions use)", ["@bufbuild/protobuf/wire"]],
  ["skiff's hand-written wire codecs (proto/wire.ts)", ["proto/wire.ts"]],
  ["skiff's wire tables (proto/shim_wire.ts: the server's messages)", ["proto/shim_wire.ts"]],
  ["protobuf-es reflection runtime (`@bufbuild/protobuf`)", ["@bufbuild/protobuf"]],
  ["+ the Task API's generated descriptors (shim_pb.ts)", [
    "@bufbuild/protobuf",
    "proto/gen/containerd/task/v2/shim_pb.ts",
  ]],
  ["+ every generated file the server imported before the wire tables", SERVER_GENERATED],
  ["+ Connect (`@connectrpc/connect`)", [...SERVER_GENERATED, "@connectrpc/connect"]],
  ["the ttrpc server (sdk/ttrpc/server.ts)", ["sdk/ttrpc/server.ts"]],
  ["the whole server (sdk/shim/server/serve.ts)", ["sdk/shim/server/serve.ts"]],
  ["+ the spare and ops extensions (what runShim loads)", [
    "sdk/shim/server/serve.ts",
    "sdk/shim/spare/extension.ts",
    "sdk/ops/extension.ts",
  ]],
];

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

/** Bundles one entry per part into `dir`; returns the entry files. */
async function bundleParts(dir: string): Promise<string[]> {
  const entries: string[] = [];
  for (const [i, [, modules]] of PARTS.entries()) {
    const spec = (m: string) => m.startsWith("@") ? m : `${ROOT}${m}`;
    await Deno.writeTextFile(
      `${dir}/part${i}_mod.ts`,
      modules.map((m, j) => `export * as m${j} from "${spec(m)}";`).join("\n") || "export {};",
    );
    await Deno.writeTextFile(
      `${dir}/part${i}.ts`,
      [
        "const t0 = performance.now();",
        `const m = await import("./part${i}_mod.ts");`,
        "const ms = performance.now() - t0;",
        "(globalThis as Record<string, unknown>).keep = m;",
        "(globalThis as { gc?: () => void }).gc?.();",
        "console.log(JSON.stringify({ ms, heap: Deno.memoryUsage().heapUsed }));",
      ].join("\n"),
    );
    const out = await new Deno.Command(Deno.execPath(), {
      args: [
        ...["bundle", "--quiet", "--platform", "deno", "--code-splitting", "--minify"],
        ...["--keep-names", "--outdir", `${dir}/out${i}`, "--config", `${ROOT}deno.json`],
        `${dir}/part${i}.ts`,
      ],
      stderr: "piped",
    }).output();
    if (!out.success) throw new Error(new TextDecoder().decode(out.stderr));
    entries.push(`${dir}/out${i}/part${i}.js`);
  }
  return entries;
}

if (import.meta.main) {
  const { values } = parseArgs({ args: Deno.args, options: { runs: { type: "string" } } });
  const runs = Number(values.runs ?? 15);
  const dir = await Deno.makeTempDir({ prefix: "skiff-cold-parts-" });
  try {
    const entries = await bundleParts(dir);
    const load = Deno.readTextFileSync("/proc/loadavg").trim();
    const ms = entries.map(() => [] as number[]);
    const heap = entries.map(() => [] as number[]);
    const wall = entries.map(() => [] as number[]);
    for (let r = 0; r < runs; r++) {
      for (const [i, entry] of entries.entries()) {
        const t0 = performance.now();
        const out = await new Deno.Command(Deno.execPath(), {
          args: [
            ...["run", "-A", "--quiet", "--no-prompt", "--no-config", "--no-lock", "--cached-only"],
            ...["--no-code-cache", `--v8-flags=${DEFAULT_SHIM_V8_FLAGS.join(",")}`, entry],
          ],
          env: { MALLOC_ARENA_MAX: String(SHIM_MALLOC_ARENA_MAX) },
          stdout: "piped",
        }).output();
        wall[i].push(performance.now() - t0);
        const j = JSON.parse(new TextDecoder().decode(out.stdout));
        ms[i].push(j.ms);
        heap[i].push(j.heap / 2 ** 20);
      }
    }
    console.log(
      `median of ${runs} rounds; load average before: ${load}, after: ${
        Deno.readTextFileSync("/proc/loadavg").trim()
      }\n\n| part | import (ms) | process wall (ms) | V8 heap used after GC (MiB) |\n| --- | ---: | ---: | ---: |`,
    );
    for (const [i, [name]] of PARTS.entries()) {
      console.log(
        `| ${name} | ${median(ms[i]).toFixed(1)} | ${median(wall[i]).toFixed(1)} | ${
          median(heap[i]).toFixed(2)
        } |`,
      );
    }
  } finally {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}
