/**
 * Shared servers (`SKIFF_SHARED_PODS`, sdk/shim/spare/shared.ts, sdk/shim/server/sharing.ts)
 * through CRI, as kubelet drives them, under real containerd 1.6, 2.1 and 2.4 with real runc:
 * the runc example installed with `sharedPods: 8` as a CRI runtime handler.
 *
 * - churn: 300 short pods, 6 in flight, each `RunPodSandbox`, `CreateContainer` and
 *   `StartContainer` of a busybox container that exits by itself with `i % 200`, its exit
 *   waited for through `ContainerStatus`, then `StopPodSandbox` and `RemovePodSandbox`. Every
 *   exit code is right; the pods really shared servers (far fewer server processes than pods,
 *   told apart by pid and start time, and joined pods' `serving ... origin=shared` lines);
 *   nothing is left once the pods are gone: no server, no runc container in the private runc
 *   root, no pod socket, no mount.
 * - a killed shared server (`SKIFF_SHARED_PODS=3` from containerd's environment, which wins over
 *   the launcher's, and 5 pods of a running container each): exactly the killed server's pods'
 *   containers end (CRI reports them exited, their processes are gone), the other server's run
 *   on (RUNNING, `ExecSync` works); then everything is removed and nothing is left. Not under
 *   containerd 2.1 to 2.3: see {@linkcode killStep}.
 *
 * Everything waits by polling with generous bounds; nothing asserts a duration.
 */
import assert from "node:assert/strict";
import { integrationTest } from "../../../_integration.ts";
import {
  containerdVersions,
  type PrivateContainerd,
  type RuntimeConfig,
  startContainerd,
} from "../../../../sdk/testing/containerd.ts";
import { CRI_NAMESPACE, type CriClient, criClient } from "../../../../sdk/testing/cri_client.ts";
import { criContainerConfig, criPodConfig } from "../../../../sdk/testing/cri_container.ts";
import { BUSYBOX_IMAGE_REF } from "../../../../sdk/testing/image.ts";
import { installExampleShims } from "../../../../sdk/install/examples.ts";
import { processStartTime } from "../../../../sdk/linux/proc_stat.ts";
import { ContainerState, PodSandboxState } from "../../../../proto/gen/runtime/v1/api_pb.ts";
import { pool } from "../../../../bench/scale_cri.ts";
import { alive, eventually, exists, LAUNCHER, RUNTIME, sleep } from "../../../_spare.ts";

const NEEDS = { root: true, binaries: ["runc", "busybox", "sh", "mount", "umount"] };
const versions = containerdVersions().filter((v) => /^(1\.6|2\.1|2\.4)\./.test(v.version));
const HANDLER = "skiff-runc";
/** Deadline of each CRI call: generous; only there so that a hang fails instead of wedging. */
const CALL = { timeoutMs: 120_000 };
/** Bound of what must happen eventually (never a timing assertion). */
const LONG_MS = 180_000;
const PODS = 300;
const IN_FLIGHT = 6;
const LIMIT = 8;
const dec = new TextDecoder();

/**
 * Whether the killed-server step runs under `version`. containerd 2.1 to 2.3 load the task of a
 * container that joins its pod's shim (task API 3) with no close callback
 * (core/runtime/v2 `ShimManager.Start`: `loadShim(ctx, bundle, func() {})`), so after a SIGKILL
 * they run the shim's `delete` for the pod's sandbox only: CRI reports the containers exited
 * (255) and their processes run on, their state left in the runc root, with the Go runc shim
 * exactly as with skiff (tests/integration/shim/boot/delete_test.ts compares the two), so "their
 * processes are gone" cannot hold there. 1.6 (a shim binary call per container) and 2.4 (a close
 * callback for joined tasks too) run `delete` for each container and end them.
 */
function killStep(version: string): boolean {
  return !/^2\.[123]\./.test(version);
}

/**
 * skiff's runc as CRI's handler, its runc state in the instance's private root. 1.6's CRI sends
 * a runtime other than io.containerd.runc.v2 only a ConfigPath (bench/scale_node.ts criHandlers).
 */
function handlers(version: string): Record<string, RuntimeConfig> {
  const old = version.startsWith("1.6.");
  return {
    [HANDLER]: {
      runtimeType: RUNTIME,
      options: (c) => old ? { ConfigPath: `${c.dir}/skiff-runc.toml` } : { Root: c.runcRoot },
    },
  };
}

