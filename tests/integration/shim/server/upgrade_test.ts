/**
 * Live shim upgrade (sdk/shim/server/upgrade.ts, the `upgrade` command in
 * sdk/shim/boot/upgrade.ts) under real containerd 1.6, 2.1 and 2.4 with real runc and the
 * skiff runc example installed as a bundle launcher, as an operator runs it:
 *
 * - 20 upgrades in a row while a container prints a counter every 10 ms through containerd's
 *   FIFOs (`ctr run`, attached: its `Wait` is pending across every upgrade) and execs start,
 *   print and exit with their own status: no line lost or repeated, every exit status right,
 *   the shim's pid unchanged, containerd never sees the shim go;
 * - a terminal (`ctr run -t`): its output and exit status carry on across 5 upgrades;
 * - a `binary://` logger: the same logger process gets every line across 5 upgrades, and has
 *   exited (its files complete) when the run ends;
 * - processes that exit while upgrades run get their own status, once;
 * - the installed code unchanged: nothing is done without `--force`;
 * - a broken installed bundle: the upgrade is refused, the command exits non-zero, and the old
 *   code keeps serving the running container;
 * - installed code that loads but cannot take the carried container (it throws, or a timer of it
 *   throws an error nobody catches): the previous code starts again in place from the same state, the command says so and exits non-zero, the shim serves
 *   on (same pid, containerd never sees it go) and a later upgrade to good code works.
 *
 * Everything waits by polling with generous bounds; nothing asserts a duration. A container that
 * must outlive the upgrades prints until the test tells it to stop (a file in a directory bound
 * into it), not for a fixed count: on a loaded machine the upgrades outlast any fixed count.
 */
import assert from "node:assert/strict";
import { integrationTest } from "../../../_integration.ts";
import { containerdVersions } from "../../../../sdk/testing/containerd.ts";
import type { PrivateContainerd } from "../../../../sdk/testing/containerd.ts";
import { ctrRun, ctrRunArgs } from "../../../../sdk/testing/ctr.ts";
import { processesWithArg } from "../../../../sdk/testing/processes.ts";
import { processParent } from "../../../../sdk/linux/proc_stat.ts";
import { installExampleShims } from "../../../../sdk/install/examples.ts";
import {
  describe,
  eventually,
  kit,
  LAUNCHER,
  NEEDS,
  ok,
  serverOf,
  shimLossLines,
  sleep,
  uid,
} from "../../../_spare.ts";

const versions = containerdVersions().filter((v) => /^(1\.6|2\.1|2\.4)\./.test(v.version));
const dec = new TextDecoder();

integrationTest("live upgrade is tested under containerd 1.6, 2.1 and 2.4", {
  ...NEEDS,
  check() {
    const have = versions.map((v) => v.version);
    const lacking = ["1.6", "2.1", "2.4"].filter((p) => !have.some((h) => h.startsWith(p)));
    return lacking.length > 0
      ? `containerd ${lacking.join(", ")} (found ${have.join(", ") || "none"}; ` +
        "run tests/setup/prepare.sh as root)"
      : undefined;
  },
}, () => {
  assert.equal(versions.length >= 3, true, "containerd 1.6, 2.1 and 2.4");
  return Promise.resolve();
});

/** Runs `<launcher> upgrade ...` as an operator would; its exit code and output. */
async function upgradeCommand(
  bin: string,
  c: PrivateContainerd,
  ...args: string[]
): Promise<{ code: number; out: string }> {
  const r = await new Deno.Command(bin, {
    args: ["upgrade", ...args, "--state-dir", `${c.state}/io.containerd.runtime.v2.task`],
    stdin: "null",
  }).output();
  return { code: r.code, out: dec.decode(r.stdout) + dec.decode(r.stderr) };
}

/** SIGKILLs a detached container's task, waits for it to stop, deletes task and container. */
async function killAndRemove(c: PrivateContainerd, ns: string, id: string): Promise<void> {
  await ok(c.ctr(["tasks", "kill", "-s", "KILL", id], { namespace: ns }), "kill");
  await eventually("the task to stop", async () => {
    const r = await c.ctr(["tasks", "ls"], { namespace: ns });
    return r.stdout.includes(id) && !r.stdout.includes("STOPPED") ? undefined : true;
  });
  await ok(c.ctr(["tasks", "delete", id], { namespace: ns }), "task delete");
  await ok(c.ctr(["containers", "delete", id], { namespace: ns }), "delete");
}

