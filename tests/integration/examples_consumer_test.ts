/**
 * The examples as a runtime author's project would hold them: each example folder is copied into
 * a new project outside the checkout whose import map names only the package's declared exports
 * (deno.json `exports`), resolved into a copy of the files `deno publish --dry-run` lists, with
 * the package's own bare specifiers unfurled as JSR does when it publishes. The project adds the
 * npm packages an author adds (Connect, protobuf-es) and nothing else, then type-checks. An
 * example that reaches into the repository (`../../sdk/...`), or imports a name the package
 * does not export, fails here.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { authorImports, ROOT, writePublishedPackage } from "../_published.ts";
import { integrationTest } from "../_integration.ts";
import { containerdVersions, startContainerd } from "../../sdk/testing/containerd.ts";
import { ctrRun } from "../../sdk/testing/ctr.ts";
import { vmUnavailable } from "../../examples/vm/image.ts";
import { killVmsAfter, VM_CALL_MS, VM_LAUNCHER, VM_RUNTIME, vmEnv, vmFinish } from "../_vm.ts";

const EXAMPLES = ["runc", "crun", "runsc", "vm"];
const NS = "skiff-consumer";

/** Copies `from` (a folder) into `to`, recursively. */
async function copyTree(from: string, to: string): Promise<void> {
  await Deno.mkdir(to, { recursive: true });
  for await (const e of Deno.readDir(from)) {
    if (e.isDirectory) await copyTree(join(from, e.name), join(to, e.name));
    else await Deno.copyFile(join(from, e.name), join(to, e.name));
  }
}

/**
 * A folder outside the checkout with the package as JSR would serve it (`jsr/skiff/`) and one
 * project per example (`<name>/`), whose deno.json maps only the declared exports to it.
 */
async function consumerProjects(): Promise<string> {
  const tmp = await Deno.makeTempDir({ prefix: "skiff-consumer-" });
  await writePublishedPackage(`${tmp}/jsr/skiff`);
  const imports = authorImports("../jsr/skiff");
  for (const name of EXAMPLES) {
    const project = `${tmp}/${name}`;
    await copyTree(`${ROOT}/examples/${name}`, project);
    await Deno.writeTextFile(`${project}/deno.json`, JSON.stringify({ imports }, null, 2));
  }
  return tmp;
}

Deno.test("every example builds in a project of its own, from the package as published and its declared exports only", async () => {
  const tmp = await consumerProjects();
  try {
    for (const name of EXAMPLES) {
      const project = `${tmp}/${name}`;
      const out = await new Deno.Command(Deno.execPath(), {
        args: ["check", "--quiet", "--no-lock", "--config", `${project}/deno.json`, project],
        cwd: project,
        env: { NO_COLOR: "1" },
      }).output();
      assert.ok(
        out.success,
        `examples/${name} does not build outside the checkout:\n${
          new TextDecoder().decode(out.stderr)
        }`,
      );
    }
  } finally {
    await Deno.remove(tmp, { recursive: true });
  }
});

/** Installs `examples/<name>`, copied into `tmp/<name>`, with the published installer. */
async function installCopied(tmp: string, name: string, launcher: string): Promise<string> {
  const prefix = `${tmp}/usr`;
  const install = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      "--no-lock",
      "--config",
      `${tmp}/${name}/deno.json`,
      `${tmp}/jsr/skiff/sdk/install/mod.ts`,
      "--prefix",
      prefix,
      `${launcher}=main.ts`,
    ],
    cwd: `${tmp}/${name}`,
    env: { NO_COLOR: "1" },
  }).output();
  assert.equal(install.code, 0, new TextDecoder().decode(install.stderr));
  const text = await Deno.readTextFile(`${prefix}/bin/${launcher}`);
  // The launcher runs the bundle installed under the prefix, not the checkout.
  assert.ok(text.includes(`${prefix}/lib/skiff/`) && !text.includes(ROOT + "/"), text);
  return `${prefix}/bin`;
}

/** crun 1.8 refuses every container on a v1/v2 hybrid hierarchy with v2 controllers. */
function crunRefusesHybridCgroups(): boolean {
  try {
    return Deno.readTextFileSync("/sys/fs/cgroup/unified/cgroup.controllers").trim() !== "";
  } catch {
    return false;
  }
}

const v16 = containerdVersions().find((v) => v.version.startsWith("1.6."));
const v24 = containerdVersions().find((v) => v.version.startsWith("2.4."));

