/**
 * Statistics of the source tree at one git revision, for the before/after table of issue 18
 * (docs/architecture.md, "How the tree changed"):
 *
 *     deno run -A bench/tree_stats.ts [--rev <git-rev>] [--json]
 *
 * The files are read from git (`git ls-tree`, `git cat-file`), never from the work tree, so any
 * revision can be measured without a checkout. The scope is the shipped code and the examples:
 * `mod.ts`, `sdk/`, `proto/` and `examples/`, without generated code (`proto/gen/`, `*_pb.ts`).
 *
 * - Long files: over 500 lines (shown with their code lines: not blank, not comment).
 * - Long functions: over 80 lines, found with the TypeScript compiler's parser (`typescript` in deno.json):
 *   function declarations and expressions, arrow functions, methods, constructors and accessors,
 *   measured from their first to their last line. A function whose leading comment, or the
 *   comment that opens its body, contains `long:` says why it is long; it is listed as
 *   explained. A file says why in a `long:` comment in its first 40 lines.
 * - Import cycles: strongly connected components of the local import graph (static imports and
 *   re-exports, type-only ones included, and `import("...")` with a literal).
 * - Upward imports: BRIEF.md's layer rule by path, rows from the bottom: proto < sdk/ttrpc |
 *   sdk/linux < sdk/shim/*.ts < sdk/shim/{boot,server,spare} < sdk/oci | sdk/ops < mod.ts <
 *   sdk/install | sdk/init < sdk/testing < examples. Older trees' folders are placed where their successors
 *   sit (`sdk/runtime/` as `sdk/oci/`, `sdk/shim/actions/` as `sdk/shim/boot/`); files that sat
 *   loose in `sdk/shim/` count as the seam's row, where they were. Imports between the two parts
 *   of one row are counted apart, as sideways.
 * - `mod.ts`'s exports: names, split into values and types by the compiler's checker.
 * - JSDoc examples in `mod.ts`, `sdk/` and `proto/`: fenced `ts` blocks, runnable or `ignore`.
 * - Lines of examples/runc, runsc and crun `main.ts`: all lines, and code lines (not blank, not
 *   only a comment).
 *
 * @module
 */
import ts from "typescript";
import { stronglyConnected } from "../tests/setup/scc.ts";

const LONG_FILE = 500;
const LONG_FUNCTION = 80;

/** One function over the limit. */
export interface LongFunction {
  /** The file it is in. */
  file: string;
  /** Its first line (1-based). */
  line: number;
  /** A readable name (`Class.method`, `name`, or `(arrow)`). */
  name: string;
  /** Its length in lines. */
  lines: number;
  /** Its leading comment says why it is long (`long:`). */
  explained: boolean;
}

/** An import that breaks the layer rule. */
export interface LayerBreak {
  /** The importing file. */
  from: string;
  /** The imported file. */
  to: string;
}

/** What {@link treeStats} measures. */
export interface TreeStats {
  /** The revision measured, as given and as a commit. */
  rev: string;
  /** Its commit hash. */
  commit: string;
  /** Hand-written files over 500 lines: all lines, code lines (not comments or blank). */
  longFiles: { file: string; lines: number; code: number; explained: boolean }[];
  /** Functions over 80 lines. */
  longFunctions: LongFunction[];
  /** Import cycles: each a sorted list of the files in one strongly connected component. */
  cycles: string[][];
  /** Imports from a lower row into a higher one. */
  upward: LayerBreak[];
  /** Imports between the two parts of one row. */
  sideways: LayerBreak[];
  /** `mod.ts`'s exported names. */
  modExports: { values: string[]; types: string[] };
  /** JSDoc example blocks. */
  examples: { runnable: number; ignored: number };
  /** The example shims' `main.ts`: all lines and code lines; absent when the file is. */
  exampleLines: Record<string, { lines: number; code: number } | undefined>;
}

async function git(args: string[], stdin?: string): Promise<string> {
  const cmd = new Deno.Command("git", {
    args,
    stdin: stdin === undefined ? "null" : "piped",
    stdout: "piped",
    stderr: "piped",
  });
  const child = cmd.spawn();
  if (stdin !== undefined) {
    const w = child.stdin.getWriter();
    await w.write(new TextEncoder().encode(stdin));
    await w.close();
  }
  const out = await child.output();
  if (!out.success) {
    throw new Error(`git ${args.join(" ")}: ${new TextDecoder().decode(out.stderr).trim()}`);
  }
  return new TextDecoder().decode(out.stdout);
}

