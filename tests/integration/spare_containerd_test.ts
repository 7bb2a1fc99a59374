/**
 * The warm spare server (sdk/shim/spare/spare.ts, sdk/shim/spare/handoff.ts) under real
 * containerd 1.6 and 2.x with real runc and the skiff runc example shim installed by
 * `installExampleShims` (spares on, as by default):
 *
 * - adoption: the first start is cold, a later one is served by the spare that waited;
 * - an adopted spare is indistinguishable from a cold server: working directory, cgroups,
 *   OOM score, the environment containerd gave, log lines through the log FIFO, `-debug`, and
 *   runc options' `shim_cgroup`;
 * - a spare of reinstalled code is never adopted and exits by itself; a killed spare means a
 *   cold start; parallel starts are all counted; idle expiry; `SKIFF_SPARE=0`; two containerds
 *   on one node; nothing left behind (a gone containerd's spare takes its directory and the
 *   launcher's note with it).
 *
 * The spare a `start` adopts is recognised by pid: the pid that waited in `c.spares()` is the
 * one the bundle's `shim.pid` names afterwards. Everything waits by polling with generous
 * bounds; nothing asserts a duration.
 */
import assert from "node:assert/strict";
import { integrationTest } from "../_integration.ts";
import { containerdVersions, type PrivateContainerd } from "../../sdk/testing/containerd.ts";
import { installExampleShims } from "../../sdk/install/examples.ts";
import { spareDir, spareDirCache } from "../../sdk/shim/spare/mod.ts";
import {
  alive,
  describe,
  eventually,
  exists,
  kit,
  LAUNCHER,
  NEEDS,
  ok,
  RUNTIME,
  serverOf,
  servingHandoff,
  servingOrigin,
  sleep,
  stats,
  statsReach,
  uid,
  waitingSpare,
} from "../_spare.ts";
import { spareSameAsCold, spareShimCgroup } from "../_spare_cgroups.ts";

// The spare answers `start` in each of skiff's answer forms: 1.6 (plain address, as for 1.7),
// 2.1 (JSON, as for 2.0-2.2), 2.4 (BootstrapParams in, BootstrapResult out, as for 2.3).
const versions = containerdVersions().filter((v) => /^(1\.6|2\.1|2\.4)\./.test(v.version));

integrationTest("the warm spare is tested under containerd 1.6 and 2.x", {
  ...NEEDS,
  check() {
    const have = versions.map((v) => v.version);
    const lacking = ["1.6", "2."].filter((p) => !have.some((h) => h.startsWith(p)));
    return lacking.length > 0
      ? `containerd ${lacking.join(", ")} (found ${have.join(", ") || "none"}; ` +
        "run tests/setup/prepare.sh as root)"
      : undefined;
  },
}, () => {
  assert.ok(versions.some((v) => v.version.startsWith("1.6")), "containerd 1.6");
  assert.ok(versions.some((v) => v.version.startsWith("2.")), "containerd 2.x");
  return Promise.resolve();
});

// 1.6 (the oldest supported) and the newest 2.x found.
const chosen = [
  versions.find((v) => v.version.startsWith("1.6")),
  versions.filter((v) => v.version.startsWith("2.")).at(-1),
].filter((v) => v !== undefined);

