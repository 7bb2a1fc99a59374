// The short-lived actions (`start`, `delete`, `-v`, `-info`) load only what they need: the
// module graph each one evaluates, from the example shims' entry files, is held to an explicit
// allow-list. It fails when a change makes an action load protobuf-es's reflection, Connect, a
// generated descriptor, Node compatibility (`node:*`) or any module not listed here; adding a
// module to an action is then a decision made here, with its cost measured (bench/startup_bench.ts).
import assert from "node:assert/strict";

const ROOT = new URL("../../..", import.meta.url);

const EXAMPLES = ["examples/runc/main.ts", "examples/runsc/main.ts", "examples/crun/main.ts"];

/** Every module an action may evaluate, relative to the checkout (npm packages by name). */
const SHARED = [
  "mod.ts",
  "sdk/shim/boot/run.ts",
  "proto/wire.ts",
  "sdk/shim/contract/flags.ts",
  // The launcher contract's variable names (constants only): run.ts names the launcher for the
  // operator's `upgrade` command.
  "sdk/shim/contract/launcher_env.ts",
  "sdk/shim/version.ts",
  "sdk/shim/shim.ts",
  "sdk/shim/options.ts",
  "sdk/shim/endpoint.ts",
  "sdk/shim/logger.ts",
  "sdk/ttrpc/status_error.ts",
  // The OCI CLI adapter (one file until the split, the same code) and OciShim: `delete` runs
  // a runtime command; in the default bundle install they share the entry's chunk.
  "sdk/oci/cli.ts",
  "sdk/oci/command.ts",
  "sdk/oci/errors.ts",
  "sdk/oci/runtime_log.ts",
  "sdk/oci/shim.ts",
  "sdk/oci/features.ts",
  "npm:@bufbuild/protobuf/wire",
  "npm:smol-toml",
];
/**
 * An example's own modules besides its entry: runsc's cgroup-parent helper (no imports; the
 * installed bundle merges it into the entry's chunk).
 */
const OWN: Record<string, string[]> = {
  "examples/runsc/main.ts": ["examples/runsc/cgroup_parent.ts"],
};
const ALLOWED: Record<string, string[]> = {
  "-v": [],
  "-info": ["sdk/shim/boot/info.ts"],
  start: [
    "sdk/shim/boot/start.ts",
    "sdk/shim/contract/server_socket.ts",
    "sdk/shim/contract/socket_address.ts",
    // Go's path.Clean for the socket address (its own file since mount.ts shares it; the
    // installed bundle merges modules, so the split costs an installed shim nothing).
    "sdk/linux/clean_path.ts",
    "sdk/shim/contract/sha256.ts",
    // containerd's version, which decides the answer's format (asked only on 1.7-2.2).
    "sdk/shim/contract/containerd_version.ts",
    // The cold server's notice that it listens (no module of its own beyond this one).
    "sdk/shim/boot/ready.ts",
    // The launcher contract's variable names (constants only).
    "sdk/shim/contract/launcher_env.ts",
    // The warm spare's start side: where a spare waits, and the handoff's client.
    "sdk/shim/spare/config.ts",
    "sdk/shim/spare/handoff.ts",
    // Shared servers' start side: join the server taking pods, or bring the next one up.
    "sdk/shim/spare/join.ts",
    // The spare's containerd, told apart from a reused pid by its start time; start's nice
    // value for the spare (both from /proc/<pid>/stat).
    "sdk/linux/proc_stat.ts",
    // The server's OOM score (containerd's plus one), set by start as the Go shims do.
    "sdk/linux/oom_score.ts",
    // Only with runc options naming shim_cgroup.
    "sdk/linux/cgroup_join.ts",
    "sdk/linux/cgroup_paths.ts",
  ],
  delete: [
    "sdk/shim/boot/delete.ts",
    "sdk/shim/contract/bundle_files.ts",
    "sdk/shim/contract/server_socket.ts",
    "sdk/shim/contract/socket_address.ts",
    "sdk/linux/clean_path.ts",
    "sdk/shim/contract/sha256.ts",
    // mount.ts reads mountinfo; libc is opened only when a dead server left a mount.
    "sdk/linux/mount.ts",
    "sdk/linux/libc.ts",
    // The name of a live upgrade's state file, which a dead server's delete removes (constants).
    "sdk/shim/contract/upgrade.ts",
  ],
};
/** What each action imports dynamically when it runs (run.ts's `await import`s). */
const ACTION_MODULE: Record<string, string | undefined> = {
  "-v": undefined,
  "-info": "sdk/shim/boot/info.ts",
  start: "sdk/shim/boot/start.ts",
  delete: "sdk/shim/boot/delete.ts",
};

