// The import graph of the package (mod.ts, sdk/, proto/, examples/) keeps the layers that
// docs/architecture.md draws: the drawing under "<!-- import layers -->" is the declaration this
// test reads, so the picture and the code cannot drift apart. Rules:
// - no import cycle between files (type-only imports included: a cycle of types is still one);
// - no import from a row into a row above it (type-only and `await import()` included);
// - no import between two parts of one row (`sdk/ttrpc/ | sdk/linux/`); `+` joins folders
//   into one part, whose files may import each other (but without a cycle);
// - no cycle between the drawing's folders either (each path of a row, with its subfolders):
//   the arrows between folders run one way, inside a `+` part too.
// A failure names the importing file, the imported file and the rule. tests/ and bench/ are
// not checked: they stand above everything.
import assert from "node:assert/strict";
import { stronglyConnected } from "../../setup/scc.ts";

const ROOT = new URL("../../..", import.meta.url);
const DOC = "docs/architecture.md";
const MARKER = "<!-- import layers -->";

/**
 * Violations that other branches of issue 18 remove; each entry names its owner. An entry that
 * no longer occurs fails the last test below: delete it then.
 */
const KNOWN: { from: string; to: string; owner: string }[] = [];

/** A row of the drawing: its parts, each a list of path patterns. */
interface Row {
  parts: string[][];
  line: number;
}

/** Reads the layer drawing: the first code block after the marker, top row first. */
function parseDrawing(markdown: string): Row[] {
  const lines = markdown.split("\n");
  const at = lines.findIndex((l) => l.trim() === MARKER);
  assert.ok(at >= 0, `${DOC} has no "${MARKER}" line above its layer drawing`);
  let i = at + 1;
  while (i < lines.length && !lines[i].startsWith("```")) i++;
  const rows: Row[] = [];
  for (i++; i < lines.length && !lines[i].startsWith("```"); i++) {
    const text = lines[i];
    // A row starts in the first column; indented lines carry connectors and descriptions.
    if (text === "" || /^\s/.test(text)) continue;
    const m = /^(\S+(?:\s+[|+]\s+\S+)*)(?:\s{2,}.*)?$/.exec(text);
    assert.ok(m, `${DOC}:${i + 1}: a row starts with its paths: "${text}"`);
    const parts = m[1].split(/\s+\|\s+/).map((p) => p.split(/\s+\+\s+/));
    for (const pattern of parts.flat()) {
      assert.match(pattern, /\/$|\.ts$/, `${DOC}:${i + 1}: "${pattern}" is no folder/ or file.ts`);
    }
    rows.push({ parts, line: i + 1 });
  }
  assert.ok(rows.length > 0, `${DOC}: the code block after "${MARKER}" has no rows`);
  return rows;
}

/** Where a file sits: row 0 is the top; the most specific pattern wins. */
function locate(rows: Row[], file: string): { row: number; part: number; pattern: string } {
  let best: { row: number; part: number; pattern: string } | undefined;
  rows.forEach((r, row) =>
    r.parts.forEach((patterns, part) => {
      for (const p of patterns) {
        const hit = p.endsWith("/*.ts")
          ? file.startsWith(p.slice(0, -4)) && !file.slice(p.length - 4).includes("/")
          : p.endsWith("/")
          ? file.startsWith(p)
          : file === p;
        if (hit && (!best || p.length > best.pattern.length)) best = { row, part, pattern: p };
      }
    })
  );
  if (!best) throw new Error(`${file}: no row of ${DOC}'s layer drawing matches it`);
  return best;
}

/** One rule broken by one import. */
interface Violation {
  from: string;
  to: string;
  rule: string;
}

/** The layer rules over a file graph (file -> files it imports). */
function layerViolations(rows: Row[], graph: Map<string, Set<string>>): Violation[] {
  const out: Violation[] = [];
  const name = (l: ReturnType<typeof locate>) => rows[l.row].parts[l.part].join(" + ");
  for (const [from, tos] of graph) {
    const a = locate(rows, from);
    for (const to of tos) {
      const b = locate(rows, to);
      if (b.row < a.row) {
        out.push({ from, to, rule: `upward: "${name(a)}" is below "${name(b)}"` });
      } else if (b.row === a.row && b.part !== a.part) {
        out.push({ from, to, rule: `sideways: "${name(a)}" and "${name(b)}" are separate parts` });
      }
    }
  }
  return out;
}

