/**
 * The files of a new runtime project, as `@skiff/shim/init` writes them: a shim on `OciShim` (a
 * runc-compatible CLI) or on `Shim` with a runtime of its own, its deno.json with install, test
 * and conformance tasks, a test on the testing kit, and a conformance script.
 *
 * @module
 */

/** Where the project gets skiff from. */
export type SkiffSource =
  /** A JSR specifier, e.g. `jsr:@skiff/shim@^0.1.0`. */
  | { jsr: string }
  /** A directory holding the package (its deno.json names the exports), relative or absolute. */
  | { dir: string; exports: Record<string, string> };

/** What {@linkcode projectFiles} writes a project for. */
export interface TemplateOptions {
  /** The runtime's name: `io.containerd.<name>.v1`, binary `containerd-shim-<name>-v1`. */
  name: string;
  /** `oci`: a runc-compatible CLI through `OciShim`; `custom`: `Shim` with its own runtime. */
  kind: "oci" | "custom";
  /** Where skiff comes from. */
  skiff: SkiffSource;
}

/**
 * The project's files, path → text.
 *
 * @param o the runtime's name and kind, and where skiff comes from
 * @example Usage
 * ```ts
 * import { ok } from "node:assert/strict";
 * import { projectFiles } from "@skiff/shim/init";
 * const files = projectFiles({
 *   name: "mine",
 *   kind: "oci",
 *   skiff: { jsr: "jsr:@skiff/shim@^0.1.0" },
 * });
 * ok(files["main.ts"].includes('"io.containerd.mine.v1"'));
 * ```
 */
export function projectFiles(o: TemplateOptions): Record<string, string> {
  const launcher = `containerd-shim-${o.name}-v1`;
  const imports: Record<string, string> = {};
  let installer: string;
  if ("jsr" in o.skiff) {
    imports["@skiff/shim"] = o.skiff.jsr;
    installer = `${o.skiff.jsr}/install`;
  } else {
    for (const [key, path] of Object.entries(o.skiff.exports)) {
      imports[key === "." ? "@skiff/shim" : `@skiff/shim${key.slice(1)}`] = `${o.skiff.dir}/${
        path.replace(/^\.\//, "")
      }`;
    }
    installer = imports["@skiff/shim/install"];
  }
  const config = {
    imports,
    tasks: {
      install: `deno run -A ${installer} ${launcher}=main.ts`,
      test: "deno test -A",
      conformance: "deno run -A conformance.ts",
    },
  };
  return {
    "deno.json": JSON.stringify(config, null, 2) + "\n",
    "main.ts": o.kind === "oci" ? ociMain(o.name) : customMain(o.name),
    "main_test.ts": mainTest(o.name),
    "conformance.ts": conformance(o.name),
    "README.md": readme(o.name, o.kind),
  };
}

/** `my-runtime` → `MyRuntime`. */
function className(name: string): string {
  return name.split(/[^A-Za-z0-9]+/).filter(Boolean).map((w) => w[0]!.toUpperCase() + w.slice(1))
    .join("");
}

function ociMain(name: string): string {
  const cls = `${className(name)}Shim`;
  return `/**
 * containerd-shim-${name}-v1: a containerd shim for a runc-compatible runtime CLI, written with
 * skiff. containerd runs it for the runtime \`io.containerd.${name}.v1\`.
 */
import { OciShim, type OciShimOptions, optionsMessage, RUNC_OPTIONS_CODEC, runShim } from "@skiff/shim";

/** The shim: the runtime's binary and state root, from containerd's runc options or CRI's TOML. */
export class ${cls} extends OciShim<OciShimOptions> {
  readonly runtimeName = "io.containerd.${name}.v1";
  override readonly version = "0.1.0";
  readonly options = {
    defaults: (): OciShimOptions => ({ binaryName: "runc", root: "/run/containerd/${name}" }),
    messages: [optionsMessage(RUNC_OPTIONS_CODEC, (m, base: OciShimOptions) => ({
      binaryName: m.binaryName || base.binaryName,
      root: m.root || base.root,
      systemdCgroup: m.systemdCgroup,
    }))],
    fromToml: (t: Record<string, unknown>, base: OciShimOptions): OciShimOptions => ({
      binaryName: String(t.BinaryName ?? base.binaryName),
      root: String(t.Root ?? base.root),
      systemdCgroup: t.SystemdCgroup === true,
    }),
  };
}

if (import.meta.main) await runShim(new ${cls}());
`;
}