interface InfoModule {
  specifier: string;
  dependencies?: { code?: { specifier: string }; isDynamic?: boolean }[];
}

async function graph(entry: string): Promise<Map<string, InfoModule>> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["info", "--json", entry],
    cwd: ROOT.pathname,
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
  const info = JSON.parse(new TextDecoder().decode(out.stdout)) as { modules: InfoModule[] };
  return new Map(info.modules.map((m) => [m.specifier, m]));
}

/** Names a module as the allow-list does: checkout-relative, or an npm package without version. */
function name(specifier: string): string {
  if (specifier.startsWith(ROOT.href)) return specifier.slice(ROOT.href.length);
  return specifier.replace(/^(npm:(?:@[^/]+\/)?[^@/]+)@[^/]+/, "$1");
}

/**
 * Modules evaluated from `roots`: static value imports, transitively (type-only imports are
 * erased); `await import()` is followed only from `action`, the module that runs the action
 * (its own lazy imports may run; another module's, e.g. start's from delete, do not).
 */
function evaluated(
  modules: Map<string, InfoModule>,
  roots: string[],
  action?: string,
): Set<string> {
  const seen = new Set<string>();
  const todo = [...roots];
  while (todo.length > 0) {
    const spec = todo.pop()!;
    if (seen.has(spec)) continue;
    seen.add(spec);
    for (const dep of modules.get(spec)?.dependencies ?? []) {
      const target = dep.code?.specifier;
      if (!target) continue;
      if (dep.isDynamic && name(spec) !== action) continue;
      todo.push(target);
    }
  }
  return new Set([...seen].map(name));
}

for (const example of EXAMPLES) {
  Deno.test(`${example}: start, delete, -v and -info load only their allow-listed modules`, async () => {
    const modules = await graph(example);
    for (const [action, extra] of Object.entries(ALLOWED)) {
      const roots = [new URL(example, ROOT).href];
      const mod = ACTION_MODULE[action];
      if (mod) roots.push(new URL(mod, ROOT).href);
      const loaded = evaluated(modules, roots, mod);
      const allowed = new Set([example, ...(OWN[example] ?? []), ...SHARED, ...extra]);
      const extraneous = [...loaded].filter((m) => !allowed.has(m));
      assert.deepEqual(extraneous, [], `${action} of ${example} loads modules not allowed`);
      for (const m of loaded) {
        assert.doesNotMatch(m, /^npm:@connectrpc|^npm:@bufbuild\/protobuf$|^proto\/gen\/|^node:/);
      }
    }
  });
}

Deno.test("the allow-list check catches a heavy import (it is not vacuous)", async () => {
  const modules = await graph("sdk/shim/server/serve.ts");
  const loaded = evaluated(modules, [new URL("sdk/shim/server/serve.ts", ROOT).href]);
  assert.ok(loaded.has("sdk/ttrpc/server.ts"), [...loaded].join("\n"));
  // The Sandbox API's lazy import, followed, brings Connect and a generated descriptor.
  const lazy = evaluated(
    modules,
    [new URL("sdk/shim/server/serve.ts", ROOT).href],
    "sdk/shim/server/services.ts",
  );
  assert.ok([...lazy].some((m) => GENERATED_DESCRIPTOR.test(m)), [...lazy].join("\n"));
  assert.ok(lazy.has("npm:@connectrpc/connect"), [...lazy].join("\n"));
});

/** protobuf-es's generated files: evaluating one boots its reflection (~25 ms, ~1.5 MiB). */
const GENERATED_DESCRIPTOR = /^proto\/gen\/(?!wire\/)|^npm:@bufbuild\/protobuf\/(wkt|codegenv2)$/;

