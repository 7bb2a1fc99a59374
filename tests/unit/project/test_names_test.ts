// Tests mirror the tree: every module of sdk/ and proto/ with logic of its own has a test file
// named after it, at the mirrored path of one tier, so a newcomer finds a module's tests by its
// name: `sdk/<dir>/<name>.ts` -> `tests/{unit,integration,external}/<dir>/<name>_test.ts`,
// `proto/<name>.ts` -> `tests/unit/proto/<name>_test.ts`; or, for a small module, its own
// runnable JSDoc examples (`deno test --doc` runs them in the unit tier). A module with neither
// is listed below with the reason; an entry that no longer applies fails too, so the list only
// shrinks.
import assert from "node:assert/strict";

const ROOT = new URL("../../../", import.meta.url);
const TIERS = ["unit", "integration", "external"];

/** Modules with logic and no test named after them, each with why. */
const WITHOUT: Record<string, string> = {
  "proto/gen_wire.ts": "the generator: `bash proto/gen.sh --check` reruns it, and " +
    "tests/unit/proto/wire_table_test.ts checks what it wrote against protobuf-es",
  "sdk/linux/cgroup_stats_v1.ts":
    "reads real cgroup v1 files: tests/integration/linux/cgroups_test.ts " +
    "and the conformance `metrics` scenario (tests/integration/conformance_test.ts)",
  "sdk/linux/pty.ts":
    "a real pty from runc's console socket: tests/integration/linux/console_test.ts",
  "sdk/ops/_bounded_front.ts": "private to the ops endpoint: tests/unit/ops/shim_ops_test.ts",
  "sdk/ops/_routes.ts": "private to the ops endpoint: tests/unit/ops/shim_ops_test.ts",
  "sdk/shim/boot/run.ts": "runShim's dispatch: tests/unit/shim/boot/bootstrap_test.ts, " +
    "tests/integration/shim/boot/info_test.ts, tests/integration/shim_start_dialects_test.ts",
  "sdk/shim/server/platform.ts": "the ShimPlatform interface (types): its fakes are the unit " +
    "tests' (task_service_test.ts, _container_fakes.ts), linux_platform.ts the real one",
  "sdk/shim/server/pod.ts": "one pod's server in a process: every shim integration test; " +
    "several in one process: tests/integration/shim/spare/shared_test.ts",
  "sdk/shim/server/serve.ts": "the server's main (ends with the process): every shim integration " +
    "test, e.g. tests/integration/shim_runc_containerd_test.ts",
  "sdk/shim/server/server_logger.ts": "writes to containerd's log FIFO: " +
    "tests/integration/shim_runc_containerd_test.ts and tests/integration/ops_shim_test.ts",
  "sdk/shim/server/services.ts": "registration only: tests/unit/shim/spare/rehearsal_test.ts " +
    "(the rehearsal registers the server's own services) and every shim integration test",
  "sdk/shim/server/shutdown.ts": "a pod's server's end: every integration test's Shutdown, " +
    "tests/integration/shim/spare/shared_test.ts (one pod's end of several)",
  "sdk/shim/spare/extension.ts":
    "the spare's server extension: tests/integration/spare_containerd_test.ts",
  "sdk/shim/spare/spare.ts": "the spare process: tests/integration/spare_containerd_test.ts and " +
    "tests/guest/spare_cgroup_checks.ts",
  "sdk/shim/spare/spawn.ts": "spawns the next spare: tests/integration/spare_containerd_test.ts",
  "sdk/testing/conformance/catalogue.ts": "the scenarios: tests/integration/conformance_test.ts " +
    "runs them on the Go shim, skiff's examples and a broken shim",
  "sdk/testing/conformance/cli.ts": "`deno task conformance`: its runner is " +
    "tests/integration/conformance_test.ts's",
  "sdk/testing/conformance/cri.ts": "the CRI scenario: tests/integration/conformance_test.ts",
  "sdk/testing/conformance/events.ts": "the event recorder of every scenario: " +
    "tests/integration/conformance_test.ts (`events-order`)",
  "sdk/testing/cri_client.ts": "a CRI client over gRPC: tests/integration/cri_containerd_test.ts",
  "sdk/testing/critest_cli.ts":
    "`deno task critest`: its library is tests/external/critest_test.ts's",
  "sdk/testing/guest_cli.ts":
    "`deno task guest`: its library is tests/external/cgroup2_guest_test.ts's",
  "sdk/ttrpc/_client_connection.ts": "private to the client: tests/unit/ttrpc/transport_test.ts",
  "sdk/ttrpc/_handler_context.ts": "private to the server: tests/unit/ttrpc/transport_test.ts " +
    "(deadlines, metadata) and tests/unit/ops/shim_ops_test.ts (interceptors)",
  "sdk/ttrpc/_peer_cred.ts": "SO_PEERCRED of a real peer: tests/integration/ttrpc/server_test.ts",
  "sdk/ttrpc/_server_connection.ts": "private to the server: tests/unit/ttrpc/bad_input_test.ts, " +
    "bounds_test.ts and transport_test.ts",
};

