/**
 * Shared servers (`SKIFF_SHARED_PODS`, sdk/shim/spare/shared.ts, sdk/shim/server/sharing.ts)
 * under real containerd 1.6 and 2.x with real runc: the runc example installed with
 * `sharedPods: 3` under a name of its own (`io.containerd.skiff-runc-shared.v2`), each `ctr run` a
 * pod of its own (ctr groups nothing):
 *
 * - pods share a server up to the limit, the next pod gets another server; every pod's task
 *   runs, execs and is killed through its own socket, and each joined pod came through the
 *   launcher's door (no Deno `start`) or, with the door off, through the join socket;
 * - a pod's end leaves the others served, and its room is taken again;
 * - containerd restarted: every pod of a shared server is reconnected;
 * - a killed shared server: exactly its pods end (their processes gone, their sockets removed),
 *   the other server's pods run on;
 * - the last pod's end ends the server: nothing is left in the socket directory;
 * - containerd stopped after that: its spare takes the spares' directory (the shared servers'
 *   locks, the namespace notes) and the launcher's note with it;
 * - with the launcher's door off, a pod joins through the join socket (Deno's `start`).
 *
 * Everything waits by polling with generous bounds; nothing asserts a duration.
 */
import assert from "node:assert/strict";
import { integrationTest } from "../../../_integration.ts";
import { containerdVersions, type PrivateContainerd } from "../../../../sdk/testing/containerd.ts";
import { installExampleShims } from "../../../../sdk/install/examples.ts";
import { spareDir, spareDirCache } from "../../../../sdk/shim/spare/mod.ts";
import {
  alive,
  bundleOf,
  eventually,
  exists,
  kit,
  LAUNCHER,
  NEEDS,
  ok,
  serverOf,
  servingHandoff,
  servingOrigin,
  uid,
  waitingSpare,
} from "../../../_spare.ts";

const versions = containerdVersions().filter((v) => /^(1\.6|2\.1|2\.4)\./.test(v.version));
const chosen = [
  versions.find((v) => v.version.startsWith("1.6")),
  versions.filter((v) => v.version.startsWith("2.")).at(-1),
].filter((v) => v !== undefined);
const LIMIT = 3;
const SHARED_LAUNCHER = "containerd-shim-skiff-runc-shared-v2";
const SHARED_RUNTIME = "io.containerd.skiff-runc-shared.v2";

/** The task's pid and status in `ctr tasks ls`, or undefined when it is not listed. */
async function task(
  c: PrivateContainerd,
  ns: string,
  id: string,
): Promise<{ pid: number; status: string } | undefined> {
  const r = await c.ctr(["tasks", "ls"], { namespace: ns });
  for (const line of r.stdout.split("\n")) {
    const [name, pid, status] = line.trim().split(/\s+/);
    if (name === id) return { pid: Number(pid), status: status ?? "" };
  }
  return undefined;
}

/** An exec in `id` that prints its argument: the pod's socket serves. */
async function execWorks(c: PrivateContainerd, ns: string, id: string): Promise<void> {
  const word = uid("hello");
  const r = await ok(
    c.ctr(["tasks", "exec", "--exec-id", uid("x"), id, "echo", word], { namespace: ns }),
    `exec in ${id}`,
  );
  assert.ok(r.stdout.includes(word), `exec in ${id} printed ${word}: ${r.stdout}`);
}

async function remove(c: PrivateContainerd, ns: string, id: string): Promise<void> {
  await c.ctr(["tasks", "kill", "-s", "KILL", id], { namespace: ns });
  await eventually(`${id} stopped`, async () => {
    const t = await task(c, ns, id);
    return t === undefined || t.status === "STOPPED" ? true : undefined;
  });
  await c.ctr(["tasks", "delete", id], { namespace: ns });
  await ok(c.ctr(["containers", "delete", id], { namespace: ns }), `delete ${id}`);
}