async function criContainerd(
  binDir: string,
  version: string,
  prefix: string,
  env?: Record<string, string>,
): Promise<{ c: PrivateContainerd; cri: CriClient }> {
  const c = await startContainerd({
    binDir,
    extraPath: [`${prefix}/bin`],
    runtimes: handlers(version),
    cri: { defaultHandler: HANDLER },
    ...(env ? { env } : {}),
  });
  try {
    await Deno.writeTextFile(`${c.dir}/skiff-runc.toml`, `Root = "${c.runcRoot}"\n`);
    await c.importBusyboxImage(CRI_NAMESPACE);
    const cri = criClient(c.address);
    await eventually("CRI to list the busybox image", async () => {
      const s = await cri.images.imageStatus({ image: { image: BUSYBOX_IMAGE_REF } }, CALL);
      return s.image ? true : undefined;
    }, LONG_MS);
    return { c, cri };
  } catch (e) {
    await c.stop();
    throw e;
  }
}

/** What a pod's `start` recorded in its sandbox's bundle: the server and the pod's socket. */
interface PodServer {
  /** The server's pid. */
  pid: number;
  /** pid and start time: tells a server from a later one that got the same pid. */
  identity: string;
  /** The pod's own socket. */
  socket: string;
}

async function podServer(c: PrivateContainerd, podId: string): Promise<PodServer> {
  const bundle = `${c.state}/io.containerd.runtime.v2.task/${CRI_NAMESPACE}/${podId}`;
  return await eventually(`shim.pid and address of pod ${podId}`, () => {
    try {
      const pid = Number(Deno.readTextFileSync(`${bundle}/shim.pid`).trim());
      const address = Deno.readTextFileSync(`${bundle}/address`).trim();
      const started = processStartTime(pid);
      if (!(pid > 0) || started === undefined || !address) return undefined;
      return { pid, identity: `${pid}@${started}`, socket: address.replace(/^unix:\/\//, "") };
    } catch {
      return undefined;
    }
  }, LONG_MS);
}

/** Runs a pod of one container `command`, as kubelet does; returns its ids and server. */
async function runPod(
  c: PrivateContainerd,
  cri: CriClient,
  name: string,
  command: string[],
  started: string[],
): Promise<{ podId: string; containerId: string; server: PodServer }> {
  const config = criPodConfig(c, name, { namespace: "skiff-shared" });
  await Deno.mkdir(config.logDirectory, { recursive: true });
  const { podSandboxId: podId } = await cri.runtime.runPodSandbox(
    { config, runtimeHandler: HANDLER },
    CALL,
  );
  started.push(podId);
  // While the pod runs its server does: its start time names it.
  const server = await podServer(c, podId);
  const { containerId } = await cri.runtime.createContainer({
    podSandboxId: podId,
    config: criContainerConfig("main", command),
    sandboxConfig: config,
  }, CALL);
  await cri.runtime.startContainer({ containerId }, CALL);
  return { podId, containerId, server };
}

async function removePod(cri: CriClient, podId: string): Promise<void> {
  await cri.runtime.stopPodSandbox({ podSandboxId: podId }, CALL);
  await cri.runtime.removePodSandbox({ podSandboxId: podId }, CALL);
}

async function containerState(cri: CriClient, containerId: string) {
  return (await cri.runtime.containerStatus({ containerId }, CALL)).status;
}

/** Waits until CRI reports the container exited; returns its exit code. */
async function exitCode(cri: CriClient, containerId: string): Promise<number> {
  let last = "";
  try {
    return await eventually(`container ${containerId} to exit`, async () => {
      const s = await containerState(cri, containerId);
      last = s ? `${ContainerState[s.state]} ${s.exitCode} ${s.reason}` : "no status";
      await sleep(100);
      return s?.state === ContainerState.CONTAINER_EXITED ? s.exitCode : undefined;
    }, LONG_MS);
  } catch (e) {
    throw new Error(`${(e as Error).message} (last: ${last})`);
  }
}

/** The pid of a running container's init, from runc's state in the private root. */
async function containerPid(c: PrivateContainerd, containerId: string): Promise<number> {
  const out = await new Deno.Command("runc", {
    args: ["--root", `${c.runcRoot}/${CRI_NAMESPACE}`, "state", containerId],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.ok(out.success, `runc state ${containerId}: ${dec.decode(out.stderr)}`);
  return JSON.parse(dec.decode(out.stdout)).pid;
}

/** runc containers left in the private runc root, any namespace. */
async function runcLeft(c: PrivateContainerd): Promise<string[]> {
  const left: string[] = [];
  let namespaces: string[] = [];
  try {
    namespaces = [...Deno.readDirSync(c.runcRoot)].filter((e) => e.isDirectory).map((e) => e.name);
  } catch { /* none */ }
  for (const ns of namespaces) {
    const out = await new Deno.Command("runc", {
      args: ["--root", `${c.runcRoot}/${ns}`, "list", "-q"],
      stdout: "piped",
      stderr: "piped",
    }).output();
    left.push(...dec.decode(out.stdout).split("\n").filter(Boolean).map((id) => `${ns}/${id}`));
  }
  return left;
}

/**
 * Nothing of the pods is left: CRI lists no pod and no container, no skiff server of this
 * containerd runs (a waiting warm spare is no server), no runc container is in the private
 * root, none of `sockets` exists, no mount is under containerd's state or names a pod.
 */
async function nothingLeft(
  c: PrivateContainerd,
  cri: CriClient,
  pods: string[],
  sockets: Iterable<string>,
): Promise<void> {
  const { items } = await cri.runtime.listPodSandbox({}, CALL);
  assert.deepEqual(items.map((p) => p.id), [], "CRI lists no pod");
  const { containers } = await cri.runtime.listContainers({}, CALL);
  assert.deepEqual(containers.map((x) => x.id), [], "CRI lists no container");
  try {
    await eventually("every shim server of this containerd to exit", () => {
      return c.shims().length === 0 ? true : undefined;
    }, LONG_MS);
  } catch {
    assert.deepEqual(c.shims(), [], "shim servers left after the pods went");
  }
  assert.deepEqual(await runcLeft(c), [], "runc containers left in the private root");
  const socketsLeft = [...sockets].filter((s) => exists(s));
  assert.deepEqual(socketsLeft, [], "pod sockets left");
  const ids = new Set(pods);
  const mounts = (await c.mounts()).filter((m) =>
    m.startsWith(`${c.state}/`) || [...ids].some((id) => m.includes(id))
  );
  assert.deepEqual(mounts, [], "mounts left under containerd's state");
}

/** How many `serving` lines of containerd's log say a pod joined a shared server. */
async function joinedLines(c: PrivateContainerd): Promise<number> {
  return (await c.logs()).split("\n")
    .filter((l) => /msg="?serving/.test(l) && /origin=shared/.test(l)).length;
}

for (const v of versions) {
  integrationTest(
    `CRI on containerd ${v.version}, shared servers: ${PODS} short pods (${IN_FLIGHT} in flight) share servers, every exit right, nothing left${
      killStep(v.version) ? "; a killed server ends exactly its pods" : ""
    }`,
    NEEDS,
    async (t) => {
      const prefix = await Deno.makeTempDir({ prefix: "skiff-shared-cri-" });
      try {
        await installExampleShims({
          prefix,
          shims: { [LAUNCHER]: "examples/runc/main.ts" },
          sharedPods: LIMIT,
        });

        await t.step(`${PODS} pods churned, up to ${LIMIT} per server`, async () => {
          const { c, cri } = await criContainerd(v.binDir, v.version, prefix);
          try {
            const pods: string[] = [];
            const sockets = new Set<string>();
            const perServer = new Map<string, number>();
            const wrong: string[] = [];
            const errors = await pool(PODS, IN_FLIGHT, async (i) => {
              const want = i % 200;
              const p = await runPod(c, cri, `churn-${i}`, ["sh", "-c", `exit ${want}`], pods);
              sockets.add(p.server.socket);
              perServer.set(p.server.identity, (perServer.get(p.server.identity) ?? 0) + 1);
              const got = await exitCode(cri, p.containerId);
              if (got !== want) wrong.push(`pod ${i}: exit code ${got}, expected ${want}`);
              await removePod(cri, p.podId);
            });
            const most = Math.max(...perServer.values());
            const joined = await joinedLines(c);
            console.log(
              `containerd ${v.version}: ${PODS} pods, ${perServer.size} server processes ` +
                `(most pods in one: ${most}), ${joined} joined a shared server`,
            );
            assert.deepEqual(errors, [], "every pod ran and was removed");
            assert.deepEqual(wrong, [], "every exit right");
            assert.equal(pods.length, PODS);
            // One pod per process would make 300 servers; shared, a few serve them all.
            assert.ok(
              perServer.size <= PODS / 4,
              `far fewer servers than pods: ${perServer.size} for ${PODS}`,
            );
            assert.ok(most >= 2, `a server served several pods: at most ${most}`);
            assert.ok(joined >= PODS / 2, `pods joined shared servers: ${joined} serving lines`);
            assert.equal(sockets.size, PODS, "each pod had its own socket");
            await nothingLeft(c, cri, pods, sockets);
          } finally {
            await c.stop();
          }
        });

        if (!killStep(v.version)) return;
        await t.step("a killed shared server ends exactly its pods", async () => {
          // containerd's environment wins over the launcher's SKIFF_SHARED_PODS.
          const { c, cri } = await criContainerd(v.binDir, v.version, prefix, {
            SKIFF_SHARED_PODS: "3",
          });
          try {
            const podIds: string[] = [];
            const pods = [];
            for (let i = 0; i < 5; i++) {
              pods.push(await runPod(c, cri, `kept-${i}`, ["sleep", "3600"], podIds));
            }
            for (const p of pods) {
              await eventually(`${p.containerId} running`, async () => {
                const s = await containerState(cri, p.containerId);
                return s?.state === ContainerState.CONTAINER_RUNNING ? true : undefined;
              }, LONG_MS);
            }
            const servers = new Map<string, typeof pods>();
            for (const p of pods) {
              servers.set(p.server.identity, [...(servers.get(p.server.identity) ?? []), p]);
            }
            const layout = [...servers.values()].map((ps) => ps.length);
            assert.ok(servers.size >= 2, `two servers at least: ${layout}`);
            assert.ok(Math.max(...layout) <= 3, `at most 3 pods per server: ${layout}`);
            const [victimId, mine] = [...servers.entries()].sort((a, b) =>
              b[1].length - a[1].length
            )[0]!;
            assert.ok(mine.length >= 2, `the victim serves several pods: ${layout}`);
            const others = pods.filter((p) => p.server.identity !== victimId);
            const victim = mine[0]!.server.pid;
            const procs = new Map<string, number>();
            for (const p of pods) procs.set(p.containerId, await containerPid(c, p.containerId));
            for (const p of pods) assert.ok(alive(procs.get(p.containerId)!), p.containerId);

            Deno.kill(victim, "SIGKILL");
            await eventually(`server ${victim} gone`, () => alive(victim) ? undefined : true);
            for (const p of mine) {
              await exitCode(cri, p.containerId);
              await eventually(
                `${p.containerId}'s process gone with its server`,
                () => alive(procs.get(p.containerId)!) ? undefined : true,
                LONG_MS,
              );
            }
            for (const p of others) {
              const s = await containerState(cri, p.containerId);
              assert.equal(
                s?.state,
                ContainerState.CONTAINER_RUNNING,
                `${p.containerId} of the other server runs on`,
              );
              assert.ok(alive(procs.get(p.containerId)!), `${p.containerId}'s process`);
              const r = await cri.runtime.execSync(
                { containerId: p.containerId, cmd: ["echo", p.podId], timeout: 60n },
                CALL,
              );
              assert.equal(r.exitCode, 0, `ExecSync in ${p.containerId}`);
              assert.equal(dec.decode(r.stdout), `${p.podId}\n`);
              const pod = await cri.runtime.podSandboxStatus({ podSandboxId: p.podId }, CALL);
              assert.equal(pod.status?.state, PodSandboxState.SANDBOX_READY, p.podId);
            }
            for (const p of pods) await removePod(cri, p.podId);
            for (const s of servers.keys()) {
              const pid = Number(s.split("@")[0]);
              await eventually(`server ${pid} exits`, () => {
                return processStartTime(pid) === undefined ||
                    `${pid}@${processStartTime(pid)}` !== s || !alive(pid)
                  ? true
                  : undefined;
              }, LONG_MS);
            }
            await nothingLeft(c, cri, podIds, pods.map((p) => p.server.socket));
          } finally {
            await c.stop();
          }
        });
      } finally {
        await Deno.remove(prefix, { recursive: true }).catch(() => {});
      }
    },
  );
}