/** Reads every in-scope `.ts` file of `commit` in one `git cat-file --batch`. */
async function readTree(commit: string): Promise<Map<string, string>> {
  const names = (await git([
    "ls-tree",
    "-r",
    "--name-only",
    commit,
    "--",
    "mod.ts",
    "sdk",
    "proto",
    "examples",
  ]))
    .split("\n")
    .filter((f) => f.endsWith(".ts") && !f.startsWith("proto/gen/") && !f.endsWith("_pb.ts"));
  const raw = new TextEncoder().encode(
    await git(["cat-file", "--batch"], names.map((f) => `${commit}:${f}\n`).join("")),
  );
  const files = new Map<string, string>();
  let at = 0;
  const dec = new TextDecoder();
  for (const name of names) {
    const nl = raw.indexOf(10, at);
    const header = dec.decode(raw.subarray(at, nl)).split(" ");
    const size = Number(header[2]);
    files.set(name, dec.decode(raw.subarray(nl + 1, nl + 1 + size)));
    at = nl + 1 + size + 1;
  }
  return files;
}

/** The generated files, read only so that the compiler can resolve imports into them. */
async function readGenerated(commit: string): Promise<Map<string, string>> {
  const names = (await git(["ls-tree", "-r", "--name-only", commit, "--", "proto/gen"]))
    .split("\n").filter((f) => f.endsWith(".ts"));
  const out = new Map<string, string>();
  for (const n of names) out.set(n, await git(["show", `${commit}:${n}`]));
  return out;
}

function lineCount(text: string): number {
  return text.endsWith("\n") ? text.split("\n").length - 1 : text.split("\n").length;
}

/** Normalises `a/b/../c.ts` style paths. */
function normalize(path: string): string {
  const out: string[] = [];
  for (const part of path.split("/")) {
    if (part === "..") out.pop();
    else if (part !== "." && part !== "") out.push(part);
  }
  return out.join("/");
}

function resolveLocal(from: string, spec: string, files: Map<string, string>): string | undefined {
  if (!spec.startsWith("./") && !spec.startsWith("../")) return undefined;
  const dir = from.includes("/") ? from.slice(0, from.lastIndexOf("/")) : "";
  const target = normalize(`${dir}/${spec}`);
  return files.has(target) ? target : undefined;
}

function importsOf(sf: ts.SourceFile): string[] {
  const specs: string[] = [];
  const visit = (n: ts.Node) => {
    if (
      (ts.isImportDeclaration(n) || ts.isExportDeclaration(n)) && n.moduleSpecifier &&
      ts.isStringLiteral(n.moduleSpecifier)
    ) {
      specs.push(n.moduleSpecifier.text);
    } else if (
      ts.isCallExpression(n) && n.expression.kind === ts.SyntaxKind.ImportKeyword &&
      n.arguments.length > 0 && ts.isStringLiteralLike(n.arguments[0])
    ) {
      specs.push(n.arguments[0].text);
    } else if (ts.isImportTypeNode(n) && ts.isLiteralTypeNode(n.argument)) {
      const lit = n.argument.literal;
      if (ts.isStringLiteral(lit)) specs.push(lit.text);
    }
    ts.forEachChild(n, visit);
  };
  visit(sf);
  return specs;
}

function functionName(n: ts.Node, sf: ts.SourceFile): string {
  const own = (n as { name?: ts.Node }).name;
  const base = ts.isConstructorDeclaration(n) ? "constructor" : own ? own.getText(sf) : undefined;
  let holder: string | undefined;
  for (let p = n.parent; p; p = p.parent) {
    if ((ts.isClassLike(p) || ts.isFunctionLike(p)) && (p as { name?: ts.Node }).name) {
      holder = (p as { name?: ts.Node }).name!.getText(sf);
      break;
    }
    if (ts.isVariableDeclaration(p) && !base) {
      holder = p.name.getText(sf);
      break;
    }
  }
  if (base) return holder ? `${holder}.${base}` : base;
  return holder ? `${holder} (function value)` : "(anonymous)";
}

function longFunctions(file: string, sf: ts.SourceFile): LongFunction[] {
  const out: LongFunction[] = [];
  const text = sf.getFullText();
  const visit = (n: ts.Node) => {
    if (
      ts.isFunctionDeclaration(n) || ts.isFunctionExpression(n) || ts.isArrowFunction(n) ||
      ts.isMethodDeclaration(n) || ts.isConstructorDeclaration(n) || ts.isGetAccessor(n) ||
      ts.isSetAccessor(n)
    ) {
      const body = (n as ts.FunctionLikeDeclaration).body;
      if (body) {
        const first = sf.getLineAndCharacterOfPosition(n.getStart(sf)).line;
        const last = sf.getLineAndCharacterOfPosition(n.getEnd()).line;
        const lines = last - first + 1;
        if (lines > LONG_FUNCTION) {
          // The leading comments of the function, or of the statement that holds it.
          let holder: ts.Node = n;
          while (
            holder.parent && !ts.isSourceFile(holder.parent) && !ts.isClassLike(holder.parent) &&
            !ts.isBlock(holder.parent)
          ) holder = holder.parent;
          const comments = [
            ...(ts.getLeadingCommentRanges(text, holder.getFullStart()) ?? []),
            ...(ts.getLeadingCommentRanges(text, n.getFullStart()) ?? []),
            // or the first line of its body
            ...(ts.isBlock(body)
              ? ts.getLeadingCommentRanges(text, body.getStart(sf) + 1) ?? []
              : []),
          ].map((r) => text.slice(r.pos, r.end));
          out.push({
            file,
            line: first + 1,
            name: functionName(n, sf),
            lines,
            explained: comments.some((c) => /\blong:/i.test(c)),
          });
        }
      }
    }
    ts.forEachChild(n, visit);
  };
  visit(sf);
  return out;
}

