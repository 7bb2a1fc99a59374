/**
 * The warm spare's cgroup behaviour, one function per check, run by
 * tests/integration/spare_containerd_test.ts on the host (cgroup v1 hybrid) and by
 * tests/guest/spare_cgroup_checks.ts in the cgroup v2 guest:
 *
 * - {@linkcode spareSameAsCold}: an adopted spare is indistinguishable from a cold server
 *   (working directory, cgroups, also after containerd moved to another cgroup, OOM score,
 *   priority and autogroup, the environment containerd gave, `-debug` log lines);
 * - {@linkcode spareShimCgroup}: runc options' `shim_cgroup` moves an adopted spare there.
 *
 * @module
 */
import assert from "node:assert/strict";
import { makeCgroup, procsOf } from "./_cgroups.ts";
import { containerdClient } from "../sdk/testing/containerd_client.ts";
import { createBusyboxBundle, createOciSpec } from "../sdk/testing/bundle.ts";
import {
  autogroupNice,
  enc,
  envLogger,
  eventually,
  type Kit,
  ok,
  parseEnv,
  readProc,
  runcOptions,
  RUNTIME,
  serverOf,
  servingOrigin,
  SPEC_TYPE,
  uid,
  waitingSpare,
} from "./_spare.ts";

/** an adopted spare is indistinguishable from a cold server. */
export async function spareSameAsCold(k: Kit): Promise<void> {
  const marker = uid("marker");
  const c = await k.containerd({ debug: true, env: { SKIFF_SPARE_TEST_MARKER: marker } });
  const envDir = `${c.dir}/envs`;
  await Deno.mkdir(envDir);
  const logUri = `binary://${await envLogger(envDir)}`;
  const cold = { ns: "cold-ns", id: uid("cold") };
  const warm = { ns: "warm-ns", id: uid("warm") };
  const containerdPid = c.pid!;
  await ok(
    k.run(c, { ...cold, namespace: cold.ns, detach: true, logUri, args: ["sleep", "600"] }),
    "cold run",
  );
  const coldPid = await serverOf(c, cold.ns, cold.id);
  assert.equal(await servingOrigin(c, cold.id), "cold");
  const coldCgroup = readProc(coldPid, "cgroup");
  assert.equal(coldCgroup, readProc(containerdPid, "cgroup"), "cold: containerd's cgroups");
  const spare = await waitingSpare(c);
  assert.equal(readProc(spare, "cgroup"), coldCgroup, "the spare starts there too");
  // A spare loads and waits at the lowest priority where it can be raised back (root).
  const nices = (pid: number) =>
    [...Deno.readDirSync(`/proc/${pid}/task`)].map((t) => {
      const st = Deno.readTextFileSync(`/proc/${pid}/task/${t.name}/stat`);
      return Number(st.slice(st.lastIndexOf(")") + 2).split(" ")[16]);
    });
  assert.ok(nices(spare).every((n) => n === 19), `waiting spare: ${nices(spare)}`);
  // Its own session is its own autogroup, which weighs against the container's as a
  // whole: that is lowered too, or the loading spare slows runc down (sched_autogroup).
  const autogroup = autogroupNice;
  const autogroups = autogroup(spare) !== undefined;
  if (autogroups) assert.equal(autogroup(spare), 19, "the waiting spare's autogroup");

  // containerd moves to another cgroup while the spare waits (in the old one): a
  // server spawned now would be in the new one, so the adopted spare must move too.
  const moved = `/${c.cgroupParent}/containerd-moved`;
  for (const d of await makeCgroup(moved)) {
    await Deno.writeTextFile(`${d}/cgroup.procs`, String(containerdPid));
  }
  const containerdCgroup = readProc(containerdPid, "cgroup");
  assert.notEqual(containerdCgroup, coldCgroup, "containerd moved");

  await ok(
    k.run(c, { ...warm, namespace: warm.ns, detach: true, logUri, args: ["sleep", "600"] }),
    "warm run",
  );
  const warmPid = await serverOf(c, warm.ns, warm.id);
  assert.equal(warmPid, spare, "adopted");
  assert.equal(await servingOrigin(c, warm.id), "spare", "its log line reached containerd");

  // Working directory: a server leaves the bundle for "/" once it has opened the bundle's
  // log FIFO (serve.ts), so both are at "/"; that the adopted one started from its bundle
  // is shown by its log line above, which only the bundle's `log` FIFO carries.
  assert.equal(Deno.readLinkSync(`/proc/${coldPid}/cwd`), "/");
  assert.equal(Deno.readLinkSync(`/proc/${warmPid}/cwd`), "/");
  // cgroups: containerd's at the time of start.
  assert.equal(readProc(warmPid, "cgroup"), containerdCgroup, "adopted: containerd's");
  // OOM score: one above containerd's.
  const want = Math.min(1000, Number(readProc(containerdPid, "oom_score_adj")) + 1);
  assert.equal(Number(readProc(coldPid, "oom_score_adj")), want, "cold oom_score_adj");
  assert.equal(Number(readProc(warmPid, "oom_score_adj")), want, "adopted oom_score_adj");
  // Priority: containerd's, on every thread, as a cold server inherits it.
  const containerdNice = nices(containerdPid)[0];
  assert.ok(nices(coldPid).every((n) => n === containerdNice), `cold: ${nices(coldPid)}`);
  assert.ok(
    nices(warmPid).every((n) => n === containerdNice),
    `adopted: ${nices(warmPid)}`,
  );
  // A cold server's new session starts a new autogroup at 0; an adopted spare's is raised
  // back to that.
  if (autogroups) {
    assert.equal(autogroup(coldPid), 0, "cold: a new autogroup");
    assert.equal(autogroup(warmPid), 0, "adopted: its autogroup raised back");
  }

  // Environment: what each server hands its children (the binary logger).
  const envOf = (id: string) =>
    eventually(`the env dump of ${id}`, () => {
      try {
        return parseEnv(Deno.readTextFileSync(`${envDir}/${id}.env`));
      } catch {
        return undefined;
      }
    });
  const coldEnv = await envOf(cold.id);
  const warmEnv = await envOf(warm.id);
  assert.equal(coldEnv.get("SKIFF_SPARE_TEST_MARKER"), marker, "containerd's env (cold)");
  assert.equal(warmEnv.get("SKIFF_SPARE_TEST_MARKER"), marker, "containerd's env (spare)");
  if (c.major >= 2) {
    // 2.x names the namespace (the spare was spawned by a start in cold.ns).
    assert.equal(coldEnv.get("NAMESPACE"), cold.ns);
    assert.equal(warmEnv.get("NAMESPACE"), warm.ns, "start's NAMESPACE, not the spawner's");
    assert.equal(warmEnv.get("GRPC_ADDRESS"), c.address);
  } else {
    // 1.6 adds only GOMAXPROCS and TTRPC_ADDRESS to its own environment.
    assert.equal(warmEnv.get("GOMAXPROCS"), "2");
  }
  assert.equal(warmEnv.get("TTRPC_ADDRESS"), c.ttrpcAddress);
  assert.equal(warmEnv.get("CONTAINER_ID"), warm.id);
  const comparable = (e: Map<string, string>) =>
    Object.fromEntries(
      [...e].filter(([key]) => !["NAMESPACE", "CONTAINER_ID", "CONTAINER_NAMESPACE"].includes(key))
        .sort(([a], [b]) => a < b ? -1 : 1),
    );
  assert.deepEqual(comparable(warmEnv), comparable(coldEnv), "same environment");

  // -debug: both servers log debug lines (a task's exit) to containerd's log.
  for (const s of [cold, warm]) {
    await ok(c.ctr(["tasks", "kill", "-s", "KILL", s.id], { namespace: s.ns }), "kill");
  }
  for (const s of [cold, warm]) {
    await eventually(
      `a debug line of ${s.id}'s server`,
      async () =>
        (await c.logs()).split("\n").some((l) =>
            /level=debug/.test(l) && l.includes("process exited") && l.includes(s.id)
          )
          ? true
          : undefined,
    );
  }
  await c.stop();
}