for (const v of chosen) {
  integrationTest(
    `warm spare under containerd ${v.version}: adoption, same as cold, reinstall, kill, parallel, idle, off, two containerds, cleanup`,
    NEEDS,
    async (t) => {
      const k = await kit(v.binDir);
      try {
        await t.step(
          "adoption: the first run is cold, the next is served by the spare",
          async () => {
            const c = await k.containerd();
            const ns = "adopt";
            const first = uid("first");
            await ok(k.run(c, { id: first, namespace: ns, args: ["true"] }), "first run");
            assert.equal(await servingOrigin(c, first), "cold");
            await statsReach(c, { adopted: 0, cold: 1 });
            const spare = await waitingSpare(c);

            const second = uid("second");
            await ok(
              k.run(c, { id: second, namespace: ns, detach: true, args: ["sleep", "600"] }),
              "second run",
            );
            assert.equal(await serverOf(c, ns, second), spare, "the spare that waited serves it");
            const shims = c.shims();
            const listed = shims.find((s) => s.pid === spare);
            assert.ok(
              listed,
              `c.shims() lists the adopted spare ${spare}: ${JSON.stringify(shims)}`,
            );
            const at = (f: string) => listed.argv[listed.argv.indexOf(f) + 1];
            assert.equal(at("-id"), second);
            assert.equal(at("-namespace"), ns);
            assert.ok(!c.spares().some((s) => s.pid === spare), "no longer listed as waiting");
            assert.equal(await servingOrigin(c, second), "spare");
            // The launcher's shell knocked at the spare's door ("door", no Deno `start`); a spare
            // that, niced and on a busy machine, did not answer within the shell's second is
            // reached by Deno's `start` through its socket ("socket"): adopted all the same. The
            // door's own path is tests/unit/shim/spare/door_test.ts's, with the real shell.
            assert.match(await servingHandoff(c, second), /^(door|socket)$/);
            await statsReach(c, { adopted: 1, cold: 1 });
            // The task really runs under it: ctr sees it, and a kill reaches it through the server.
            await ok(c.ctr(["tasks", "kill", "-s", "KILL", second], { namespace: ns }), "kill");
            await eventually("the adopted task's exit", async () => {
              const r = await c.ctr(["tasks", "ls"], { namespace: ns });
              return r.stdout.includes("STOPPED") ? true : undefined;
            });
            await ok(c.ctr(["tasks", "delete", second], { namespace: ns }), "task delete");
            await ok(c.ctr(["containers", "delete", second], { namespace: ns }), "delete");
            await eventually("the adopted server's exit", () => alive(spare) ? undefined : true);
            // A new spare waits again for the next one.
            assert.notEqual(await waitingSpare(c), spare);
            await c.stop();
          },
        );

        await t.step(
          "an adopted spare is indistinguishable from a cold server",
          () => spareSameAsCold(k),
        );

        await t.step(
          "runc options' shim_cgroup is honoured by an adopted spare",
          () => spareShimCgroup(k),
        );

        await t.step("a spare of reinstalled code is not adopted, and exits", async () => {
          const prefix = await Deno.makeTempDir({ prefix: "skiff-spare-reinstall-" });
          try {
            await installExampleShims({ prefix, shims: { [LAUNCHER]: "examples/runc/main.ts" } });
            const c = await k.containerd({
              runtimes: { skiff: { runtimeType: RUNTIME, binaryDir: `${prefix}/bin` } },
            });
            const ns = "reinstall";
            await ok(k.run(c, { id: uid("before"), namespace: ns, args: ["true"] }), "before");
            const old = await waitingSpare(c);
            await statsReach(c, { adopted: 0, cold: 1 });
            // Other V8 flags: other launcher text, so other code.
            await installExampleShims({
              prefix,
              shims: { [LAUNCHER]: "examples/runc/main.ts" },
              v8Flags: ["--max-semi-space-size=2"],
            });
            const id = uid("after");
            await ok(
              k.run(c, { id, namespace: ns, detach: true, args: ["sleep", "600"] }),
              "after reinstall",
            );
            const server = await serverOf(c, ns, id);
            assert.notEqual(server, old, "the old spare did not serve it");
            assert.equal(await servingOrigin(c, id), "cold");
            await statsReach(c, { adopted: 0, cold: 2 });
            await eventually(`the old spare ${old} exits`, () => alive(old) ? undefined : true);
            // The next spare is of the new code, and is adopted.
            const fresh = await waitingSpare(c);
            assert.notEqual(fresh, old);
            const next = uid("next");
            await ok(
              k.run(c, { id: next, namespace: ns, detach: true, args: ["sleep", "600"] }),
              "next",
            );
            assert.equal(await serverOf(c, ns, next), fresh);
            await c.stop();
          } finally {
            await Deno.remove(prefix, { recursive: true }).catch(() => {});
          }
        });

        await t.step("a SIGKILLed spare: the next run is cold and counted cold", async () => {
          const c = await k.containerd();
          const ns = "killed";
          await ok(k.run(c, { id: uid("one"), namespace: ns, args: ["true"] }), "one");
          const spare = await waitingSpare(c);
          await statsReach(c, { adopted: 0, cold: 1 });
          Deno.kill(spare, "SIGKILL");
          await eventually("the killed spare is gone", () => alive(spare) ? undefined : true);
          const id = uid("two");
          await ok(k.run(c, { id, namespace: ns, detach: true, args: ["sleep", "600"] }), "two");
          assert.notEqual(await serverOf(c, ns, id), spare);
          assert.equal(await servingOrigin(c, id), "cold");
          await statsReach(c, { adopted: 0, cold: 2 });
          await c.stop();
        });

        await t.step(
          "10 parallel runs: all succeed, all counted, one spare waits after",
          async () => {
            const c = await k.containerd();
            const ns = "parallel";
            await ok(k.run(c, { id: uid("warmup"), namespace: ns, args: ["true"] }), "warm-up");
            const before = await waitingSpare(c);
            await statsReach(c, { adopted: 0, cold: 1 });
            const ids = Array.from({ length: 10 }, (_, i) => uid(`p${i}`));
            const results = await Promise.all(
              ids.map((id) => k.run(c, { id, namespace: ns, args: ["true"] })),
            );
            results.forEach((r, i) => assert.equal(r.code, 0, `${ids[i]}: ${describe(r)}`));
            // Every start is counted exactly once, whichever way it went.
            let last = { adopted: 0, cold: 0 };
            await eventually("11 counted starts", async () => {
              last = await stats(c);
              return last.adopted + last.cold >= 11 ? true : undefined;
            }).catch(() => assert.fail(`counted ${JSON.stringify(last)}`));
            await sleep(1_000); // a late extra count would show now
            last = await stats(c);
            assert.equal(last.adopted + last.cold, 11, JSON.stringify(last));
            // The spare that waited before was adopted by one of them (nothing else can take it).
            assert.ok(last.adopted >= 1, JSON.stringify(last));
            const origins = await Promise.all(ids.map((id) => servingOrigin(c, id)));
            assert.equal(origins.filter((o) => o === "spare").length, last.adopted);
            assert.ok(!alive(before) || !c.spares().some((s) => s.pid === before));
            // Afterwards exactly one spare is left waiting, and no server.
            const after = await waitingSpare(c);
            await eventually("only one spare process left", () => {
              const spares = c.spares().map((s) => s.pid);
              return spares.length === 1 && spares[0] === after ? true : undefined;
            });
            await eventually(
              "no shim server left",
              () => c.shims().length === 0 ? true : undefined,
            );
            await c.stop();
          },
        );

        await t.step(
          "idle expiry: SKIFF_SPARE_IDLE_SECONDS=10 ends it, the default does not",
          async () => {
            // The short spare is looked for before anything else runs, and its idle time leaves
            // the poll slack on a busy machine: seen late, an expired spare is never seen.
            const short = await k.containerd({ env: { SKIFF_SPARE_IDLE_SECONDS: "10" } });
            const long = await k.containerd();
            await ok(k.run(short, { id: uid("s"), namespace: "idle", args: ["true"] }), "short");
            const shortSpare = await waitingSpare(short);
            await ok(k.run(long, { id: uid("l"), namespace: "idle", args: ["true"] }), "long");
            const longSpare = await waitingSpare(long);
            await eventually(
              "the short-idle spare exits",
              () => alive(shortSpare) ? undefined : true,
            );
            assert.equal(short.spares().length, 0, "no spare left for the short-idle containerd");
            const sock = [...Deno.readDirSync(spareDir(short.address))].filter((e) =>
              e.name.endsWith(".sock")
            );
            assert.deepEqual(sock, [], "the expired spare removed its socket");
            await sleep(11_000); // longer than the short idle time again
            assert.ok(alive(longSpare), "the default-idle spare still waits");
            assert.equal(await waitingSpare(long), longSpare);
            await short.stop();
            await long.stop();
          },
        );

        await t.step(
          "SKIFF_SPARE_DOOR=0: Deno's start hands the container over the spare's socket",
          async () => {
            const c = await k.containerd({ env: { SKIFF_SPARE_DOOR: "0" } });
            const ns = "socket";
            await ok(k.run(c, { id: uid("a"), namespace: ns, args: ["true"] }), "a");
            const spare = await waitingSpare(c);
            const id = uid("b");
            await ok(k.run(c, { id, namespace: ns, detach: true, args: ["sleep", "600"] }), "b");
            assert.equal(await serverOf(c, ns, id), spare, "the spare that waited serves it");
            assert.equal(await servingHandoff(c, id), "socket");
            await statsReach(c, { adopted: 1, cold: 1 });
            await c.stop();
          },
        );

        await t.step("SKIFF_SPARE=0: no spare, no counters", async () => {
          const c = await k.containerd({ env: { SKIFF_SPARE: "0" } });
          const ns = "off";
          await ok(k.run(c, { id: uid("a"), namespace: ns, args: ["true"] }), "a");
          const id = uid("b");
          await ok(k.run(c, { id, namespace: ns, detach: true, args: ["sleep", "600"] }), "b");
          const server = await serverOf(c, ns, id);
          const listed = c.shims().find((s) => s.pid === server);
          assert.ok(listed && !listed.argv.includes("-spare"), "a cold server (its own argv)");
          assert.equal(await servingOrigin(c, id), "cold");
          assert.deepEqual(c.spares(), [], "no spare process");
          assert.ok(!exists(spareDir(c.address)), "no spare directory, so no counters");
          await c.stop();
        });

        await t.step("two containerds on one node: each its own spare", async () => {
          const a = await k.containerd();
          const b = await k.containerd();
          const ns = "two";
          await ok(k.run(a, { id: uid("a0"), namespace: ns, args: ["true"] }), "a0");
          const spareA = await waitingSpare(a);
          assert.deepEqual(b.spares(), [], "b has no spare before its first run");
          // b's first run is cold even though a's spare waits.
          const b0 = uid("b0");
          await ok(k.run(b, { id: b0, namespace: ns, detach: true, args: ["sleep", "600"] }), "b0");
          assert.notEqual(await serverOf(b, ns, b0), spareA);
          assert.equal(await servingOrigin(b, b0), "cold");
          assert.ok(alive(spareA) && a.spares().some((s) => s.pid === spareA), "a's still waits");
          const spareB = await waitingSpare(b);
          assert.notEqual(spareA, spareB);
          assert.notEqual(spareDir(a.address), spareDir(b.address));
          const a1 = uid("a1");
          const b1 = uid("b1");
          await ok(k.run(a, { id: a1, namespace: ns, detach: true, args: ["sleep", "600"] }), "a1");
          await ok(k.run(b, { id: b1, namespace: ns, detach: true, args: ["sleep", "600"] }), "b1");
          assert.equal(await serverOf(a, ns, a1), spareA);
          assert.equal(await serverOf(b, ns, b1), spareB);
          await statsReach(a, { adopted: 1, cold: 1 });
          await statsReach(b, { adopted: 1, cold: 1 });
          await a.stop();
          await b.stop();
        });

        await t.step("nothing left behind: stop(), and containerd stopped alone", async () => {
          const c = await k.containerd();
          await ok(k.run(c, { id: uid("x"), namespace: "left", args: ["true"] }), "x");
          const spare = await waitingSpare(c);
          const dir = spareDir(c.address);
          assert.ok(exists(dir));
          await c.stop();
          assert.ok(!alive(spare), `spare ${spare} killed by stop()`);
          assert.deepEqual(c.spares(), []);
          assert.ok(!exists(dir), `${dir} removed by stop()`);

          // Two runs (the second through the door: the launcher's shell notes the directory's
          // name), their servers ended: only the spare is left of this containerd.
          const used = async (c: PrivateContainerd, tag: string) => {
            for (const id of [uid(`${tag}0`), uid(`${tag}1`)]) {
              await ok(k.run(c, { id, namespace: "left", args: ["true"] }), id);
            }
            await eventually("no shim server left", () => c.shims().length ? undefined : true);
            assert.ok(exists(spareDir(c.address)) && exists(spareDirCache(c.address)!));
            return await waitingSpare(c);
          };
          // The spare that left took its containerd's files with it, before the kit's cleanup.
          const tidied = (c: PrivateContainerd) =>
            eventually(`no ${spareDir(c.address)} nor its note`, () => {
              const note = spareDirCache(c.address)!;
              return exists(spareDir(c.address)) || exists(note) ? undefined : true;
            }, 10_000);

          // containerd stopped (SIGTERM) without the kit's cleanup: the spare notices.
          const d = await k.containerd();
          const orphan = await used(d, "y");
          Deno.kill(d.pid!, "SIGTERM");
          await eventually("containerd's exit", () => d.pid === undefined ? true : undefined);
          await eventually(
            `spare ${orphan} exits once containerd is gone`,
            () => alive(orphan) ? undefined : true,
          );
          await tidied(d);
          await d.stop();

          // containerd SIGKILLed: its socket file stays, but the process the spare was spawned
          // under is gone, and the spare notices that too (and that nobody accepts there).
          const e = await k.containerd();
          const orphan2 = await used(e, "z");
          const socketFile = e.address;
          Deno.kill(e.pid!, "SIGKILL");
          await eventually("containerd's exit", () => e.pid === undefined ? true : undefined);
          assert.ok(exists(socketFile), "a SIGKILLed containerd leaves its socket file");
          await eventually(
            `spare ${orphan2} exits once its containerd was killed`,
            () => alive(orphan2) ? undefined : true,
          );
          await tidied(e);
          await e.stop();
        });
      } finally {
        await k.close();
      }
    },
  );
}
