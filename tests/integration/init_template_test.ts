/**
 * The project template (`@skiff/shim/init`, `deno task init`): written by the package as JSR
 * would serve it, into a folder outside the checkout, for both kinds (`OciShim`, and `Shim` with
 * a runtime of its own); each project passes its own test (`deno task test`), installs with its
 * own task, and runs a container under containerd. Bad input (a name containerd cannot run, a
 * directory that holds files) is refused with nothing written.
 */
import assert from "node:assert/strict";
import { initProject } from "../../sdk/init/mod.ts";
import { integrationTest } from "../_integration.ts";
import { writePublishedPackage } from "../_published.ts";
import { containerdVersions, startContainerd } from "../../sdk/testing/containerd.ts";
import { ctrRun } from "../../sdk/testing/ctr.ts";

const dec = new TextDecoder();
const SKIFF = { jsr: "jsr:@skiff/shim@^0.1.0" };

Deno.test("initProject refuses a name containerd cannot run and a directory with files in it, writing nothing", async () => {
  const tmp = await Deno.makeTempDir({ prefix: "skiff-init-" });
  try {
    await assert.rejects(
      initProject({ dir: `${tmp}/My_Runtime`, skiff: SKIFF }),
      /"My_Runtime": a runtime's name is lower-case letters, digits and dashes/,
    );
    await Deno.mkdir(`${tmp}/taken`);
    await Deno.writeTextFile(`${tmp}/taken/main.ts`, "// mine\n");
    await assert.rejects(initProject({ dir: `${tmp}/taken`, skiff: SKIFF }), /is not empty/);
    assert.equal(await Deno.readTextFile(`${tmp}/taken/main.ts`), "// mine\n");
    assert.deepEqual([...Deno.readDirSync(tmp)].map((e) => e.name), ["taken"]);
    const written = await initProject({ dir: `${tmp}/fresh`, skiff: SKIFF });
    assert.deepEqual(written.map((p) => p.slice(tmp.length + 7)).sort(), [
      "README.md",
      "conformance.ts",
      "deno.json",
      "main.ts",
      "main_test.ts",
    ]);
    const config = JSON.parse(await Deno.readTextFile(`${tmp}/fresh/deno.json`));
    assert.equal(config.imports["@skiff/shim"], "jsr:@skiff/shim@^0.1.0");
    assert.equal(
      config.tasks.install,
      "deno run -A jsr:@skiff/shim@^0.1.0/install containerd-shim-fresh-v1=main.ts",
    );
  } finally {
    await Deno.remove(tmp, { recursive: true });
  }
});

const v16 = containerdVersions().find((v) => v.version.startsWith("1.6."));
integrationTest(
  "a project from the template passes its own test, installs with its task and runs under containerd (OciShim and Shim)",
  {
    root: true,
    binaries: ["runc", "/bin/busybox", "mkfifo"],
    check: () => v16 ? undefined : "containerd 1.6",
  },
  async () => {
    const tmp = await Deno.makeTempDir({ prefix: "skiff-init-" });
    const pkg = `${tmp}/jsr/skiff`;
    await writePublishedPackage(pkg);
    const c = await startContainerd({ binDir: v16!.binDir, extraPath: [`${tmp}/usr/bin`] });
    try {
      const image = await c.importBusyboxImage("skiff-init");
      for (const [name, kind] of [["ocirt", "oci"], ["chrootrt", "custom"]]) {
        const project = `${tmp}/${name}`;
        const run = (cmd: string[], cwd: string) =>
          new Deno.Command(cmd[0]!, { args: cmd.slice(1), cwd, env: { NO_COLOR: "1" } }).output();
        // The published init, as `deno run -A jsr:@skiff/shim/init` runs it.
        const init = await run(
          [
            Deno.execPath(),
            "run",
            "-A",
            `${pkg}/sdk/init/mod.ts`,
            "--kind",
            kind,
            "--from",
            pkg,
            project,
          ],
          tmp,
        );
        assert.equal(init.code, 0, dec.decode(init.stderr));
        const test = await run([Deno.execPath(), "task", "test"], project);
        const said = dec.decode(test.stdout) + dec.decode(test.stderr);
        assert.equal(test.code, 0, said);
        assert.match(said, /ok \| 1 passed \| 0 failed/, "the template's test ran (not ignored)");
        const install = await run(
          [Deno.execPath(), "task", "install", "--prefix", `${tmp}/usr`],
          project,
        );
        assert.equal(install.code, 0, dec.decode(install.stderr));
        const r = await ctrRun(c, {
          image,
          id: name,
          namespace: "skiff-init",
          runtime: `io.containerd.${name}.v1`,
          args: ["sh", "-c", `echo hello from ${name}; exit 4`],
        });
        assert.equal(r.code, 4, `${kind}: ${r.stderr}`);
        assert.match(r.stdout, new RegExp(`hello from ${name}`));
      }
    } finally {
      await c.stop();
      await Deno.remove(tmp, { recursive: true });
    }
  },
);
