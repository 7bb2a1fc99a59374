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
import { authorImports, ROOT, writePublishedPackage } from "./_published.ts";
import { integrationTest } from "./_integration.ts";
import { containerdVersions, startContainerd } from "../sdk/testing/containerd.ts";
import { ctrRun } from "../sdk/testing/ctr.ts";

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

for (const v of containerdVersions().filter((v) => /^(1\.6|2\.4)\./.test(v.version))) {
  integrationTest(
    `containerd ${v.version}: the runc example, copied out and installed by the published installer, runs a container`,
    { root: true, binaries: ["runc", "/bin/busybox"] },
    async () => {
      const tmp = await consumerProjects();
      let c: Awaited<ReturnType<typeof startContainerd>> | undefined;
      try {
        // What the package's docs tell an author to run, from their project.
        const prefix = `${tmp}/usr`;
        const install = await new Deno.Command(Deno.execPath(), {
          args: [
            "run",
            "-A",
            "--no-lock",
            "--config",
            `${tmp}/runc/deno.json`,
            `${tmp}/jsr/skiff/sdk/install/mod.ts`,
            "--prefix",
            prefix,
            "containerd-shim-skiff-runc-v2=main.ts",
          ],
          cwd: `${tmp}/runc`,
          env: { NO_COLOR: "1" },
        }).output();
        const said = new TextDecoder().decode(install.stdout);
        assert.equal(install.code, 0, new TextDecoder().decode(install.stderr));
        assert.match(said, /runtime io\.containerd\.skiff-runc\.v2/);
        c = await startContainerd({ binDir: v.binDir, extraPath: [`${prefix}/bin`] });
        const image = await c.importBusyboxImage(NS);
        const r = await ctrRun(c, {
          image,
          id: "copied",
          namespace: NS,
          runtime: "io.containerd.skiff-runc.v2",
          args: ["sh", "-c", "echo from-a-copied-example; exit 3"],
        });
        assert.equal(r.code, 3, r.stderr);
        assert.match(r.stdout, /from-a-copied-example/);
        // The launcher ran the bundle installed under the prefix, not the checkout.
        const launcher = await Deno.readTextFile(`${prefix}/bin/containerd-shim-skiff-runc-v2`);
        assert.ok(launcher.includes(`${prefix}/lib/skiff/`), launcher);
        assert.ok(!launcher.includes(ROOT + "/"), launcher);
      } finally {
        await c?.stop();
        await Deno.remove(tmp, { recursive: true });
      }
    },
  );
}

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
