import assert from "node:assert/strict";
import { integrationTest } from "../../_integration.ts";
import {
  buildBusyboxRootfs,
  busyboxApplets,
  createBusyboxBundle,
  createOciSpec,
  findBusybox,
  mountsUnder,
  removeTree,
} from "../../../sdk/testing/bundle.ts";

const dec = new TextDecoder();

async function runc(root: string, bundle: string, id: string) {
  const out = await new Deno.Command("runc", {
    args: ["--root", root, "run", "--bundle", bundle, id],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

function uniqueId(tag: string): string {
  return `skiff-bundle-${tag}-${Deno.pid}-${crypto.randomUUID().slice(0, 8)}`;
}

Deno.test("createOciSpec() sets PATH, the default mounts and the requested resources", () => {
  const spec = createOciSpec({
    args: ["sh"],
    env: ["A=1"],
    memoryLimit: 1 << 26,
    annotations: { "x.y": "z" },
    terminal: true,
  });
  assert.equal(spec.process.env[0]?.startsWith("PATH=/"), true);
  assert.ok(spec.process.env.includes("A=1"));
  assert.ok(spec.process.env.includes("TERM=xterm"));
  assert.deepEqual(
    spec.mounts.map((m) => m.destination).slice(0, 6),
    ["/proc", "/dev", "/dev/pts", "/dev/shm", "/dev/mqueue", "/sys"],
  );
  assert.deepEqual(spec.linux.namespaces.map((n) => n.type), [
    "pid",
    "ipc",
    "uts",
    "mount",
    "network",
  ]);
  assert.equal(spec.linux.resources.memory?.limit, 1 << 26);
  assert.deepEqual(spec.annotations, { "x.y": "z" });
  assert.equal(spec.root.path, "rootfs");
  assert.equal(spec.root.readonly, false);
  // A caller-supplied PATH wins over the default.
  assert.deepEqual(createOciSpec({ args: ["sh"], env: ["PATH=/bin"] }).process.env, ["PATH=/bin"]);
});

integrationTest(
  "buildBusyboxRootfs() links every applet to /bin/busybox",
  { binaries: ["busybox"] },
  async () => {
    const dir = await Deno.makeTempDir({ prefix: "skiff-rootfs-" });
    try {
      await buildBusyboxRootfs(dir);
      const applets = await busyboxApplets(findBusybox()!);
      for (const a of ["sh", "echo", "cat", "sleep", "ls", "ps", "stty", "true", "false", "env"]) {
        assert.ok(applets.includes(a), `busybox lacks ${a}`);
      }
      for (const a of applets) {
        assert.equal(await Deno.readLink(`${dir}/bin/${a}`), "busybox", a);
      }
      assert.equal(
        (await Deno.stat(`${dir}/bin/busybox`)).size,
        (await Deno.stat(findBusybox()!)).size,
      );
      assert.match(await Deno.readTextFile(`${dir}/etc/passwd`), /^root:x:0:0:/);
      assert.equal((await Deno.stat(`${dir}/tmp`)).mode! & 0o7777, 0o1777);
      // Building twice over the same dir is fine (links are replaced).
      await buildBusyboxRootfs(dir);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
);

integrationTest(
  "createBusyboxBundle() runs under runc: output, exit code, mounts and memory limit",
  { root: true, binaries: ["runc", "busybox"] },
  async () => {
    const root = await Deno.makeTempDir({ prefix: "skiff-runc-root-" });
    const bundles: { cleanup(): Promise<void> }[] = [];
    try {
      const hello = await createBusyboxBundle({ args: ["echo", "hello"] });
      bundles.push(hello);
      const r1 = await runc(root, hello.bundle, uniqueId("hello"));
      assert.equal(r1.stderr, "");
      assert.equal(r1.stdout, "hello\n");
      assert.equal(r1.code, 0);

      const exit3 = await createBusyboxBundle({ args: ["sh", "-c", "exit 3"] });
      bundles.push(exit3);
      const r2 = await runc(root, exit3.bundle, uniqueId("exit3"));
      assert.equal(r2.code, 3, r2.stderr);

      const probe = await createBusyboxBundle({
        args: [
          "sh",
          "-c",
          [
            "for d in /dev/pts /dev/shm /dev/mqueue /proc/self /sys/kernel; do test -d $d || echo missing $d; done",
            "echo pid1=$$",
            "echo host=$(hostname)",
            "echo env=$GREETING",
            "echo mem=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || echo v2)",
            "echo nofile=$(ulimit -n)",
            "touch /proc/sys/kernel/hostname 2>/dev/null && echo procsys-writable",
            "true",
          ].join("; "),
        ],
        env: ["GREETING=hi"],
        hostname: "probe",
        memoryLimit: 64 * 1024 * 1024,
        annotations: { "org.skiff.test": "1" },
      });
      bundles.push(probe);
      const written = JSON.parse(await Deno.readTextFile(`${probe.bundle}/config.json`));
      assert.deepEqual(written.annotations, { "org.skiff.test": "1" });
      const r3 = await runc(root, probe.bundle, uniqueId("probe"));
      assert.equal(r3.code, 0, r3.stderr);
      const lines = r3.stdout.trim().split("\n");
      assert.deepEqual(lines.filter((l) => l.startsWith("missing")), []);
      assert.ok(lines.includes("pid1=1"), r3.stdout);
      assert.ok(lines.includes("host=probe"), r3.stdout);
      assert.ok(lines.includes("env=hi"), r3.stdout);
      assert.ok(lines.includes("nofile=1024"), r3.stdout);
      assert.ok(!lines.includes("procsys-writable"), r3.stdout);
      const mem = lines.find((l) => l.startsWith("mem="));
      // cgroup v1 shows the container's own memory cgroup; v2 has no such file.
      if (mem !== "mem=v2") assert.equal(mem, `mem=${64 * 1024 * 1024}`);
    } finally {
      for (const b of bundles) await b.cleanup();
      await Deno.remove(root, { recursive: true });
    }
    for (const b of bundles) {
      const bundle = (b as { bundle?: string }).bundle!;
      await assert.rejects(Deno.stat(bundle), Deno.errors.NotFound);
    }
  },
);

integrationTest(
  "removeTree() unmounts what is mounted below the dir before deleting it",
  { root: true, binaries: ["mount", "umount"] },
  async () => {
    const dir = await Deno.makeTempDir({ prefix: "skiff-rmtree-" });
    const outside = await Deno.makeTempDir({ prefix: "skiff-rmtree-src-" });
    try {
      await Deno.writeTextFile(`${outside}/keep`, "precious");
      await Deno.mkdir(`${dir}/a/b`, { recursive: true });
      const m = await new Deno.Command("mount", { args: ["--bind", outside, `${dir}/a/b`] })
        .output();
      assert.equal(m.code, 0);
      assert.deepEqual(await mountsUnder(dir), [`${dir}/a/b`]);
      await removeTree(dir);
      await assert.rejects(Deno.stat(dir), Deno.errors.NotFound);
      // The bind source survived: the mount was removed, not traversed.
      assert.equal(await Deno.readTextFile(`${outside}/keep`), "precious");
    } finally {
      await removeTree(dir);
      await Deno.remove(outside, { recursive: true });
    }
  },
);
