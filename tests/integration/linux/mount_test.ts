import assert from "node:assert/strict";
import { integrationTest } from "../../_integration.ts";
import { mountAll, parseMountOptions, unmountAll } from "../../../sdk/linux/mount.ts";

async function isMounted(path: string): Promise<boolean> {
  const real = await Deno.realPath(path);
  const info = await Deno.readTextFile("/proc/self/mountinfo");
  return info.split("\n").some((line) => line.split(" ")[4] === real);
}

function overlaySupported(): string | undefined {
  const fs = Deno.readTextFileSync("/proc/filesystems");
  return /\boverlay\b/.test(fs) ? undefined : "overlay in /proc/filesystems";
}

Deno.test("parseMountOptions() separates flags, propagation and data", () => {
  assert.deepEqual(parseMountOptions(["ro", "rw", "nosuid", "defaults"]), {
    flags: 0x2,
    propagation: 0,
    data: "",
  });
  assert.deepEqual(parseMountOptions(["lowerdir=/a:/b", "upperdir=/u", "workdir=/w"]), {
    flags: 0,
    propagation: 0,
    data: "lowerdir=/a:/b,upperdir=/u,workdir=/w",
  });
  assert.throws(() => parseMountOptions(["loop"]), /"loop" is not supported/);
});

Deno.test("mountAll() rejects a target that escapes the rootfs", async () => {
  await assert.rejects(
    mountAll(
      [{ type: "bind", source: "/tmp", target: "../../etc", options: ["rbind"] }],
      "/x/rootfs",
    ),
    /mount target "..\/..\/etc" escapes rootfs "\/x\/rootfs"/,
  );
});

integrationTest(
  "mountAll() bind-mounts read-only and unmountAll() undoes it",
  { root: true },
  async () => {
    const dir = await Deno.makeTempDir({ prefix: "skiff-mount-test-" });
    const rootfs = `${dir}/bundle/rootfs`;
    try {
      await Deno.mkdir(`${dir}/src/sub`, { recursive: true });
      await Deno.writeTextFile(`${dir}/src/hello`, "hi");
      await mountAll([{ type: "bind", source: `${dir}/src`, options: ["rbind", "ro"] }], rootfs);
      // A nested mount below, which unmountAll must take down first.
      await mountAll([{ type: "tmpfs", source: "tmpfs", options: ["size=1m"] }], `${rootfs}/sub`);
      assert.equal(await Deno.readTextFile(`${rootfs}/hello`), "hi");
      await assert.rejects(Deno.writeTextFile(`${rootfs}/new`, "x"), /Read-only file system/);
      await unmountAll(rootfs);
      assert.equal(await isMounted(rootfs), false);
      assert.equal(await isMounted(`${dir}/src/sub`), false);
      await assert.rejects(Deno.stat(`${rootfs}/hello`), Deno.errors.NotFound);
      await unmountAll(rootfs); // not mounted any more: tolerated
      await unmountAll(`${dir}/does/not/exist`);
    } finally {
      await unmountAll(rootfs);
      await Deno.remove(dir, { recursive: true });
    }
  },
);

integrationTest(
  "mountAll() mounts overlay with lowerdir/upperdir/workdir as data",
  { root: true, check: overlaySupported },
  async () => {
    const dir = await Deno.makeTempDir({ prefix: "skiff-mount-test-" });
    const rootfs = `${dir}/rootfs`;
    try {
      for (const d of ["lower", "upper", "work"]) await Deno.mkdir(`${dir}/${d}`);
      await Deno.writeTextFile(`${dir}/lower/base`, "from lower");
      await mountAll([{
        type: "overlay",
        source: "overlay",
        options: [`lowerdir=${dir}/lower`, `upperdir=${dir}/upper`, `workdir=${dir}/work`],
      }], rootfs);
      assert.equal(await Deno.readTextFile(`${rootfs}/base`), "from lower");
      await Deno.writeTextFile(`${rootfs}/added`, "new");
      assert.equal(await Deno.readTextFile(`${dir}/upper/added`), "new");
      await unmountAll(rootfs);
      assert.equal(await isMounted(rootfs), false);
    } finally {
      await unmountAll(rootfs);
      await Deno.remove(dir, { recursive: true });
    }
  },
);

integrationTest(
  "mountAll() unmounts what it mounted when a later mount fails, naming that mount",
  { root: true },
  async () => {
    const dir = await Deno.makeTempDir({ prefix: "skiff-mount-test-" });
    const rootfs = `${dir}/rootfs`;
    try {
      await Deno.mkdir(`${dir}/src`);
      await assert.rejects(
        mountAll([
          { type: "bind", source: `${dir}/src`, options: ["rbind"] },
          { type: "bind", source: `${dir}/missing`, options: ["rbind"] },
        ], rootfs),
        new RegExp(
          `mount bind "${dir}/missing" on "${rootfs}" \\(options "rbind"\\): No such file`,
        ),
      );
      assert.equal(await isMounted(rootfs), false);
    } finally {
      await unmountAll(rootfs);
      await Deno.remove(dir, { recursive: true });
    }
  },
);