// long: the text of the main.ts it writes, one screen of a shim, kept whole to be read as one
function customMain(name: string): string {
  const cls = `${className(name)}Shim`;
  const opts = `${className(name)}Options`;
  return `/**
 * containerd-shim-${name}-v1: a containerd shim for a runtime of its own, written with skiff.
 * containerd runs it for the runtime \`io.containerd.${name}.v1\`. This runtime runs a container's
 * process with chroot(1) into its rootfs and isolates nothing else: it shows the seam (a process
 * the runtime spawns itself and reports by pid; what it cannot do answers Unimplemented). Put
 * your runtime in its place.
 */
import {
  Code,
  type ContainerRuntime,
  type RuntimeContext,
  runShim,
  Shim,
  statusError,
} from "@skiff/shim";
import { kill } from "@skiff/shim/linux";

/** The options this runtime takes. */
export interface ${opts} {
  /** chroot(1). */
  chroot: string;
}

/** One container's runtime. */
function chrootRuntime(ctx: RuntimeContext<${opts}>): ContainerRuntime {
  const gate = \`\${ctx.bundle}/start.fifo\`;
  let child: Deno.ChildProcess | undefined;
  const unsupported = (what: string) => () =>
    Promise.reject(statusError(\`\${what} is not supported by ${name}\`, Code.Unimplemented));
  return {
    async create(_id, o) {
      const spec = JSON.parse(await Deno.readTextFile(\`\${ctx.bundle}/config.json\`));
      const root = String(spec.root?.path ?? "rootfs");
      const rootfs = root.startsWith("/") ? root : \`\${ctx.bundle}/\${root}\`;
      const made = await new Deno.Command("mkfifo", { args: ["-m", "600", gate] }).output();
      if (!made.success) throw new Error(\`mkfifo \${gate} failed\`);
      // Waits on the FIFO until start, then becomes the container's process (same pid). The
      // shim takes its exit from ctx.spawn's child: nothing else to report.
      child = ctx.spawn(
        new Deno.Command("sh", {
          args: [
            "-c",
            'read _ < "$0" && exec "$@"',
            gate,
            "/usr/bin/env",
            "-i",
            ...(spec.process?.env ?? []),
            ctx.options.chroot,
            rootfs,
            ...(spec.process?.args ?? []),
          ],
          cwd: ctx.bundle,
          ...o.io.stdio,
        }),
      );
      o.io.attach(child);
      return { pid: child.pid };
    },
    async start() {
      await Deno.writeTextFile(gate, "start\\n");
    },
    kill(_id, signal) {
      try {
        if (child) kill(child.pid, signal);
        return Promise.resolve();
      } catch {
        return Promise.reject(statusError("process already finished", Code.NotFound));
      }
    },
    async delete() {
      await Deno.remove(gate).catch(() => {});
    },
    ps: () => Promise.resolve(child ? [child.pid] : []),
    exec: unsupported("exec"),
    pause: unsupported("pause"),
    resume: unsupported("resume"),
    update: unsupported("update"),
    checkpoint: unsupported("checkpoint"),
    stats: unsupported("stats"),
    watchOom: () => Promise.resolve({ close() {} }),
  };
}

/** The shim. */
export class ${cls} extends Shim<${opts}> {
  readonly runtimeName = "io.containerd.${name}.v1";
  override readonly version = "0.1.0";
  readonly options = {
    defaults: (): ${opts} => ({ chroot: "/usr/sbin/chroot" }),
    // CRI's runtime options (TOML, \`options\` of the runtime handler in containerd's config).
    fromToml: (t: Record<string, unknown>, base: ${opts}): ${opts} => ({
      chroot: String(t.Chroot ?? base.chroot),
    }),
  };
  runtime(ctx: RuntimeContext<${opts}>): ContainerRuntime {
    return chrootRuntime(ctx);
  }
}

if (import.meta.main) await runShim(new ${cls}());
`;
}

