import assert from "node:assert/strict";
import { fromBinary } from "@bufbuild/protobuf";
import { integrationTest } from "../../_integration.ts";
import { CgroupNotFoundError, cgroupStats, cgroupVersion } from "../../../sdk/linux/cgroups.ts";
import { cgroupV2MetricsAt } from "../../../sdk/linux/cgroup_stats_v2.ts";
import { MetricsSchema as V1MetricsSchema } from "../../../proto/gen/io/containerd/cgroups/v1/metrics_pb.ts";
import { MetricsSchema as V2MetricsSchema } from "../../../proto/gen/io/containerd/cgroups/v2/metrics_pb.ts";
import { busyboxBundle, run } from "../../_linux_support.ts";

Deno.test("cgroupV2MetricsAt() reads the v2 files into io.containerd.cgroups.v2.Metrics", async () => {
  const dir = await Deno.makeTempDir({ prefix: "skiff-cgroup-test-" });
  try {
    const files: Record<string, string> = {
      "pids.current": "3\n",
      "pids.max": "max\n",
      "cpu.stat": "usage_usec 100\nuser_usec 60\nsystem_usec 40\nnr_periods 5\nnr_throttled 1\n" +
        "throttled_usec 7\nnr_bursts 0\nburst_usec 0\n",
      "cpu.pressure": "some avg10=1.50 avg60=0.00 avg300=0.00 total=42\n" +
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
      "memory.current": "4096\n",
      "memory.max": "8388608\n",
      "memory.stat": "anon 1000\nfile 2000\nkernel_stack 16384\npgfault 9\nunknown_key 5\n",
      "memory.events": "low 0\nhigh 0\nmax 2\noom 1\noom_kill 1\noom_group_kill 0\n",
      "io.stat": "8:0 rbytes=10 wbytes=20 rios=1 wios=2 dbytes=0 dios=0\n",
    };
    for (const [name, text] of Object.entries(files)) {
      await Deno.writeTextFile(`${dir}/${name}`, text);
    }
    const m = cgroupV2MetricsAt(dir);
    assert.equal(m.pids?.current, 3n);
    assert.equal(m.pids?.limit, 0xffff_ffff_ffff_ffffn);
    assert.equal(m.cpu?.usageUsec, 100n);
    assert.equal(m.cpu?.throttledUsec, 7n);
    assert.equal(m.cpu?.psi?.some?.avg10, 1.5);
    assert.equal(m.cpu?.psi?.some?.total, 42n);
    assert.equal(m.memory?.usage, 4096n);
    assert.equal(m.memory?.usageLimit, 8388608n);
    assert.equal(m.memory?.anon, 1000n);
    assert.equal(m.memory?.kernelStack, 16384n);
    assert.equal(m.memory?.swapUsage, 0n); // no swap files
    assert.equal(m.memoryEvents?.oomKill, 1n);
    assert.equal(m.memoryEvents?.max, 2n);
    assert.deepEqual(
      m.io?.usage.map((e) => [e.major, e.minor, e.rbytes, e.wbytes, e.rios, e.wios]),
      [[8n, 0n, 10n, 20n, 1n, 2n]],
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("cgroupStats() rejects with CgroupNotFoundError for a process that is gone", async () => {
  const child = new Deno.Command("true").spawn();
  await child.status;
  const err = await cgroupStats(child.pid).then(() => undefined, (e) => e);
  assert.ok(err instanceof CgroupNotFoundError, String(err));
  assert.match(err.message, new RegExp(`cgroup of pid ${child.pid} not found`));
});

integrationTest(
  "cgroupStats() reports a runc container's cgroup with a bare type URL",
  { root: true, binaries: ["runc", "/bin/busybox"] },
  async () => {
    const bundle = await busyboxBundle({ args: ["sleep", "1000"] });
    try {
      const pidFile = `${bundle.dir}/init.pid`;
      await run(
        bundle.runc(["create", "--bundle", bundle.dir, "--pid-file", pidFile, bundle.id], {
          // The container inherits these: a piped stream would never reach EOF.
          stdin: "null",
          stdout: "null",
          stderr: "null",
        }),
        "runc create",
      );
      await run(bundle.runc(["start", bundle.id], { stderr: "piped" }), "runc start");
      const pid = Number(await Deno.readTextFile(pidFile));
      const any = await cgroupStats(pid);
      if (cgroupVersion() === 1) {
        assert.equal(any.typeUrl, "io.containerd.cgroups.v1.Metrics");
        const m = fromBinary(V1MetricsSchema, any.value);
        assert.ok((m.memory?.usage?.usage ?? 0n) > 0n, "memory usage > 0");
        assert.ok((m.memory?.usage?.limit ?? 0n) > 0n, "memory limit set");
        assert.ok((m.pids?.current ?? 0n) >= 1n, "pids.current >= 1");
        assert.ok((m.cpu?.usage?.total ?? 0n) > 0n, "cpu usage > 0");
        assert.ok((m.cpu?.usage?.perCpu.length ?? 0) >= 1, "per-cpu usage");
      } else {
        assert.equal(any.typeUrl, "io.containerd.cgroups.v2.Metrics");
        const m = fromBinary(V2MetricsSchema, any.value);
        assert.ok((m.memory?.usage ?? 0n) > 0n, "memory usage > 0");
        assert.ok((m.pids?.current ?? 0n) >= 1n, "pids.current >= 1");
      }
      await run(bundle.runc(["delete", "--force", bundle.id], { stderr: "piped" }), "runc delete");
      await assert.rejects(cgroupStats(pid), CgroupNotFoundError);
    } finally {
      await bundle.cleanup();
    }
  },
);