/** Every import that closes a cycle, with the cycle it closes (Tarjan's SCCs, then a path). */
function cycleViolations(graph: Map<string, Set<string>>): Violation[] {
  const components = stronglyConnected(graph);
  const out: Violation[] = [];
  for (const c of components) {
    const inside = new Set(c);
    for (const from of c) {
      for (const to of graph.get(from) ?? []) {
        if (!inside.has(to)) continue;
        out.push({
          from,
          to,
          rule: `cycle: ${[from, ...pathTo(graph, inside, to, from)].join(" -> ")}`,
        });
      }
    }
  }
  return out;
}

/** A shortest path inside `inside` from `start` to `goal`, both included. */
function pathTo(
  graph: Map<string, Set<string>>,
  inside: Set<string>,
  start: string,
  goal: string,
): string[] {
  const prev = new Map<string, string>([[start, start]]);
  const todo = [start];
  while (todo.length > 0) {
    const v = todo.shift()!;
    if (v === goal) break;
    for (const w of graph.get(v) ?? []) {
      if (inside.has(w) && !prev.has(w)) {
        prev.set(w, v);
        todo.push(w);
      }
    }
  }
  const path = [goal];
  while (path[0] !== start) path.unshift(prev.get(path[0])!);
  return path;
}

function* walk(dir: string): Generator<string> {
  for (const e of Deno.readDirSync(new URL(dir, ROOT))) {
    const p = `${dir}${e.name}`;
    if (e.isDirectory) yield* walk(`${p}/`);
    else if (p.endsWith(".ts")) yield p;
  }
}

/** The package's files and what each imports (checkout-relative; npm and node: left out). */
async function packageGraph(): Promise<Map<string, Set<string>>> {
  const files = ["mod.ts", ...walk("sdk/"), ...walk("proto/"), ...walk("examples/")]
    .filter((f) => !f.startsWith("proto/gen/"));
  const entry = await Deno.makeTempFile({ suffix: ".ts" });
  try {
    await Deno.writeTextFile(
      entry,
      files.map((f) => `import ${JSON.stringify(new URL(f, ROOT).href)};\n`).join(""),
    );
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["info", "--json", "--config", new URL("deno.json", ROOT).pathname, entry],
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
    const info = JSON.parse(new TextDecoder().decode(out.stdout)) as {
      modules: {
        specifier: string;
        dependencies?: { code?: { specifier: string }; type?: { specifier: string } }[];
      }[];
    };
    const local = (s: string | undefined) =>
      s?.startsWith(ROOT.href) ? s.slice(ROOT.href.length) : undefined;
    const graph = new Map<string, Set<string>>();
    for (const m of info.modules) {
      const from = local(m.specifier);
      if (from === undefined) continue;
      const tos = new Set<string>();
      for (const d of m.dependencies ?? []) {
        for (const to of [local(d.code?.specifier), local(d.type?.specifier)]) {
          if (to !== undefined) tos.add(to);
        }
      }
      graph.set(from, tos);
    }
    for (const f of files) assert.ok(graph.has(f), `deno info did not reach ${f}`);
    return graph;
  } finally {
    await Deno.remove(entry);
  }
}

/**
 * Every import that closes a cycle between the drawing's folders (each path of a row; a folder's
 * subfolders are part of it), with one file-level import behind it.
 */
function folderCycleViolations(rows: Row[], graph: Map<string, Set<string>>): Violation[] {
  const dir = (f: string) => locate(rows, f).pattern;
  const folders = new Map<string, Set<string>>();
  const witness = new Map<string, Violation>();
  for (const [from, tos] of graph) {
    for (const to of tos) {
      const [a, b] = [dir(from), dir(to)];
      if (a === b) continue;
      if (!folders.has(a)) folders.set(a, new Set());
      folders.get(a)!.add(b);
      witness.set(`${a} ${b}`, { from, to, rule: "" });
    }
  }
  const out: Violation[] = [];
  for (const c of stronglyConnected(folders)) {
    const inside = new Set(c);
    for (const a of c) {
      for (const b of folders.get(a) ?? []) {
        if (!inside.has(b)) continue;
        const w = witness.get(`${a} ${b}`)!;
        out.push({
          ...w,
          rule: `folder cycle: ${[a, ...pathTo(folders, inside, b, a)].join(" -> ")}`,
        });
      }
    }
  }
  return out;
}

