/**
 * The package as JSR would serve it, for tests that play a runtime author outside the checkout:
 * the files `deno publish --dry-run` lists, copied with the package's import-map specifiers
 * unfurled (as JSR rewrites them at publish time), and the import map an author's project has
 * (the declared exports, and the npm packages an author adds next to skiff).
 */
import assert from "node:assert/strict";
import { dirname, relative } from "node:path";
import ts from "typescript";

export const ROOT: string = new URL("..", import.meta.url).pathname.replace(/\/$/, "");
const CONFIG = JSON.parse(Deno.readTextFileSync(`${ROOT}/deno.json`)) as {
  name: string;
  exports: Record<string, string>;
  imports: Record<string, string>;
};
/** The npm packages an author adds next to skiff (`deno add npm:@connectrpc/connect ...`). */
const AUTHOR_NPM = /^@(connectrpc\/connect|bufbuild\/protobuf)(\/|$)/;

/** The files `deno publish --dry-run` would upload, relative to the checkout. */
export async function publishedFiles(): Promise<string[]> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["publish", "--dry-run", "--allow-dirty"],
    cwd: ROOT,
    env: { NO_COLOR: "1" },
  }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  assert.ok(out.success, `deno publish --dry-run failed:\n${text}`);
  const files = [...text.matchAll(/^\s+file:\/\/(\S+) \(/gm)].map((m) => relative(ROOT, m[1]));
  assert.ok(files.includes("mod.ts"), `no file list in deno publish's output:\n${text}`);
  return files;
}

/**
 * What JSR does to a published module: the specifiers of its imports (static, dynamic, type and
 * re-exports, found by TypeScript's pre-processor, so text in strings and comments is left
 * alone) that its import map names become what they map to.
 */
function unfurl(file: string, source: string): string {
  const { importedFiles } = ts.preProcessFile(source, true, true);
  let out = "";
  let at = 0;
  for (const ref of [...importedFiles].sort((x, y) => x.pos - y.pos)) {
    const target = CONFIG.imports[ref.fileName];
    if (target === undefined) continue;
    let spec = target;
    if (target.startsWith("./")) {
      spec = relative(dirname(file), target.slice(2));
      if (!spec.startsWith(".")) spec = `./${spec}`;
    }
    // `pos` is the opening quote's offset (TypeScript's `end` is not the closing one).
    const start = ref.pos + 1;
    assert.equal(source.slice(start, start + ref.fileName.length), ref.fileName, file);
    out += source.slice(at, start) + spec;
    at = start + ref.fileName.length;
  }
  return out + source.slice(at);
}

/**
 * Writes the package as JSR serves it into `dir` (its deno.json included: metadata there, and
 * what `@skiff/shim/init --from DIR` reads the exports from).
 */
export async function writePublishedPackage(dir: string): Promise<void> {
  for (const f of await publishedFiles()) {
    await Deno.mkdir(dirname(`${dir}/${f}`), { recursive: true });
    const bytes = await Deno.readFile(`${ROOT}/${f}`);
    if (f.endsWith(".ts")) {
      await Deno.writeTextFile(`${dir}/${f}`, unfurl(f, new TextDecoder().decode(bytes)));
    } else await Deno.writeFile(`${dir}/${f}`, bytes);
  }
}

/**
 * An author's import map: each declared export of the package at `pkg` (a path relative to the
 * project), and the npm packages an author adds.
 */
export function authorImports(pkg: string): Record<string, string> {
  const imports: Record<string, string> = {};
  for (const [key, path] of Object.entries(CONFIG.exports)) {
    imports[key === "." ? CONFIG.name : `${CONFIG.name}${key.slice(1)}`] = `${pkg}/${
      path.slice(2)
    }`;
  }
  for (const [key, target] of Object.entries(CONFIG.imports)) {
    if (AUTHOR_NPM.test(key)) imports[key] = target;
  }
  return imports;
}