/** `ctr run` attached (FIFO stdio), in the background: its output and exit code. */
function runAttached(
  c: PrivateContainerd,
  k: Awaited<ReturnType<typeof kit>>,
  ns: string,
  id: string,
  script: string,
  flags: string[] = [],
): Promise<{ code: number; stdout: string; stderr: string }> {
  const args = ctrRunArgs(c, {
    id,
    namespace: ns,
    image: k.image,
    runtime: "skiff",
    runtimeConfigPath: `${c.dir}/runc.toml`,
    args: ["sh", "-c", script],
    flags,
  });
  const child = new Deno.Command(`${c.binDir}/ctr`, {
    args: ["-a", c.address, "-n", ns, ...args],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  return child.output().then((o) => ({
    code: o.code,
    stdout: dec.decode(o.stdout),
    stderr: dec.decode(o.stderr),
  }));
}

/**
 * A stop signal for a container: a host directory bound read-only at `/gate` (`flags`), and a
 * counter script that prints a line every 10 ms until `stop()` creates `/gate/stop` (bounded,
 * should that never come), then exits with `status`.
 */
async function gate(c: PrivateContainerd, id: string) {
  const dir = `${c.dir}/gate-${id}`;
  await Deno.mkdir(dir, { recursive: true });
  return {
    flags: ["--mount", `type=bind,src=${dir},dst=/gate,options=rbind:ro`],
    counter: (status: number, after = "") =>
      "i=0; while [ ! -e /gate/stop ] && [ $i -lt 60000 ]; do echo $i; i=$((i+1)); sleep 0.01; " +
      `done; ${after}exit ${status}`,
    stop: () => Deno.writeTextFile(`${dir}/stop`, ""),
  };
}

/** Lines `0`, `1`, ... in order, each once, and at least `atLeast` of them. */
function assertCounted(got: string[], atLeast: number): void {
  assert.ok(got.length >= atLeast, `${got.length} counter lines, expected ${atLeast} or more`);
  got.forEach((l, i) => assert.equal(l, String(i), `line ${i}`));
}

for (const v of versions) {
  integrationTest(
    `live upgrade under containerd ${v.version}: 20 upgrades under a counter and execs, a terminal, exits in the window, unchanged code, a broken bundle`,
    NEEDS,
    async (t) => {
      const k = await kit(v.binDir);
      const bin = `${k.prefix}/bin/${LAUNCHER}`;
      try {
        const c = await k.containerd();
        const ns = "upgrade";
        await ok(k.run(c, { id: uid("warm"), namespace: ns, args: ["true"] }), "image import");

        await t.step("20 upgrades: the counter, execs and the shim's pid carry on", async () => {
          const id = uid("counter");
          const g = await gate(c, id);
          const run = runAttached(c, k, ns, id, g.counter(7), g.flags);
          const pid = await serverOf(c, ns, id);
          await eventually("the counter's task to run", async () => {
            const r = await c.ctr(["tasks", "ls"], { namespace: ns });
            return r.stdout.includes(id) && r.stdout.includes("RUNNING") ? true : undefined;
          });
          let execs = 0;
          let stop = false;
          const execLoop = (async () => {
            for (let i = 0; !stop; i++) {
              const r = await c.ctr(
                [
                  "tasks",
                  "exec",
                  "--exec-id",
                  `e${i}`,
                  id,
                  "sh",
                  "-c",
                  `echo exec-${i}; exit ${i % 5}`,
                ],
                { namespace: ns },
              );
              assert.equal(r.code, i % 5, `exec ${i}: ${describe(r)}`);
              assert.equal(r.stdout.trim(), `exec-${i}`, `exec ${i}'s output`);
              execs++;
            }
          })();
          execLoop.catch(() => {}); // awaited (and its failure thrown) below
          try {
            for (let i = 0; i < 20; i++) {
              const r = await upgradeCommand(bin, c, "--all", "--force");
              assert.equal(r.code, 0, `upgrade ${i}: ${r.out}`);
              assert.match(r.out, new RegExp(`pid ${pid} ${ns}/.*: upgraded`), r.out);
              assert.equal(await serverOf(c, ns, id), pid, "the same shim process");
              await sleep(100);
            }
            assert.deepEqual(await shimLossLines(c, id), [], "containerd never lost the shim");
          } finally {
            stop = true;
            await execLoop;
          }
          assert.ok(execs > 0, "execs ran during the upgrades");
          await g.stop();
          const done = await run;
          assert.equal(done.code, 7, `the counter's exit status through its Wait: ${done.stderr}`);
          // 20 upgrades with 100 ms between them: 2 s at the least, 200 lines.
          assertCounted(done.stdout.trim().split("\n"), 200);
        });

        await t.step("a terminal (`ctr run -t`): its output and exit status carry on", async () => {
          const id = uid("tty");
          const g = await gate(c, id);
          const run = ctrRun(c, {
            id,
            namespace: ns,
            image: k.image,
            runtime: "skiff",
            runtimeConfigPath: `${c.dir}/runc.toml`,
            tty: true,
            flags: g.flags,
            args: ["sh", "-c", g.counter(5)],
            timeoutMs: 300_000,
          });
          const pid = await serverOf(c, ns, id);
          for (let i = 0; i < 5; i++) {
            const r = await upgradeCommand(bin, c, "--id", id, "--force");
            assert.equal(r.code, 0, `upgrade ${i}: ${r.out}`);
            assert.equal(await serverOf(c, ns, id), pid, "the same shim process");
            await sleep(100);
          }
          await g.stop();
          const done = await run;
          assert.equal(done.code, 5, describe(done));
          // 5 upgrades with 100 ms between them: 50 lines at the least.
          assertCounted(done.stdout.split(/\r*\n/).filter((l) => /^\d+$/.test(l)), 50);
        });

        await t.step("a binary:// logger: its output and the logger process carry on", async () => {
          const id = uid("binlog");
          const g = await gate(c, id);
          const logger = `${c.dir}/logger-${id}.sh`;
          const out = `${c.dir}/logs/${id}.log`;
          await Deno.mkdir(`${c.dir}/logs`, { recursive: true });
          // containerd's binary logging protocol: fd 3 stdout, fd 4 stderr, ready on fd 5.
          await Deno.writeTextFile(
            logger,
            [
              "#!/bin/sh",
              'cat <&3 >>"$2" &',
              'cat <&4 >>"$2.err" &',
              "printf x >&5",
              "exec 5>&-",
              "wait",
              "",
            ].join("\n"),
            { mode: 0o755 },
          );
          const run = ctrRun(c, {
            id,
            namespace: ns,
            image: k.image,
            runtime: "skiff",
            runtimeConfigPath: `${c.dir}/runc.toml`,
            logUri: `binary://${logger}?file=${out}`,
            flags: g.flags,
            args: ["sh", "-c", g.counter(6, "echo done >&2; ")],
            timeoutMs: 300_000,
          });
          const pid = await serverOf(c, ns, id);
          // The logger itself: the shim's child (its forks carry its arguments until they exec).
          const loggerPids = () =>
            processesWithArg(logger).map((p) => p.pid).filter((p) => processParent(p) === pid);
          const before = await eventually("the logger to run", () => {
            const pids = loggerPids();
            return pids.length > 0 ? pids : undefined;
          });
          for (let i = 0; i < 5; i++) {
            const r = await upgradeCommand(bin, c, "--id", id, "--force");
            assert.equal(r.code, 0, `upgrade ${i}: ${r.out}`);
            assert.equal(await serverOf(c, ns, id), pid, "the same shim process");
            await sleep(100);
          }
          const during = loggerPids();
          await g.stop();
          const done = await run;
          assert.equal(done.code, 6, describe(done));
          assert.deepEqual(during, before, "the same logger process across the upgrades");
          // The shim answers Delete once the logger has exited: its files are complete.
          assertCounted((await Deno.readTextFile(out)).trim().split("\n"), 50);
          assert.equal((await Deno.readTextFile(`${out}.err`)).trim(), "done");
          assert.deepEqual(processesWithArg(logger), [], "the logger exited");
        });

        // `ctr run` attached removes its container when it ends (--rm).
        await t.step("exits while upgrades run: each with its own status", async () => {
          const ids = Array.from({ length: 6 }, (_, i) => uid(`exit${i}`));
          // One pod-less shim per container: each run is its own shim; upgrade them all at once.
          const runs = ids.map((id, i) =>
            runAttached(c, k, ns, id, `sleep 0.${3 + i}; echo bye-${i}; exit ${10 + i}`)
          );
          for (let i = 0; i < 4; i++) {
            const r = await upgradeCommand(bin, c, "--all", "--force");
            // A shim whose container exited and was deleted meanwhile (containerd's Shutdown
            // answered, its socket gone) ended: not a failure of the upgrade, and not re-executed.
            assert.equal(r.code, 0, r.out);
            for (const line of r.out.trim().split("\n").filter(Boolean)) {
              assert.match(
                line,
                /: (upgraded|already runs|ended meanwhile)|^no running shim/,
                r.out,
              );
            }
          }
          const results = await Promise.all(runs);
          results.forEach((r, i) => {
            assert.equal(r.code, 10 + i, `container ${i}'s status: ${r.stderr}`);
            assert.equal(r.stdout.trim(), `bye-${i}`);
          });
        });

        await t.step("unchanged code: nothing is done without --force", async () => {
          const id = uid("same");
          await ok(k.run(c, { id, namespace: ns, detach: true, args: ["sleep", "600"] }), "run");
          const r = await upgradeCommand(bin, c, "--id", id, "--namespace", ns);
          assert.equal(r.code, 0, r.out);
          assert.match(r.out, /already runs the installed code/, r.out);
          await killAndRemove(c, ns, id);
        });

        await t.step("a broken installed bundle: refused, the old code keeps serving", async () => {
          const id = uid("broken");
          await ok(k.run(c, { id, namespace: ns, detach: true, args: ["sleep", "600"] }), "run");
          const pid = await serverOf(c, ns, id);
          // The installed bundle's server chunk broken (what a bad build or a half-copied
          // install gives): the command itself still runs, the new server cannot load.
          const launcher = await Deno.readTextFile(bin);
          const entry = /^SKIFF_SHIM_BUNDLE='([^']+)'$/m.exec(launcher)?.[1];
          assert.ok(entry, `the launcher names its bundle:\n${launcher}`);
          const dir = entry.slice(0, entry.lastIndexOf("/"));
          const chunk = [...Deno.readDirSync(dir)].find((e) => /^serve-.*\.js$/.test(e.name));
          assert.ok(chunk, `the server's chunk in ${dir}`);
          const original = await Deno.readTextFile(`${dir}/${chunk.name}`);
          await Deno.writeTextFile(`${dir}/${chunk.name}`, "this is not javascript (\n");
          try {
            const r = await upgradeCommand(bin, c, "--all", "--force");
            assert.equal(r.code, 1, r.out);
            assert.match(
              r.out,
              /FAILED: .*refused: the installed code .* failed its check/s,
              r.out,
            );
          } finally {
            await Deno.writeTextFile(`${dir}/${chunk.name}`, original);
          }
          assert.equal(await serverOf(c, ns, id), pid, "the same shim process");
          const e = await c.ctr([
            "tasks",
            "exec",
            "--exec-id",
            "after",
            id,
            "sh",
            "-c",
            "echo still; exit 4",
          ], {
            namespace: ns,
          });
          assert.equal(e.code, 4, describe(e));
          assert.equal(e.stdout.trim(), "still");
          assert.deepEqual(await shimLossLines(c, id), [], "containerd never lost the shim");
          await killAndRemove(c, ns, id);
        });
        // New code that fails while it takes the state back: by a thrown error, or by one
        // nobody catches (a timer's); either way the previous code takes it back.
        const failing = [
          ["rejects_carried", "cannot take the state", /rejects the carried runtime options/],
          ["crashes_carried", "crashes while it takes the state", /crashes while it takes/],
        ] as const;
        for (const [fixture, what, why] of failing) {
          await t.step(
            `new code that ${what}: the previous code takes it back and serves on`,
            async () => {
              const id = uid("rollback");
              await ok(
                k.run(c, { id, namespace: ns, detach: true, args: ["sleep", "600"] }),
                "run",
              );
              const pid = await serverOf(c, ns, id);
              // A build that loads (its check passes) and then fails to take the container.
              await installExampleShims({
                prefix: k.prefix,
                shims: { [LAUNCHER]: `tests/fixtures/upgrade/${fixture}.ts` },
              });
              try {
                const r = await upgradeCommand(bin, c, "--id", id, "--namespace", ns);
                assert.equal(r.code, 1, r.out);
                assert.match(
                  r.out,
                  /FAILED: .*could not take the state \(.*\); the previous code .* took it back and serves again/s,
                  r.out,
                );
                assert.match(r.out, why, r.out);
              } finally {
                await installExampleShims({
                  prefix: k.prefix,
                  shims: { [LAUNCHER]: "examples/runc/main.ts" },
                });
              }
              assert.equal(await serverOf(c, ns, id), pid, "the same shim process");
              const e = await c.ctr(
                ["tasks", "exec", "--exec-id", "back", id, "sh", "-c", "echo back; exit 3"],
                { namespace: ns },
              );
              assert.equal(e.code, 3, describe(e));
              assert.equal(e.stdout.trim(), "back");
              // And the installed good code takes it over as usual.
              const r = await upgradeCommand(bin, c, "--id", id, "--namespace", ns, "--force");
              assert.equal(r.code, 0, r.out);
              assert.equal(await serverOf(c, ns, id), pid, "the same shim process");
              assert.deepEqual(await shimLossLines(c, id), [], "containerd never lost the shim");
              await killAndRemove(c, ns, id);
            },
          );
        }
        await c.stop();
      } finally {
        await k.close();
      }
    },
  );
}