const drawing = () => parseDrawing(Deno.readTextFileSync(new URL(DOC, ROOT)));
const isKnown = (v: Violation) => KNOWN.some((k) => k.from === v.from && k.to === v.to);
const show = (vs: Violation[]) => vs.map((v) => `  ${v.from} imports ${v.to} (${v.rule})`);

Deno.test(`every import keeps ${DOC}'s layers and no file is in a cycle`, async () => {
  const rows = drawing();
  const graph = await packageGraph();
  const bad = [
    ...layerViolations(rows, graph),
    ...cycleViolations(graph),
    ...folderCycleViolations(rows, graph),
  ].filter((v) => !isKnown(v));
  assert.deepEqual(show(bad), [], `imports that break ${DOC}'s layer drawing`);
});

Deno.test(`every path in ${DOC}'s layer drawing names files`, () => {
  const rows = drawing();
  const files = ["mod.ts", ...walk("sdk/"), ...walk("proto/"), ...walk("examples/")];
  for (const r of rows) {
    for (const p of r.parts.flat()) {
      assert.ok(
        files.some((f) => locate(rows, f).pattern === p),
        `${DOC}:${r.line}: "${p}" matches no file`,
      );
    }
  }
});

Deno.test("the checks catch an upward import, a sideways import, a cycle and a folder cycle", () => {
  const rows = parseDrawing(
    [MARKER, "```", "top/  what", "  │", "a/ + b/", "  │", "x/*.ts  |  y/", "```"].join("\n"),
  );
  const graph = new Map([
    ["top/t.ts", new Set(["a/a.ts", "x/x.ts"])],
    ["a/a.ts", new Set(["b/b.ts"])],
    ["b/b.ts", new Set(["a/a.ts"])],
    ["x/x.ts", new Set(["y/y.ts", "top/t.ts"])],
    ["y/y.ts", new Set<string>()],
  ]);
  assert.deepEqual(show(layerViolations(rows, graph)), [
    '  x/x.ts imports y/y.ts (sideways: "x/*.ts" and "y/" are separate parts)',
    '  x/x.ts imports top/t.ts (upward: "x/*.ts" is below "top/")',
  ]);
  assert.deepEqual(show(cycleViolations(graph)), [
    "  a/a.ts imports b/b.ts (cycle: a/a.ts -> b/b.ts -> a/a.ts)",
    "  b/b.ts imports a/a.ts (cycle: b/b.ts -> a/a.ts -> b/b.ts)",
    "  top/t.ts imports x/x.ts (cycle: top/t.ts -> x/x.ts -> top/t.ts)",
    "  x/x.ts imports top/t.ts (cycle: x/x.ts -> top/t.ts -> x/x.ts)",
  ]);
  assert.throws(() => locate(rows, "x/deep/z.ts"), /no row/);
  // Folders joined by `+` whose files import each other both ways, without a file cycle.
  const folders = new Map([
    ["a/one.ts", new Set(["b/two.ts"])],
    ["b/two.ts", new Set<string>()],
    ["b/three.ts", new Set(["a/four.ts"])],
    ["a/four.ts", new Set<string>()],
  ]);
  assert.deepEqual(show(cycleViolations(folders)), []);
  assert.deepEqual(show(folderCycleViolations(rows, folders)), [
    "  a/one.ts imports b/two.ts (folder cycle: a/ -> b/ -> a/)",
    "  b/three.ts imports a/four.ts (folder cycle: b/ -> a/ -> b/)",
  ]);
});

Deno.test("the allow-list of known violations holds only violations that still occur", async () => {
  const rows = drawing();
  const graph = await packageGraph();
  const all = [
    ...layerViolations(rows, graph),
    ...cycleViolations(graph),
    ...folderCycleViolations(rows, graph),
  ];
  const stale = KNOWN.filter((k) => !all.some((v) => v.from === k.from && v.to === k.to));
  assert.deepEqual(stale, [], "fixed: delete these entries from KNOWN in this file");
});