function mainTest(name: string): string {
  return `/**
 * The shim, installed as containerd would run it, driven by skiff's harness (which plays
 * containerd): a busybox container's output and exit status. Needs root, runc and busybox-static.
 */
import assert from "node:assert/strict";
import { installShims } from "@skiff/shim/install";
import { createBusyboxBundle, ShimHarness } from "@skiff/shim/testing";

Deno.test({
  name: "${name}: a container's output and exit status, through the shim",
  ignore: Deno.uid() !== 0,
  async fn() {
    const prefix = await Deno.makeTempDir({ prefix: "${name}-test-" });
    const [shim] = await installShims({
      prefix,
      root: import.meta.dirname!,
      shims: { "containerd-shim-${name}-v1": "main.ts" },
    });
    const { bundle, cleanup } = await createBusyboxBundle({
      args: ["sh", "-c", "echo hello from ${name}; exit 3"],
    });
    const out = \`\${bundle}/out.log\`;
    const h = await ShimHarness.start({ shim, bundle, id: "t1" });
    try {
      await h.task.create({ id: h.id, bundle, stdout: \`file://\${out}\`, stderr: \`file://\${out}\` });
      await h.task.start({ id: h.id });
      const { exitStatus } = await h.task.wait({ id: h.id });
      await h.task.delete({ id: h.id });
      assert.equal(exitStatus, 3);
      assert.equal(await Deno.readTextFile(out), "hello from ${name}\\n");
    } finally {
      await h.close();
      await cleanup();
      await Deno.remove(prefix, { recursive: true });
    }
  },
});
`;
}

function conformance(name: string): string {
  return `/**
 * \`deno task conformance\`: skiff's conformance catalogue against this shim under every
 * containerd found on this machine (PATH, and SKIFF_CONTAINERD_* builds), as a markdown matrix.
 * Arguments: scenario ids to run (a substring or RegExp), e.g. \`deno task conformance run\`.
 */
import { installShims } from "@skiff/shim/install";
import { markdownReport, runConformance } from "@skiff/shim/testing";

const prefix = await Deno.makeTempDir({ prefix: "${name}-conformance-" });
try {
  await installShims({
    prefix,
    root: import.meta.dirname!,
    shims: { "containerd-shim-${name}-v1": "main.ts" },
  });
  const report = await runConformance({
    runtime: "io.containerd.${name}.v1",
    shimDir: \`\${prefix}/bin\`,
    ...(Deno.args[0] ? { only: Deno.args[0] } : {}),
    onResult: (r) => console.error(\`\${r.status} \${r.containerd} \${r.scenario} \${r.reason ?? ""}\`),
  });
  console.log(markdownReport(report));
  if (report.results.some((r) => r.status === "fail")) Deno.exitCode = 1;
} finally {
  await Deno.remove(prefix, { recursive: true });
}
`;
}

function readme(name: string, kind: "oci" | "custom"): string {
  return `# ${name}

A containerd shim written with [skiff](https://jsr.io/@skiff/shim): containerd runs
\`containerd-shim-${name}-v1\` for the runtime \`io.containerd.${name}.v1\`. ${
    kind === "oci"
      ? "It drives a runc-compatible runtime CLI through skiff's `OciShim`."
      : "It implements skiff's `ContainerRuntime` seam itself (`main.ts`)."
  }

\`\`\`sh
deno task test                               # the shim under skiff's harness (root, runc, busybox)
deno task install --prefix /usr/local        # /usr/local/bin/containerd-shim-${name}-v1
deno task conformance                        # skiff's conformance catalogue, as a matrix
ctr run --rm --runtime io.containerd.${name}.v1 docker.io/library/busybox:latest t1 echo hello
\`\`\`
`;
}