integrationTest(
  "runc, runsc and crun examples, copied out and installed by the published installer, run containers under containerd 1.6 and 2.4",
  {
    root: true,
    binaries: ["runc", "runsc", "crun", "/bin/busybox"],
    check: () => v16 && v24 ? undefined : "containerd 1.6 and 2.4",
  },
  async () => {
    const tmp = await consumerProjects();
    try {
      const bin = await installCopied(tmp, "runc", "containerd-shim-skiff-runc-v2");
      await installCopied(tmp, "runsc", "containerd-shim-skiff-runsc-v2");
      await installCopied(tmp, "crun", "containerd-shim-skiff-crun-v2");
      for (const v of [v16!, v24!]) {
        const c = await startContainerd({ binDir: v.binDir, extraPath: [bin] });
        try {
          const image = await c.importBusyboxImage(NS);
          for (const runtime of ["runc", "runsc", "crun"]) {
            // Bookworm's crun runs nothing on this host's hybrid cgroups, nor 2.x's specs.
            if (runtime === "crun" && (v !== v16 || crunRefusesHybridCgroups())) continue;
            const r = await ctrRun(c, {
              image,
              id: `copied-${runtime}`,
              namespace: NS,
              runtime: `io.containerd.skiff-${runtime}.v2`,
              args: ["sh", "-c", `echo from-a-copied-${runtime}; exit 3`],
            });
            assert.equal(r.code, 3, `${v.version} ${runtime}: ${r.stderr}`);
            assert.match(r.stdout, new RegExp(`from-a-copied-${runtime}`));
          }
          if (v === v16) {
            // crun: the shim ran it and relays its own words, whatever this host lets it do.
            const r = await ctrRun(c, {
              image,
              id: "copied-crun-any",
              namespace: NS,
              runtime: "io.containerd.skiff-crun.v2",
              args: ["sh", "-c", "exit 0"],
            });
            if (crunRefusesHybridCgroups()) assert.match(r.stderr + r.stdout, /crun create/);
            else assert.equal(r.code, 0, r.stderr);
          }
        } finally {
          await c.stop();
        }
      }
    } finally {
      await Deno.remove(tmp, { recursive: true });
    }
  },
);

integrationTest(
  "the VM example, copied out: its image built by its own image.ts, installed by the published installer, runs a container in a VM under containerd 2.4",
  {
    root: true,
    binaries: ["runc", "/bin/busybox", "qemu-system-x86_64"],
    check: () => vmUnavailable() ?? (v24 ? undefined : "containerd 2.4"),
  },
  async () => {
    const tmp = await consumerProjects();
    let c: Awaited<ReturnType<typeof startContainerd>> | undefined;
    try {
      // What the guide tells an author: build the boot image from the project, then install.
      const image = await new Deno.Command(Deno.execPath(), {
        args: ["run", "-A", "--no-lock", "--config", `${tmp}/vm/deno.json`, "image.ts"],
        cwd: `${tmp}/vm`,
        env: { NO_COLOR: "1" },
      }).output();
      assert.equal(image.code, 0, new TextDecoder().decode(image.stderr));
      const bin = await installCopied(tmp, "vm", VM_LAUNCHER);
      c = await startContainerd({ binDir: v24!.binDir, extraPath: [bin], env: vmEnv() });
      const ref = await c.importBusyboxImage(NS);
      using _ = killVmsAfter("copied VM example");
      const r = await ctrRun(c, {
        image: ref,
        id: "copied-vm",
        namespace: NS,
        runtime: VM_RUNTIME,
        cgroup: "",
        args: ["sh", "-c", "echo from-a-copied-vm; exit 7"],
        timeoutMs: VM_CALL_MS,
      });
      assert.equal(r.code, 7, r.stderr);
      assert.match(r.stdout, /from-a-copied-vm/);
    } finally {
      await c?.stop();
      assert.deepEqual(await vmFinish(), [], "nothing of the VM is left");
      await Deno.remove(tmp, { recursive: true });
    }
  },
);

Deno.test("the consumer check fails an example that reaches into the repository", async () => {
  // The check above must be able to fail: a project with a repository path in it does not build.
  const tmp = await Deno.makeTempDir({ prefix: "skiff-consumer-neg-" });
  try {
    await Deno.writeTextFile(`${tmp}/deno.json`, JSON.stringify({ imports: {} }));
    await Deno.writeTextFile(
      `${tmp}/main.ts`,
      'import { Reaper } from "../../sdk/linux/reaper.ts";\nconsole.log(Reaper);\n',
    );
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["check", "--quiet", "--no-lock", "--config", `${tmp}/deno.json`, tmp],
      cwd: tmp,
    }).output();
    assert.equal(out.success, false);
  } finally {
    await Deno.remove(tmp, { recursive: true });
  }
});