/** The rows of the layer rule, bottom first; each row's parts hold path prefixes. */
const ROWS: string[][][] = [
  [["proto/"]],
  [["sdk/ttrpc/"], ["sdk/linux/"]],
  [["sdk/shim/*"]],
  [["sdk/shim/boot/", "sdk/shim/server/", "sdk/shim/spare/", "sdk/shim/actions/"]],
  [["sdk/oci/", "sdk/runtime/"], ["sdk/ops/"]],
  [["mod.ts"]],
  [["sdk/install/"], ["sdk/init/"]],
  [["sdk/testing/"]],
  [["examples/"]],
];

function place(file: string): { row: number; part: number } {
  let best: { row: number; part: number; len: number } | undefined;
  ROWS.forEach((parts, row) =>
    parts.forEach((prefixes, part) => {
      for (const p of prefixes) {
        const hit = p.endsWith("/*")
          ? file.startsWith(p.slice(0, -1)) && !file.slice(p.length - 1).includes("/")
          : p.endsWith("/")
          ? file.startsWith(p)
          : file === p;
        if (hit && (!best || p.length > best.len)) best = { row, part, len: p.length };
      }
    })
  );
  if (!best) throw new Error(`${file}: in no row of the layer rule`);
  return best;
}

/** mod.ts's exported names, split by the checker into values and types. */
function modExports(files: Map<string, string>): { values: string[]; types: string[] } {
  const root = "/tree/";
  const options: ts.CompilerOptions = {
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
    allowImportingTsExtensions: true,
    noEmit: true,
    noResolve: false,
    skipLibCheck: true,
    types: [],
  };
  const host = ts.createCompilerHost(options);
  const get = (p: string) => p.startsWith(root) ? files.get(p.slice(root.length)) : undefined;
  host.fileExists = (p) => get(p) !== undefined;
  host.readFile = (p) => get(p);
  host.getSourceFile = (p, lang) => {
    const t = get(p);
    return t === undefined ? undefined : ts.createSourceFile(p, t, lang, true);
  };
  host.getDefaultLibFileName = () => `${root}__nolib.d.ts`;
  host.getCurrentDirectory = () => root;
  const program = ts.createProgram([`${root}mod.ts`], { ...options, noLib: true }, host);
  const checker = program.getTypeChecker();
  const sf = program.getSourceFile(`${root}mod.ts`);
  if (!sf) return { values: [], types: [] };
  const mod = checker.getSymbolAtLocation(sf);
  const values: string[] = [];
  const types: string[] = [];
  for (const s of mod ? checker.getExportsOfModule(mod) : []) {
    const typeOnly = (s.declarations ?? []).some((
      d,
    ) => (ts.isExportSpecifier(d) && (d.isTypeOnly || d.parent.parent.isTypeOnly)));
    const target = s.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(s) : s;
    if (!typeOnly && target.flags & ts.SymbolFlags.Value) values.push(s.name);
    else types.push(s.name);
  }
  return { values: values.sort(), types: types.sort() };
}

