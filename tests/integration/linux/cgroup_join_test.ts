// shim_cgroup: which options name it (start's carriers) and how a process joins it.
import assert from "node:assert/strict";
import { create, toBinary } from "@bufbuild/protobuf";
import { AnySchema } from "@bufbuild/protobuf/wkt";
import { OptionsSchema as RuncOptionsSchema } from "../../../proto/gen/containerd/runc/v1/oci_pb.ts";
import { OptionsSchema as CriOptionsSchema } from "../../../proto/gen/runtimeoptions/v1/api_pb.ts";
import { shimCgroupOf } from "../../../sdk/shim/boot/start.ts";
import { joinCgroup } from "../../../sdk/linux/cgroup_join.ts";
import { cgroupVersion } from "../../../sdk/linux/cgroup_paths.ts";
import { integrationTest } from "../../_integration.ts";

const runc = (shimCgroup: string, typeUrl = "containerd.runc.v1.Options") =>
  create(AnySchema, {
    typeUrl,
    value: toBinary(RuncOptionsSchema, create(RuncOptionsSchema, { shimCgroup, root: "/r" })),
  });

Deno.test("shimCgroupOf() reads runc options' shim_cgroup, whatever the runtime", () => {
  assert.equal(shimCgroupOf([runc("/a")]), "/a");
  assert.equal(shimCgroupOf([runc("/a", "type.googleapis.com/containerd.runc.v1.Options")]), "/a");
  assert.equal(shimCgroupOf([runc("/a"), runc("")]), "/a", "a later carrier without it keeps it");
  assert.equal(shimCgroupOf([runc("/a"), runc("/b")]), "/b");
  const cri = create(AnySchema, {
    typeUrl: "runtimeoptions.v1.Options",
    value: toBinary(CriOptionsSchema, create(CriOptionsSchema, { configPath: "/x" })),
  });
  assert.equal(shimCgroupOf([cri]), undefined, "only runc options carry it");
  assert.equal(
    shimCgroupOf([
      create(AnySchema, { typeUrl: "containerd.runc.v1.Options", value: new Uint8Array([0xff]) }),
    ]),
    undefined,
    "undecodable options are left to Create",
  );
});

Deno.test("joinCgroup() refuses a relative path and one that exists nowhere", async () => {
  await assert.rejects(joinCgroup(1, "relative/x", 1), /"relative\/x" is not an absolute/);
  const missing = `/skiff-missing-${crypto.randomUUID()}`;
  await assert.rejects(joinCgroup(1, missing, 1), /does not exist \(cgroup v1\)/);
  await assert.rejects(joinCgroup(1, missing, 2), /does not exist \(cgroup v2\)/);
});

integrationTest(
  "joinCgroup() moves a process into the cgroup in every hierarchy where it exists",
  { root: true, binaries: ["sleep"] },
  async () => {
    const path = `/skiff-join-${crypto.randomUUID().slice(0, 8)}`;
    const v1 = cgroupVersion() === 1;
    // v1: only the pids and memory hierarchies have it, the others are left alone.
    const controllers = v1 ? ["pids", "memory"] : [""];
    const dirs = controllers.map((c) => `/sys/fs/cgroup${c ? `/${c}` : ""}${path}`);
    for (const d of dirs) await Deno.mkdir(d);
    const child = new Deno.Command("sleep", { args: ["600"] }).spawn();
    try {
      const written = await joinCgroup(child.pid, path);
      assert.deepEqual(written.sort(), dirs.map((d) => `${d}/cgroup.procs`).sort());
      const lines = (await Deno.readTextFile(`/proc/${child.pid}/cgroup`)).split("\n");
      for (const c of controllers) {
        assert.ok(lines.some((l) => l.endsWith(`:${c}:${path}`)), `${c}: ${lines}`);
      }
      if (v1) assert.ok(!lines.some((l) => l.endsWith(`:cpu:${path}`)), "cpu untouched");
    } finally {
      child.kill("SIGKILL");
      await child.status;
      for (const d of dirs) {
        // The kernel empties the cgroup once the reaped process is gone.
        for (let i = 0; i < 50; i++) {
          if (await Deno.remove(d).then(() => true, () => false)) break;
          await new Promise((r) => setTimeout(r, 20));
        }
      }
    }
  },
);