// A cold server (and the spare, which becomes one) serves the Task API, publishes events and
// answers Stats from wire tables: nothing it evaluates, at start or later on a container's path
// (lazy imports followed: OOM, cgroup statistics), is a generated descriptor. Only the Sandbox
// API (containerd 2.x's sandbox path) loads one, on its first call; the operations endpoint
// (sdk/ops) is not counted.
/** Where a server's and a spare's code starts (the example's entry is added). */
const SERVER_ROOTS = [
  "sdk/shim/server/serve.ts",
  "sdk/shim/spare/spare.ts",
  "sdk/shim/spare/rehearsal.ts",
];
const LAZY_SANDBOX = [
  "sdk/shim/server/sandbox_service.ts",
  "proto/gen/containerd/runtime/sandbox/v1/sandbox_pb.ts",
];
for (const example of EXAMPLES) {
  Deno.test(`${example}: the server and the spare evaluate no generated descriptor`, async () => {
    const modules = await graph(example);
    const roots = [...SERVER_ROOTS, example];
    const seen = new Set<string>();
    const todo = roots.map((m) => new URL(m, ROOT).href);
    while (todo.length > 0) {
      const spec = todo.pop()!;
      const n = name(spec);
      if (seen.has(spec) || n.startsWith("sdk/ops/") || LAZY_SANDBOX.includes(n)) continue;
      seen.add(spec);
      for (const dep of modules.get(spec)?.dependencies ?? []) {
        if (dep.code?.specifier) todo.push(dep.code.specifier);
      }
    }
    const loaded = new Set([...seen].map(name));
    assert.ok(loaded.has("sdk/shim/server/task_service.ts"), "the graph reaches the server");
    assert.ok(loaded.has("sdk/linux/cgroup_stats_v2.ts"), "the graph reaches Stats");
    assert.ok(loaded.has("proto/gen/wire/shim_wire.ts"), "the server uses the wire tables");
    assert.deepEqual([...loaded].filter((m) => GENERATED_DESCRIPTOR.test(m)), []);
  });
  // Nor, before its first call, Connect or protobuf-es's root: either brings the root's barrel,
  // which in the installed (code-split) bundle shares one chunk with the descriptor boot that the
  // lazily loaded Sandbox API needs, so the server would evaluate that boot at start
  // (docs/performance.md, "The barrel").
  Deno.test(`${example}: the server starts without Connect or protobuf-es's root`, async () => {
    const modules = await graph(example);
    const roots = [...SERVER_ROOTS, example];
    const loaded = evaluated(modules, roots.map((m) => new URL(m, ROOT).href));
    assert.ok(loaded.has("sdk/ttrpc/_server_connection.ts"), "the graph reaches the server");
    assert.deepEqual(
      [...loaded].filter((m) => /^npm:@connectrpc\/connect$|^npm:@bufbuild\/protobuf$/.test(m)),
      [],
    );
  });
}

// The server and the warm spare (with everything they load lazily on a container's path) import
// no `node:` module: the first one boots Deno's Node compatibility layer, +1.2 MiB of V8 heap in
// every shim (node:path's `dirname` alone did that). The operations endpoint (sdk/ops, loaded only
// with -debug or SKIFF_OPS=1) is not counted.
for (const example of EXAMPLES) {
  Deno.test(`${example}: the server and the spare load no node: module`, async () => {
    const modules = await graph(example);
    const roots = [
      "sdk/shim/server/serve.ts",
      "sdk/shim/spare/spare.ts",
      "sdk/shim/spare/rehearsal.ts",
    ];
    const loaded = new Set<string>();
    for (const root of roots) {
      // Lazy imports too (oom.ts, cgroups, the Sandbox API), except the ops endpoint's.
      const seen = new Set<string>();
      const todo = [new URL(root, ROOT).href, new URL(example, ROOT).href];
      while (todo.length > 0) {
        const spec = todo.pop()!;
        if (seen.has(spec) || name(spec).startsWith("sdk/ops/")) continue;
        seen.add(spec);
        for (const dep of modules.get(spec)?.dependencies ?? []) {
          if (dep.code?.specifier) todo.push(dep.code.specifier);
        }
      }
      for (const s of seen) loaded.add(name(s));
    }
    assert.ok(loaded.has("sdk/linux/process_io.ts"), "the graph reaches the server's modules");
    assert.deepEqual([...loaded].filter((m) => m.startsWith("node:")), []);
  });
}
