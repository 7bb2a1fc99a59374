// `deno doc --lint` over the package's entry points, tolerating exactly two kinds of finding:
// - a public type that mentions a type of protobuf-es or connect-es (Any, DescMessage,
//   Transport, ...): those are npm dependencies, and re-exporting their types would pull their
//   whole type graph into our docs;
// - a public type that mentions a generated protobuf type (proto/gen, e.g. the v3 Task service's
//   own request schemas or cgroups sub-messages): generated, documented from the .proto files.
// Every other finding (missing docs, missing examples, our own unexported types) fails.
const entries = [
  "mod.ts",
  "sdk/shim/mod.ts",
  "sdk/oci/mod.ts",
  "sdk/ttrpc/mod.ts",
  "sdk/testing/mod.ts",
  "sdk/ops/mod.ts",
  "proto/mod.ts",
  "sdk/linux/mod.ts",
  "sdk/install/mod.ts",
  "sdk/init/mod.ts",
];
const external = new Set([
  "Any",
  "Timestamp",
  "Duration",
  "Empty",
  "EmptySchema",
  "AnySchema",
  "TimestampSchema",
  "Message",
  "MessageShape",
  "MessageInitShape",
  "DescMessage",
  "DescService",
  "DescEnum",
  "DescFile",
  "GenFile",
  "GenMessage",
  "GenService",
  "GenEnum",
  "Registry",
  "Transport",
  "Interceptor",
  "ServiceImplSpec",
  "ConnectError",
  "Client",
  "Code",
  "HandlerContext",
  "Hono",
  "ServiceImpl",
  "CallOptions",
  "ContextValues",
]);
for (const f of walk("proto/gen")) {
  for (const m of Deno.readTextFileSync(f).matchAll(/^export (?:const|type|enum) (\w+)/gm)) {
    external.add(m[1]);
  }
}
function* walk(dir: string): Generator<string> {
  for (const e of Deno.readDirSync(dir)) {
    if (e.isDirectory) yield* walk(`${dir}/${e.name}`);
    else if (e.name.endsWith(".ts")) yield `${dir}/${e.name}`;
  }
}
const out = await new Deno.Command(Deno.execPath(), {
  args: ["doc", "--lint", ...entries],
  stdout: "piped",
  stderr: "piped",
}).output();
// deno-lint-ignore no-control-regex
const text = new TextDecoder().decode(out.stderr).replace(/\x1b\[[0-9;]*m/g, "");
// Each finding with the declaration deno doc points at ("this is the referenced type").
const blocks = text.split(/\n(?=error\[)/).filter((b) => /^error\[/.test(b));
const findings = blocks.map((b) => b.split("\n")[0]!);
/** Every line of skiff's own (not generated) modules, to tell its declarations apart. */
const ownLines = new Set<string>();
for (const f of ["mod.ts", ...walk("sdk"), ...walk("proto")]) {
  if (f.startsWith("proto/gen/")) continue;
  for (const l of Deno.readTextFileSync(f).split("\n")) ownLines.add(l.trimEnd());
}
/**
 * A private type of protobuf-es, Connect or Hono, or one that protoc-gen-es generated: the
 * declaration deno doc shows is in none of skiff's own modules. One of skiff's own types is never
 * tolerated, even when it shares a name with a generated one (`Container`).
 */
function tolerated(block: string): boolean {
  const m = /^error\[private-type-ref\]: public type '.*' references private type '([^']+)'/.exec(
    block,
  );
  if (!m || !external.has(m[1]!)) return false;
  const lines = block.split("\n");
  const at = lines.findIndex((l) => l.includes("- this is the referenced type"));
  if (at <= 0) return false;
  const decl = lines[at - 1]!.replace(/^\s*\d*\s*\| ?/, "").trimEnd();
  return !ownLines.has(decl);
}
const bad = blocks.filter((b) => !tolerated(b)).map((b) => b.split("\n")[0]!);
if (bad.length > 0) {
  console.error(text);
  console.error(`deno doc --lint: ${bad.length} finding(s) besides references to npm types:`);
  for (const l of bad) console.error("  " + l);
  Deno.exit(1);
}
console.log(`deno doc --lint: clean (${findings.length} references to npm or generated types)`);
