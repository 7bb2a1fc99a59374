import assert from "node:assert/strict";
import { parse as parseToml } from "smol-toml";
import { integrationTest } from "../../_integration.ts";
import {
  containerdVersions,
  PrivateContainerd,
  startContainerd,
  sweepStaleContainerds,
} from "../../../sdk/testing/containerd.ts";
import { ctrRun, ctrRunArgs, RUNC_RUNTIME } from "../../../sdk/testing/ctr.ts";
import { BUSYBOX_IMAGE_REF } from "../../../sdk/testing/image.ts";

/** The parts of the generated config.toml the test reads. */
interface Config {
  version: number;
  root: string;
  state: string;
  grpc: { address: string };
  ttrpc: { address: string };
  disabled_plugins: string[];
  plugins: Record<string, Record<string, unknown>>;
}

const NEEDS = { root: true, binaries: ["runc", "busybox", "script", "mount", "umount"] };

function uid(tag: string): string {
  return `${tag}-${crypto.randomUUID().slice(0, 8)}`;
}

function processGone(pid: number): boolean {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    return stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z");
  } catch {
    return true;
  }
}

const versions = containerdVersions();

integrationTest(
  "containerdVersions() finds containerd 1.6, 1.7, 2.1, 2.2, 2.3 and 2.4",
  {
    check() {
      const have = versions.map((v) => v.version);
      const want = [/^1\.6\./, /^1\.7\./, /^2\.1\./, /^2\.2\./, /^2\.3\./, /^2\.4\./];
      const lacking = want.filter((re) => !have.some((h) => re.test(h)));
      return lacking.length > 0
        ? `containerd ${lacking.map((r) => r.source.slice(1, -2).replace("\\", "")).join(", ")} ` +
          `(found ${have.join(", ") || "none"}; run tests/setup/prepare.sh as root)`
        : undefined;
    },
  },
  () => {
    const sorted = [...versions].sort((a, b) =>
      a.version.localeCompare(b.version, "en", { numeric: true })
    );
    assert.deepEqual(versions, sorted);
    for (const v of versions) {
      assert.match(v.version, /^\d+\.\d+\.\d+$/);
      assert.ok(Deno.statSync(`${v.binDir}/containerd-shim-runc-v2`).isFile);
      assert.ok(Deno.statSync(`${v.binDir}/ctr`).isFile);
    }
    return Promise.resolve();
  },
);

Deno.test("ctrRunArgs() isolates runc root, FIFOs and cgroups per containerd", () => {
  const c = new PrivateContainerd({
    dir: "/tmp/skiff-ctrd-x",
    version: "1.6.20",
    binDir: "/usr/bin",
    snapshotter: "native",
    runtimes: { skiff: { runtimeType: "io.containerd.skiff-runc.v2" } },
    env: {},
  });
  const runc = ctrRunArgs(c, { image: "img", id: "a", args: ["echo", "hi"] });
  assert.deepEqual(runc, [
    "run",
    "--fifo-dir",
    "/tmp/skiff-ctrd-x/fifo",
    "--runtime",
    RUNC_RUNTIME,
    "--runc-root",
    "/tmp/skiff-ctrd-x/runc",
    "--cgroup",
    "/skiff-skiff-ctrd-x/skiff-test/a",
    "--rm",
    "img",
    "a",
    "echo",
    "hi",
  ]);
  const skiff = ctrRunArgs(c, { image: "img", id: "b", runtime: "skiff", detach: true, tty: true });
  assert.ok(skiff.includes("io.containerd.skiff-runc.v2"));
  assert.ok(!skiff.includes("--runc-root"), "runc flags only for the Go runc shim");
  assert.ok(!skiff.includes("--rm"));
  assert.ok(skiff.includes("-d") && skiff.includes("-t"));
});