function countExamples(files: Map<string, string>): { runnable: number; ignored: number } {
  let runnable = 0;
  let ignored = 0;
  for (const [file, text] of files) {
    if (!(file === "mod.ts" || file.startsWith("sdk/") || file.startsWith("proto/"))) continue;
    for (const line of text.split("\n")) {
      const m = /^\s*\*\s*```(ts|typescript|tsx|js|javascript|jsx)\b(.*)$/.exec(line);
      if (!m) continue;
      if (/\bignore\b/.test(m[2])) ignored++;
      else runnable++;
    }
  }
  return { runnable, ignored };
}

function codeLines(text: string): number {
  let n = 0;
  let inBlock = false;
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (inBlock) {
      if (line.includes("*/")) inBlock = false;
      continue;
    }
    if (line === "" || line.startsWith("//")) continue;
    if (line.startsWith("/*")) {
      inBlock = !line.includes("*/");
      continue;
    }
    n++;
  }
  return n;
}

/** Measures the tree at `rev` (any git revision; default `HEAD`). */
export async function treeStats(rev = "HEAD"): Promise<TreeStats> {
  const commit = (await git(["rev-parse", "--verify", `${rev}^{commit}`])).trim();
  const files = await readTree(commit);
  const sources = new Map<string, ts.SourceFile>();
  for (const [f, t] of files) {
    sources.set(f, ts.createSourceFile(f, t, ts.ScriptTarget.ES2022, true, ts.ScriptKind.TS));
  }

  const longFiles = [...files].map(([file, t]) => ({
    file,
    lines: lineCount(t),
    code: codeLines(t),
    explained: /\blong:/i.test(t.split("\n").slice(0, 40).join("\n")),
  })).filter((f) => f.lines > LONG_FILE).sort((a, b) => b.lines - a.lines);

  const fns = [...sources].flatMap(([f, sf]) => longFunctions(f, sf))
    .sort((a, b) => b.lines - a.lines);

  const graph = new Map<string, Set<string>>();
  for (const [f, sf] of sources) {
    const deps = new Set<string>();
    for (const spec of importsOf(sf)) {
      const to = resolveLocal(f, spec, files);
      if (to) deps.add(to);
    }
    graph.set(f, deps);
  }
  const upward: LayerBreak[] = [];
  const sideways: LayerBreak[] = [];
  for (const [from, tos] of graph) {
    const a = place(from);
    for (const to of tos) {
      const b = place(to);
      if (b.row > a.row) upward.push({ from, to });
      else if (b.row === a.row && b.part !== a.part) sideways.push({ from, to });
    }
  }

  const generated = await readGenerated(commit);
  const all = new Map([...files, ...generated]);
  const exampleLines: TreeStats["exampleLines"] = {};
  for (const name of ["runc", "runsc", "crun"]) {
    const t = files.get(`examples/${name}/main.ts`);
    exampleLines[name] = t === undefined ? undefined : { lines: lineCount(t), code: codeLines(t) };
  }
  return {
    rev,
    commit,
    longFiles,
    longFunctions: fns,
    cycles: stronglyConnected(graph),
    upward,
    sideways,
    modExports: modExports(all),
    examples: countExamples(files),
    exampleLines,
  };
}

function report(s: TreeStats): string {
  const lines: string[] = [];
  const ex = s.longFunctions.filter((f) => f.explained).length;
  const fx = s.longFiles.filter((f) => f.explained).length;
  lines.push(`# tree at ${s.rev} (${s.commit.slice(0, 12)})`, "");
  lines.push(`hand-written files over ${LONG_FILE} lines: ${s.longFiles.length} (${fx} say why)`);
  for (const f of s.longFiles) {
    lines.push(
      `  ${String(f.lines).padStart(5)}  (${String(f.code).padStart(4)} code)  ${f.file}${
        f.explained ? "  (long: says why)" : ""
      }`,
    );
  }
  lines.push(
    `functions over ${LONG_FUNCTION} lines (TypeScript parser): ${s.longFunctions.length} (${ex} say why)`,
  );
  for (const f of s.longFunctions) {
    lines.push(
      `  ${String(f.lines).padStart(5)}  ${f.file}:${f.line} ${f.name}${
        f.explained ? "  (long: says why)" : ""
      }`,
    );
  }
  lines.push(`import cycles: ${s.cycles.length}`);
  for (const c of s.cycles) lines.push(`  ${c.join(" <-> ")}`);
  lines.push(`upward imports: ${s.upward.length}`);
  for (const u of s.upward) lines.push(`  ${u.from} -> ${u.to}`);
  lines.push(`sideways imports (between the parts of one row): ${s.sideways.length}`);
  for (const u of s.sideways) lines.push(`  ${u.from} -> ${u.to}`);
  const m = s.modExports;
  lines.push(
    `mod.ts exports: ${
      m.values.length + m.types.length
    } (${m.values.length} values, ${m.types.length} types)`,
  );
  lines.push(`  values: ${m.values.join(", ")}`);
  lines.push(`  types: ${m.types.join(", ")}`);
  const e = s.examples;
  lines.push(
    `JSDoc examples (mod.ts, sdk/, proto/): ${
      e.runnable + e.ignored
    } (${e.runnable} run, ${e.ignored} ts ignore)`,
  );
  for (const [name, l] of Object.entries(s.exampleLines)) {
    lines.push(
      `examples/${name}/main.ts: ${l ? `${l.lines} lines, ${l.code} of code` : "absent"}`,
    );
  }
  return lines.join("\n");
}

if (import.meta.main) {
  const args = [...Deno.args];
  let rev = "HEAD";
  const at = args.indexOf("--rev");
  if (at >= 0) {
    if (!args[at + 1]) throw new Error("--rev needs a git revision");
    rev = args[at + 1];
  }
  const stats = await treeStats(rev);
  console.log(args.includes("--json") ? JSON.stringify(stats, null, 2) : report(stats));
}
