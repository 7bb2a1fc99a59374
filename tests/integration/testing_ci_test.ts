import assert from "node:assert/strict";
import { integrationTest } from "../_integration.ts";
import { checkoutRoot } from "../../sdk/install/examples.ts";
import { skiffCacheDir } from "../../sdk/testing/containerd.ts";

const root = checkoutRoot();
const dec = new TextDecoder();

const PREPARE_SH = Deno.readTextFileSync(`${root}/tests/setup/prepare.sh`);

/** The Debian packages prepare.sh installs (its `packages` array). */
const PREPARE_PACKAGES: string[] = PREPARE_SH.match(/^packages=\(([^)]*)\)$/m)![1]!.trim()
  .split(/\s+/);

/** The containerd versions prepare.sh builds from Go modules (its `go_versions`). */
const GO_BUILT_CONTAINERDS: string[] = PREPARE_SH.match(/^go_versions=\(([^)]*)\)$/m)![1]!.trim()
  .split(/\s+/);

Deno.test(".ci/run runs exactly the README's test command", async () => {
  const ci = await Deno.readTextFile(`${root}/.ci/run`);
  const cmd = ci.match(/^readonly TEST_COMMAND='([^']+)'$/m)?.[1];
  assert.ok(cmd, ".ci/run defines TEST_COMMAND");
  assert.equal(cmd, "npm install -g deno@2.9.6 && deno task test");
  const readme = await Deno.readTextFile(`${root}/README.md`);
  const blocks = [...readme.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]!.trim());
  assert.ok(blocks.includes(cmd), `README has a sh block with exactly: ${cmd}`);
  assert.ok(blocks.some((b) => b.endsWith("deno task example")), "README shows the example");
  assert.match(ci, /^set -euo pipefail$/m);
  assert.match(ci, /^export SKIFF_REQUIRE_INTEGRATION=1$/m);
  assert.equal((await Deno.stat(`${root}/.ci/run`)).mode! & 0o111, 0o111, "executable");
  // The task the command runs must call prepare.sh before deno test.
  const tasks = JSON.parse(await Deno.readTextFile(`${root}/deno.json`)).tasks;
  assert.match(tasks.test, /^bash tests\/setup\/prepare\.sh && deno test /);
});

Deno.test("the CI scripts are valid bash", async () => {
  for (
    const f of [
      ".ci/run",
      "tests/setup/prepare.sh",
      "tests/setup/fetch_containerd.sh",
      "tests/setup/fetch_crun.sh",
      "tests/setup/registry.sh",
      "tests/setup/build_containerd.sh",
      "tests/setup/rust_shim.sh",
      "tests/setup/guest.sh",
    ]
  ) {
    const out = await new Deno.Command("bash", { args: ["-n", `${root}/${f}`], stderr: "piped" })
      .output();
    assert.equal(out.code, 0, `${f}: ${dec.decode(out.stderr)}`);
  }
});