for (const v of versions) {
  integrationTest(
    `startContainerd() ${v.version}: Go runc shim runs busybox, restart keeps it, stop cleans up`,
    NEEDS,
    async (t) => {
      const fake = await Deno.makeTempDir({ prefix: "skiff-fake-shim-" });
      const calls = `${fake}/calls`;
      await Deno.writeTextFile(
        `${fake}/containerd-shim-skifftest-v1`,
        `#!/bin/sh\necho "argv=$* ttrpc=$TTRPC_ADDRESS cwd=$(pwd)" >> ${calls}\n` +
          `echo "fake shim refuses" >&2\nexit 1\n`,
      );
      await Deno.chmod(`${fake}/containerd-shim-skifftest-v1`, 0o755);
      const c = await startContainerd({
        binDir: v.binDir,
        extraPath: [fake],
        configToml: '[plugins."io.containerd.gc.v1.scheduler"]\nstartup_delay = "99ms"\n',
      });
      const ns = uid("skiff-test");
      let initPid = 0;
      let shimPids: number[] = [];
      try {
        await t.step("config: own dirs and sockets, merged configToml", async () => {
          assert.equal(c.version, v.version);
          assert.ok(c.address.startsWith(`${c.dir}/`) && c.ttrpcAddress.startsWith(`${c.dir}/`));
          const cfg = parseToml(await Deno.readTextFile(c.configPath)) as unknown as Config;
          assert.equal(cfg.version, c.major >= 2 ? 3 : 2);
          assert.equal(cfg.root, c.root);
          assert.equal(cfg.state, c.state);
          assert.equal(cfg.grpc.address, c.address);
          assert.equal(cfg.ttrpc.address, c.ttrpcAddress);
          assert.ok(cfg.disabled_plugins.includes("io.containerd.grpc.v1.cri"));
          assert.equal(cfg.plugins["io.containerd.gc.v1.scheduler"].startup_delay, "99ms");
          const server = await c.ctr(["version"]);
          assert.equal(server.code, 0, server.stderr);
          assert.match(
            server.stdout,
            new RegExp(`Server:[\\s\\S]*${v.version.replaceAll(".", "\\.")}`),
          );
        });

        await t.step("importBusyboxImage() names and unpacks the image", async () => {
          assert.equal(await c.importBusyboxImage(ns), BUSYBOX_IMAGE_REF);
          const ls = await c.ctr(["images", "ls", "-q"], { namespace: ns });
          assert.deepEqual(ls.stdout.trim().split("\n"), [BUSYBOX_IMAGE_REF]);
          const snaps = await c.ctr(["snapshots", "--snapshotter", c.snapshotter, "ls"], {
            namespace: ns,
          });
          assert.match(snaps.stdout, /sha256:[0-9a-f]{64}/, "the layer was unpacked");
        });

        await t.step("ctr run --rm echo hello prints hello", async () => {
          const r = await ctrRun(c, {
            namespace: ns,
            image: BUSYBOX_IMAGE_REF,
            id: uid("hello"),
            args: ["echo", "hello"],
          });
          assert.equal(r.stdout, "hello\n", r.stderr);
          assert.equal(r.code, 0);
        });

        await t.step("the exit status of sh -c 'exit 3' is ctr's exit code", async () => {
          const r = await ctrRun(c, {
            namespace: ns,
            image: BUSYBOX_IMAGE_REF,
            id: uid("exit3"),
            args: ["sh", "-c", "exit 3"],
          });
          assert.equal(r.code, 3, r.stderr);
        });

        await t.step("tty: the container sees a terminal", async () => {
          const r = await ctrRun(c, {
            namespace: ns,
            image: BUSYBOX_IMAGE_REF,
            id: uid("tty"),
            tty: true,
            args: ["sh", "-c", "test -t 0 && test -t 1 && echo is-a-tty; exit 5"],
          });
          assert.match(r.stdout, /is-a-tty\r/);
          assert.equal(r.code, 5);
        });

        await t.step("shims resolve from extraPath with containerd's flags and env", async () => {
          const r = await ctrRun(c, {
            namespace: ns,
            image: BUSYBOX_IMAGE_REF,
            id: uid("fake"),
            runtime: "io.containerd.skifftest.v1",
            args: ["true"],
          });
          assert.notEqual(r.code, 0);
          const log = await Deno.readTextFile(calls);
          const start = log.split("\n").find((l) => / start /.test(`${l} `));
          assert.ok(start, log);
          assert.ok(start.includes(`-namespace ${ns} `), start);
          assert.ok(start.includes(`-address ${c.address} `), start);
          assert.ok(start.includes(`ttrpc=${c.ttrpcAddress} `), start);
          assert.ok(start.includes(`cwd=${c.state}/io.containerd.runtime.v2.task/${ns}/`), start);
        });

        await t.step(
          "restart() (SIGTERM, then SIGKILL) keeps a running container and its shim",
          async () => {
            const id = uid("sleeper");
            const r = await ctrRun(c, {
              namespace: ns,
              image: BUSYBOX_IMAGE_REF,
              id,
              detach: true,
              args: ["sleep", "1000"],
            });
            assert.equal(r.code, 0, r.stderr);
            const before = await c.ctr(["tasks", "ls"], { namespace: ns });
            const row = before.stdout.split("\n").find((l) => l.startsWith(`${id} `));
            assert.match(row ?? "", /RUNNING/);
            initPid = Number(row!.split(/\s+/)[1]);
            assert.ok(initPid > 0);
            // The Go shims of the `ctr run --rm`s above exit on the Shutdown after Delete, which
            // containerd does not wait for: under load one may still be on its way out. Bounded.
            for (let i = 0; i < 600 && c.shims().length > 1; i++) {
              await new Promise((r) => setTimeout(r, 100));
            }
            shimPids = c.shims().map((s) => s.pid);
            assert.equal(shimPids.length, 1, "one shim for the detached container");
            const oldPid = c.pid;
            await c.restart();
            assert.notEqual(c.pid, oldPid);
            const after = await c.ctr(["tasks", "ls"], { namespace: ns });
            assert.match(after.stdout, new RegExp(`^${id}\\s+${initPid}\\s+RUNNING`, "m"));
            assert.ok(!processGone(initPid));
            // A crash (SIGKILL) instead of a clean shutdown: the shim still reconnects.
            await c.restart({ signal: "SIGKILL" });
            const again = await c.ctr(["tasks", "ls"], { namespace: ns });
            assert.match(again.stdout, new RegExp(`^${id}\\s+${initPid}\\s+RUNNING`, "m"));
            assert.deepEqual(c.shims().map((s) => s.pid), shimPids);
          },
        );
      } finally {
        await c.stop();
        await Deno.remove(fake, { recursive: true });
      }
      // What stop() must guarantee: no shim, no container process, no mount, no dir.
      assert.deepEqual(c.shims(), []);
      for (const p of [initPid, ...shimPids]) assert.ok(processGone(p), `pid ${p} survived stop()`);
      assert.deepEqual(await c.mounts(), []);
      await assert.rejects(Deno.stat(c.dir), Deno.errors.NotFound);
      for (const ctl of ["memory", "pids", "unified", ""]) {
        await assert.rejects(
          Deno.stat(`/sys/fs/cgroup/${ctl}/${c.cgroupParent}`),
          Deno.errors.NotFound,
        );
      }
      assert.match(await c.logs(), /containerd successfully booted/);
    },
  );

  integrationTest(
    `startContainerd() ${v.version}: the native snapshotter works too`,
    NEEDS,
    async () => {
      const c = await startContainerd({ binDir: v.binDir, snapshotter: "native" });
      try {
        const ns = uid("skiff-native");
        const ref = await c.importBusyboxImage(ns);
        const snaps = await c.ctr(["snapshots", "--snapshotter", "native", "ls"], {
          namespace: ns,
        });
        assert.match(snaps.stdout, /sha256:/, snaps.stderr);
        const r = await ctrRun(c, {
          namespace: ns,
          image: ref,
          id: uid("n"),
          args: ["cat", "/etc/group"],
        });
        if (r.code !== 0 || !r.stdout.startsWith("root:x:0:")) {
          const log = (await c.logs()).split("\n").slice(-40).join("\n");
          assert.fail(`ctr run gave ${JSON.stringify(r)}; containerd log tail:\n${log}`);
        }
      } finally {
        await c.stop();
      }
      await assert.rejects(Deno.stat(c.dir), Deno.errors.NotFound);
    },
  );
}

