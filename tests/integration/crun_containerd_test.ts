// The skiff crun example shim (`containerd-shim-skiff-crun-v2`) under real containerd, through
// ctr. On a host where crun can run containers (a pure cgroup v2 or v1 hierarchy) it runs one:
// output and exit code. On this project's CI host (the v1/v2 hybrid hierarchy with controllers
// in the unified part), crun 1.8 refuses every container; the test then proves the whole path
// up to crun: containerd starts the shim, the shim's create runs crun with the runc shim's
// command line (the TOML options' Root reached it), and crun's own error comes back to ctr.
// containerd 1.6 only: bookworm's crun 1.8 also refuses the specs containerd 2.1+ generates.
import assert from "node:assert/strict";
import { integrationTest } from "../_integration.ts";
import { containerdVersions, startContainerd } from "../../sdk/testing/containerd.ts";
import { ctrRun } from "../../sdk/testing/ctr.ts";
import { installExampleShims } from "../../sdk/install/examples.ts";

const CRUN = "io.containerd.skiff-crun.v2";
const LAUNCHER = "containerd-shim-skiff-crun-v2";
const NS = "skiff-crun";

/** crun 1.8 refuses to create containers when the v1/v2 hybrid hierarchy has v2 controllers. */
function crunRefusesHybridCgroups(): boolean {
  try {
    return Deno.readTextFileSync("/sys/fs/cgroup/unified/cgroup.controllers").trim() !== "";
  } catch {
    return false;
  }
}

for (const v of containerdVersions().filter((v) => v.version.startsWith("1.6."))) {
  integrationTest(
    `containerd ${v.version}: skiff crun shim runs a container, or returns crun's cgroup error`,
    { root: true, binaries: ["crun", "/bin/busybox"] },
    async () => {
      const prefix = await Deno.makeTempDir({ prefix: "skiff-crun-" });
      const [launcher] = await installExampleShims({
        prefix,
        shims: { [LAUNCHER]: "examples/crun/main.ts" },
      });
      const c = await startContainerd({
        binDir: v.binDir,
        extraPath: [launcher.slice(0, launcher.lastIndexOf("/"))],
      });
      // crun's state goes under the test's prefix: the TOML options reach `--root`.
      const root = `${prefix}/crun-root`;
      const config = `${prefix}/crun.toml`;
      await Deno.writeTextFile(config, `Root = "${root}"\n`);
      try {
        const image = await c.importBusyboxImage(NS);
        const r = await ctrRun(c, {
          image,
          id: "once",
          namespace: NS,
          runtime: CRUN,
          runtimeConfigPath: config,
          args: ["sh", "-c", "echo hello-crun; exit 3"],
        });
        if (crunRefusesHybridCgroups()) {
          assert.notEqual(r.code, 0, r.stdout);
          // crun's own words, relayed from its log by the shim's create.
          assert.match(
            `${r.stdout}\n${r.stderr}`,
            /crun create "once" failed .*cgroups in hybrid mode/,
          );
          // The shim ran crun with `--root <Root>/<namespace>`.
          assert.ok((await Deno.stat(`${root}/${NS}`)).isDirectory, `${root}/${NS}`);
        } else {
          assert.equal(r.code, 3, r.stderr);
          assert.match(r.stdout, /hello-crun/);
        }
        // Nothing of the container is left in containerd, whichever way it went.
        const tasks = await c.ctr(["task", "ls", "-q"], { namespace: NS });
        assert.doesNotMatch(tasks.stdout, /\bonce\b/);
      } finally {
        await c.stop();
        await Deno.remove(prefix, { recursive: true });
      }
    },
  );
}