integrationTest(
  "prepare.sh is silent when everything is installed, and its env file names each containerd",
  { root: true, binaries: ["containerd", "runc", "busybox"] },
  async () => {
    // deno task test already ran it once; a second run must have nothing to do or say.
    const out = await new Deno.Command("bash", {
      args: [`${root}/tests/setup/prepare.sh`],
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.equal(out.code, 0);
    assert.equal(dec.decode(out.stderr), "");
    assert.equal(dec.decode(out.stdout), "");
    const env = await Deno.readTextFile(`${skiffCacheDir()}/env`);
    const entries = env.split("\n").filter((l) => l.startsWith("SKIFF_CONTAINERD_"));
    assert.ok(entries.length >= 3, env);
    for (const line of entries) {
      const [key, dir] = line.split("=") as [string, string];
      const v = await new Deno.Command(`${dir}/containerd`, {
        args: ["--version"],
        stdout: "piped",
      })
        .output();
      const version = dec.decode(v.stdout).match(/\s(\d+)\.(\d+)\.\d+/);
      assert.equal(key, `SKIFF_CONTAINERD_${version?.[1]}_${version?.[2]}`, line);
    }
  },
);

integrationTest(
  "prepare.sh reports missing packages without root and carries on",
  { root: true, binaries: ["setpriv"] },
  async () => {
    const home = await Deno.makeTempDir({ prefix: "skiff-prepare-" });
    try {
      // A dpkg-query that knows no package makes every package look missing; a no-op deno
      // keeps the run off the network. The containerd cache dirs exist, and a `go` that fails
      // stands in front of the real one, so nothing is fetched or built (without them this run,
      // as nobody with an empty Go cache, compiled three containerds and critest: minutes).
      await Deno.mkdir(`${home}/fakebin`);
      await Deno.writeTextFile(`${home}/fakebin/dpkg-query`, "#!/bin/sh\nexit 1\n");
      await Deno.writeTextFile(`${home}/fakebin/deno`, "#!/bin/sh\nexit 0\n");
      await Deno.writeTextFile(`${home}/fakebin/go`, "#!/bin/sh\nexit 1\n");
      const cached = [
        ...["trixie", "sid"].map((s) => `containerd-${s}/usr/bin/containerd`),
        ...GO_BUILT_CONTAINERDS.map((v) => `containerd-v${v}/bin/containerd`),
      ];
      for (const path of cached) {
        await Deno.mkdir(`${home}/cache/${path.slice(0, path.lastIndexOf("/"))}`, {
          recursive: true,
        });
        await Deno.symlink("/usr/bin/containerd", `${home}/cache/${path}`);
      }
      for (
        const d of ["", "/fakebin", "/fakebin/dpkg-query", "/fakebin/deno", "/fakebin/go", "/cache"]
      ) {
        await Deno.chmod(`${home}${d}`, 0o777);
      }
      const out = await new Deno.Command("setpriv", {
        args: [
          "--reuid=65534",
          "--regid=65534",
          "--clear-groups",
          "env",
          `HOME=${home}`,
          `SKIFF_CACHE=${home}/cache`,
          `PATH=${home}/fakebin:/usr/bin:/bin`,
          "bash",
          `${root}/tests/setup/prepare.sh`,
        ],
        stdout: "piped",
        stderr: "piped",
      }).output();
      const err = dec.decode(out.stderr);
      assert.equal(out.code, 0, err);
      // Every package prepare.sh lists, in its order, in the report and in the command.
      const all = PREPARE_PACKAGES.join(" ");
      assert.ok(PREPARE_PACKAGES.includes("containerd") && PREPARE_PACKAGES.includes("criu"));
      assert.ok(
        err.split("\n").includes(
          `prepare: missing packages: ${all} (not root; as root on Debian run: ` +
            `apt-get install --no-install-recommends ${all})`,
        ),
        err,
      );
      // Every dir holds 1.6 here, so one key is written and the first dir wins.
      const env = await Deno.readTextFile(`${home}/cache/env`);
      assert.deepEqual(env.split("\n").filter((l) => l.startsWith("SKIFF_")), [
        "SKIFF_CONTAINERD_1_6=/usr/bin",
      ]);
      assert.match(err, /wrote .*\/cache\/env: 1 containerd build/);
    } finally {
      await Deno.remove(home, { recursive: true });
    }
  },
);

Deno.test(".ci/run adds up the unit tier's summary and the rest's, not a test's own output", async () => {
  const ci = await Deno.readTextFile(`${root}/.ci/run`);
  const unitDone = ci.match(/^readonly UNIT_DONE='([^']+)'$/m)?.[1];
  assert.ok(unitDone, ".ci/run defines UNIT_DONE");
  const tasks = JSON.parse(await Deno.readTextFile(`${root}/deno.json`)).tasks;
  assert.ok(tasks.test.includes(`echo '${unitDone}'`), "deno task test echoes UNIT_DONE");
  const summaryPart = ci.slice(ci.indexOf("summaries=$("));
  const dir = await Deno.makeTempDir();
  try {
    const log = [
      "ok | 700 passed | 0 failed (41s)",
      unitDone,
      "------- post-test output -------",
      "ok | 17 passed | 0 failed (6m27s)", // the QEMU guest's own deno test
      "----- post-test output end -----",
      "ok | 225 passed (272 steps) | 0 failed (29m18s)",
    ].join("\n");
    await Deno.writeTextFile(`${dir}/log`, log);
    const script = `set -euo pipefail\nUNIT_DONE='${unitDone}'\nlog=${dir}/log\nstatus=0\n` +
      `start=$SECONDS\n${summaryPart}`;
    const out = await new Deno.Command("bash", { args: ["-c", script], stdout: "piped" }).output();
    assert.equal(out.code, 0, "no ignored tests is 0 ignored, not a failure");
    assert.match(dec.decode(out.stdout), /^tests: 925 passed, 0 failed, 0 skipped \(2 runs/m);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