if (versions.length > 0) {
  integrationTest(
    "sweepStaleContainerds() tears down the containerd of a test process that died",
    NEEDS,
    async () => {
      const v = versions[0]!;
      const mod = new URL("../../../sdk/testing/containerd.ts", import.meta.url).href;
      const ctrMod = new URL("../../../sdk/testing/ctr.ts", import.meta.url).href;
      // A test process that starts a containerd and a container, then exits without stop().
      const script = `
        import { startContainerd } from "${mod}";
        import { ctrRun } from "${ctrMod}";
        const c = await startContainerd({ binDir: ${JSON.stringify(v.binDir)} });
        const ref = await c.importBusyboxImage("skiff-stale");
        const r = await ctrRun(c, { namespace: "skiff-stale", image: ref, id: "stale-${
        crypto.randomUUID().slice(0, 8)
      }", detach: true, args: ["sleep", "1000"] });
        if (r.code !== 0) throw new Error(r.stderr);
        console.log(JSON.stringify({ dir: c.dir, address: c.address, pids: c.shims().map((s) => s.pid) }));
        Deno.exit(0);
      `;
      const out = await new Deno.Command(Deno.execPath(), {
        args: ["eval", "--no-check", script],
        stdout: "piped",
        stderr: "piped",
      }).output();
      assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
      const left = JSON.parse(new TextDecoder().decode(out.stdout)) as {
        dir: string;
        address: string;
        pids: number[];
      };
      const probe = new PrivateContainerd({
        dir: left.dir,
        version: v.version,
        binDir: v.binDir,
        snapshotter: "",
        runtimes: {},
        env: {},
      });
      assert.equal(probe.shims().length, 1, "the dead test left its shim running");
      const swept = await sweepStaleContainerds();
      assert.ok(swept.includes(left.dir), `swept ${swept.join(", ")}`);
      assert.deepEqual(probe.shims(), []);
      for (const p of left.pids) assert.ok(processGone(p), `shim ${p} survived`);
      await assert.rejects(Deno.stat(left.dir), Deno.errors.NotFound);
      // Live instances are never swept.
      const live = await startContainerd({ binDir: v.binDir });
      try {
        assert.ok(!(await sweepStaleContainerds()).includes(live.dir));
        assert.equal((await live.ctr(["version"])).code, 0);
      } finally {
        await live.stop();
      }
    },
  );
}