function walk(dir: string, out: string[] = []): string[] {
  for (const e of Deno.readDirSync(new URL(dir, ROOT))) {
    const path = `${dir}${e.name}`;
    if (e.isDirectory) walk(`${path}/`, out);
    else if (e.name.endsWith(".ts")) out.push(path);
  }
  return out;
}

/** Modules to map: hand-written sources of sdk/ and proto/ (not generated, not tests). */
function modules(): string[] {
  const proto = [...Deno.readDirSync(new URL("proto/", ROOT))]
    .filter((e) => e.isFile && e.name.endsWith(".ts")).map((e) => `proto/${e.name}`);
  return [...walk("sdk/"), ...proto]
    .filter((p) => !p.endsWith("_test.ts") && !p.endsWith("_pb.ts"))
    .sort();
}

/**
 * Whether a module has logic of its own: a function, a class, an arrow function or a `new`,
 * once comments and strings are gone. Barrels (`export ... from`), types and constants do not.
 */
function hasLogic(source: string): boolean {
  const code = source
    .replace(/\/\*[\s\S]*?\*\//g, "")
    .replace(/(^|[^:])\/\/.*$/gm, "$1")
    .replace(/`(?:\\[\s\S]|[^`\\])*`|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'/g, '""');
  return /\bfunction\b|\bclass\b|=>|\bnew\s+[A-Z]/.test(code);
}

/** Whether a module has a JSDoc example that `deno test --doc` runs (not marked `ignore`). */
function runnableExample(source: string): boolean {
  return /^\s*\*\s*```(?:ts|typescript)\s*$/m.test(source);
}

/** Where a module's tests may live, one path per tier. */
function testPaths(module: string): string[] {
  const rel = module.startsWith("sdk/") ? module.slice(4) : module;
  const test = rel.replace(/\.ts$/, "_test.ts");
  return TIERS.map((t) => `tests/${t}/${test}`);
}

function exists(path: string): boolean {
  try {
    return Deno.statSync(new URL(path, ROOT)).isFile;
  } catch {
    return false;
  }
}

Deno.test("hasLogic tells modules with code from barrels, types and constants", () => {
  assert.equal(hasLogic('export { a } from "./a.ts";\nexport type { B } from "./b.ts";'), false);
  assert.equal(hasLogic("export interface X {\n  f(a: number): void;\n}"), false);
  assert.equal(hasLogic('export const NAME = "x => y"; // a function\n/** class */'), false);
  assert.equal(hasLogic("export function f() {}"), true);
  assert.equal(hasLogic("export const f = (a: number) => a + 1;"), true);
  assert.equal(hasLogic("export const m = new Map<string, number>();"), true);
});

Deno.test("runnableExample counts examples deno test --doc runs, not ignored ones", () => {
  assert.equal(runnableExample("/**\n * ```ts\n * f();\n * ```\n */"), true);
  assert.equal(runnableExample("/**\n * ```ts ignore\n * f();\n * ```\n */"), false);
  assert.equal(runnableExample("no examples"), false);
});

Deno.test("testPaths mirrors sdk/ and proto/ in each tier", () => {
  assert.deepEqual(testPaths("sdk/linux/reaper.ts"), [
    "tests/unit/linux/reaper_test.ts",
    "tests/integration/linux/reaper_test.ts",
    "tests/external/linux/reaper_test.ts",
  ]);
  assert.equal(testPaths("proto/wire.ts")[0], "tests/unit/proto/wire_test.ts");
});

Deno.test("every module with logic has a test named after it, or a reason here", () => {
  const missing: string[] = [];
  const stale: string[] = [];
  for (const m of modules()) {
    const source = Deno.readTextFileSync(new URL(m, ROOT));
    const logic = hasLogic(source);
    const tested = testPaths(m).some(exists) || runnableExample(source);
    if (m in WITHOUT) {
      if (!logic || tested) stale.push(`${m}: ${tested ? "has a test now" : "has no logic"}`);
      continue;
    }
    if (logic && !tested) missing.push(`${m} -> ${testPaths(m)[0]} (or another tier)`);
  }
  for (const m of Object.keys(WITHOUT)) {
    if (!exists(m)) stale.push(`${m}: no such module`);
  }
  assert.deepEqual(
    missing,
    [],
    `modules with logic and no test named after them; add one, or say why in WITHOUT:\n  ${
      missing.join("\n  ")
    }`,
  );
  assert.deepEqual(stale, [], `entries of WITHOUT that no longer apply:\n  ${stale.join("\n  ")}`);
});