for (const v of chosen) {
  integrationTest(
    `shared servers under containerd ${v.version}: up to ${LIMIT} pods per server, a pod's end, containerd restart, a killed server, the last pod`,
    NEEDS,
    async (t) => {
      // Under a name of its own, as an operator installs shared launchers for one handler of a
      // containerd 1.6 (docs/containerd-config.md, "Shared servers").
      const prefix = await Deno.makeTempDir({ prefix: "skiff-shared-" });
      await installExampleShims({
        prefix,
        shims: { [SHARED_LAUNCHER]: "examples/runc/main.ts" },
        sharedPods: LIMIT,
      });
      const runtimes = { skiff: { runtimeType: SHARED_RUNTIME, binaryDir: `${prefix}/bin` } };
      const k = await kit(v.binDir, prefix);
      try {
        const c = await k.containerd({ runtimes });
        const ns = "shared";
        const pods = [uid("p1"), uid("p2"), uid("p3"), uid("p4")];
        // Every pod's own socket (its bundle's address), to look for after the end.
        const sockets = new Map<string, string>();
        const run = async (id: string) => {
          await ok(
            k.run(c, { id, namespace: ns, detach: true, args: ["sleep", "600"] }),
            `run ${id}`,
          );
          const address = await Deno.readTextFile(`${bundleOf(c, ns, id)}/address`);
          sockets.set(id, address.trim().replace(/^unix:\/\//, ""));
        };

        await t.step(`pods share a server up to ${LIMIT}, the next gets another`, async () => {
          for (const id of pods) await run(id);
          const servers = await Promise.all(pods.map((id) => serverOf(c, ns, id)));
          assert.equal(new Set(servers.slice(0, LIMIT)).size, 1, `one server: ${servers}`);
          assert.notEqual(servers[LIMIT], servers[0], `the fourth pod's own: ${servers}`);
          const handoffs: string[] = [];
          for (const id of pods.slice(1, LIMIT)) {
            assert.equal(await servingOrigin(c, id), "shared", `${id} joined`);
            handoffs.push(await servingHandoff(c, id));
          }
          // Joined through the door (no Deno start), or, when the server did not take a knock
          // within the shell's five seconds on a busy machine, through Deno's start: joined
          // all the same. The door serves most of them whatever the load.
          assert.ok(handoffs.every((h) => h === "door" || h === "socket"), `${handoffs}`);
          assert.ok(handoffs.includes("door"), `some joined through the door: ${handoffs}`);
          for (const id of pods) {
            assert.equal((await task(c, ns, id))?.status, "RUNNING", id);
            await execWorks(c, ns, id);
          }
          // Each pod has its own socket, served by the one process.
          assert.equal(new Set(pods.map((id) => sockets.get(id))).size, pods.length);
        });

        await t.step("a pod's end leaves the others, and its room is taken again", async () => {
          const first = await serverOf(c, ns, pods[0]);
          const second = await serverOf(c, ns, pods[LIMIT]);
          await remove(c, ns, pods[1]);
          assert.ok(alive(first), "the shared server serves on");
          await execWorks(c, ns, pods[0]);
          await execWorks(c, ns, pods[2]);
          const next = uid("p5");
          await run(next);
          pods.splice(1, 1, next);
          // No new process: it joined one of the two servers with room.
          const server = await serverOf(c, ns, next);
          assert.ok([first, second].includes(server), `${server} is one of ${first}, ${second}`);
          assert.equal(await servingOrigin(c, next), "shared");
        });

        await t.step("containerd restarted: every pod of a shared server reconnects", async () => {
          const before = await Promise.all(pods.map((id) => serverOf(c, ns, id)));
          await c.restart();
          for (const id of pods) {
            await eventually(
              `${id} listed after the restart`,
              async () => (await task(c, ns, id))?.status === "RUNNING" ? true : undefined,
            );
            await execWorks(c, ns, id);
          }
          for (const pid of before) assert.ok(alive(pid), `server ${pid} still serves`);
        });

        await t.step("a killed shared server: exactly its pods end", async () => {
          const servers = await Promise.all(pods.map((id) => serverOf(c, ns, id)));
          const victim = servers[0];
          const mine = pods.filter((_, i) => servers[i] === victim);
          const others = pods.filter((_, i) => servers[i] !== victim);
          assert.ok(mine.length >= 2 && others.length >= 1, `${servers}`);
          const procs = new Map<string, number>();
          for (const id of mine) procs.set(id, (await task(c, ns, id))!.pid);
          Deno.kill(victim, "SIGKILL");
          for (const id of mine) {
            await eventually(`${id}'s task ended with its server`, async () => {
              const t = await task(c, ns, id);
              return t === undefined || t.status === "STOPPED" ? true : undefined;
            });
            await eventually(
              `${id}'s process gone`,
              () => alive(procs.get(id)!) ? undefined : true,
            );
          }
          for (const id of others) {
            assert.equal((await task(c, ns, id))?.status, "RUNNING", `${id} runs on`);
            await execWorks(c, ns, id);
          }
          for (const id of mine) await remove(c, ns, id);
          pods.splice(0, pods.length, ...others);
        });

        await t.step("the last pod's end ends the server, and nothing is left", async () => {
          const servers = new Set(await Promise.all(pods.map((id) => serverOf(c, ns, id))));
          for (const id of pods) await remove(c, ns, id);
          for (const pid of servers) {
            await eventually(`server ${pid} exits`, () => alive(pid) ? undefined : true);
          }
          const dir = spareDir(c.address);
          const left = [...Deno.readDirSync(dir)].map((e) => e.name)
            .filter((n) => n.startsWith("shared-") && !/\.(lock|create)$/.test(n));
          assert.deepEqual(left, [], `the join point is gone: ${left}`);
          const left2 = [...sockets.values()].filter((s) => exists(s));
          assert.deepEqual(left2, [], "no pod socket left");
        });

        await t.step(
          `a burst of ${2 * LIMIT} pods fills servers instead of starting one each`,
          async () => {
            // No server takes pods when the burst begins: one start brings one up (the spare, or
            // cold), the others wait for it and join (sdk/shim/spare/handoff.ts, joinOrCreate).
            const burst = Array.from({ length: 2 * LIMIT }, (_, i) => uid(`b${i}`));
            await Promise.all(burst.map((id) => run(id)));
            const servers = await Promise.all(burst.map((id) => serverOf(c, ns, id)));
            const distinct = new Set(servers);
            const how = await Promise.all(
              burst.map(async (id) =>
                `${await servingOrigin(c, id)}/${await servingHandoff(c, id) || "-"}`
              ),
            );
            // Two full servers: a start that finds no room waits for the one server another start
            // brings up, and a pod joining is counted once.
            assert.ok(
              distinct.size === 2,
              `${distinct.size} servers for ${burst.length} pods: ${servers} (${how})`,
            );
            for (const id of burst) await execWorks(c, ns, id);
            for (const id of burst) await remove(c, ns, id);
            for (const pid of distinct) {
              await eventually(`server ${pid} exits`, () => alive(pid) ? undefined : true);
            }
          },
        );

        await t.step("containerd stopped: its spare takes its files", async () => {
          // The servers of the pods have ended; the spare the last one spawned waits.
          await eventually("no shim server left", () => c.shims().length ? undefined : true);
          const spare = await waitingSpare(c);
          const dir = spareDir(c.address);
          const note = spareDirCache(c.address)!;
          assert.ok(exists(dir) && exists(note), "the shared servers' files and the note");
          Deno.kill(c.pid!, "SIGTERM");
          await eventually(`spare ${spare} exits`, () => alive(spare) ? undefined : true);
          await eventually(
            `no ${dir} nor its note`,
            () => exists(dir) || exists(note) ? undefined : true,
            10_000,
          );
        });

        await t.step("with the door off, a pod joins through the join socket", async () => {
          await c.stop();
          const d = await k.containerd({ runtimes, env: { SKIFF_SPARE_DOOR: "0" } });
          const two = [uid("s1"), uid("s2")];
          for (const id of two) {
            await ok(k.run(d, { id, namespace: ns, detach: true, args: ["sleep", "600"] }), id);
          }
          const servers = await Promise.all(two.map((id) => serverOf(d, ns, id)));
          assert.equal(servers[0], servers[1], `one server: ${servers}`);
          assert.equal(await servingOrigin(d, two[1]), "shared");
          assert.equal(await servingHandoff(d, two[1]), "socket", "Deno's start, no door");
          for (const id of two) await execWorks(d, ns, id);
          for (const id of two) await remove(d, ns, id);
          await eventually("the server exits", () => alive(servers[0]) ? undefined : true);
        });
      } finally {
        await k.close();
        await Deno.remove(prefix, { recursive: true }).catch(() => {});
      }
    },
  );
}

const newest = chosen.at(-1);
integrationTest(
  `shared servers under containerd ${
    newest?.version ?? "2.x"
  }: what goes wrong uncaught in one pod's handling leaves the process serving`,
  { ...NEEDS, check: () => newest ? undefined : "containerd (tests/setup/prepare.sh)" },
  async () => {
    const prefix = await Deno.makeTempDir({ prefix: "skiff-shared-throws-" });
    await installExampleShims({
      prefix,
      shims: { [LAUNCHER]: "tests/fixtures/shared/throws_in_one_pod.ts" },
      sharedPods: LIMIT,
    });
    const k = await kit(newest!.binDir, prefix);
    try {
      const c = await k.containerd();
      const ns = "throws";
      const calm = uid("calm");
      const wild = uid("throws");
      for (const id of [calm, wild]) {
        await ok(k.run(c, { id, namespace: ns, detach: true, args: ["sleep", "600"] }), id);
      }
      const server = await serverOf(c, ns, calm);
      assert.equal(await serverOf(c, ns, wild), server, "one process serves both pods");
      // Both the timer's throw and the rejection reach the log, and the process lives on.
      await eventually("the uncaught exception in the log", async () => {
        const log = await c.logs();
        return log.includes(`uncaught in ${wild}`) && log.includes(`unhandled in ${wild}`)
          ? true
          : undefined;
      });
      assert.ok(alive(server), "the shared server lives on");
      for (const id of [calm, wild]) {
        assert.equal((await task(c, ns, id))?.status, "RUNNING", id);
        await execWorks(c, ns, id);
      }
      for (const id of [calm, wild]) await remove(c, ns, id);
      await eventually("the server exits", () => alive(server) ? undefined : true);
    } finally {
      await k.close();
      await Deno.remove(prefix, { recursive: true }).catch(() => {});
    }
  },
);