/** runc options' shim_cgroup is honoured by an adopted spare. */
export async function spareShimCgroup(k: Kit): Promise<void> {
  const c = await k.containerd();
  const ns = "shimcg";
  const cl = containerdClient(c.address, ns);
  const rootfs = await createBusyboxBundle({ args: ["true"] });
  try {
    // A first run, so that a spare waits.
    await ok(k.run(c, { id: uid("prime"), namespace: ns, args: ["true"] }), "prime");
    const spare = await waitingSpare(c);
    const path = `/${c.cgroupParent}/shim-spare`;
    const dirs = await makeCgroup(path);
    const id = uid("shimcg");
    const spec = createOciSpec({ args: ["sh", "-c", "exit 0"] });
    (spec as { root: unknown }).root = { path: `${rootfs.bundle}/rootfs`, readonly: false };
    await cl.containers.create({
      container: {
        id,
        runtime: {
          name: RUNTIME,
          options: runcOptions({ root: c.runcRoot, shimCgroup: path }),
        },
        spec: { typeUrl: SPEC_TYPE, value: enc.encode(JSON.stringify(spec)) },
        labels: {},
        extensions: {},
      },
    });
    await cl.tasks.create({ containerId: id });
    assert.equal(await serverOf(c, ns, id), spare, "adopted");
    for (const d of dirs) {
      assert.ok(procsOf(d).includes(spare), `adopted server ${spare} in ${d}`);
    }
    await cl.tasks.start({ containerId: id });
    assert.equal((await cl.tasks.wait({ containerId: id })).exitStatus, 0);
    await cl.tasks.delete({ containerId: id });
    await cl.containers.delete({ id });
  } finally {
    await c.stop();
    await rootfs.cleanup();
  }
}
