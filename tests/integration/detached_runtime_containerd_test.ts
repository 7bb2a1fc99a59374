/**
 * The runtime seam with a second kind of runtime: tests/fixtures/detached_runtime, a shim whose
 * container processes are not its children but those of an agent, a daemon the test starts on
 * its own (in its own session). The shim reports the agent's pids, takes exits from
 * `RuntimeProcess.exited`, signals execs through `RuntimeProcess.kill` and moves stdio over
 * the agent's sockets (`RuntimeStdio.streams()`), with the base's Task service unchanged.
 *
 * Driven by real containerd 1.6 and 2.4 through its gRPC API (the testing kit's client, as CRI
 * and containerd's own client drive it) and through `ctr run`: exit status and TaskExit, init
 * and exec stdio, exec exit codes, SIGTERM of an exec, SIGKILL of the init (and of an exec it
 * leaves running), pids, delete, a SIGKILLed shim server (containerd's `delete` action cleans
 * up at the agent). Each container process is checked to descend from the agent and not from
 * the shim, and nothing is left afterwards (the agent's processes, connections and socket, the
 * shims and their sockets). The fixture holds each output chunk back 500 ms, so an exit that
 * went out before its output (ctr's Delete then closes its FIFOs: the output is lost) fails.
 */
import assert from "node:assert/strict";
import { fromBinary } from "@bufbuild/protobuf";
import { exists, integrationTest } from "../_integration.ts";
import { deadline } from "../_linux_support.ts";
import { containerdVersions, startContainerd } from "../../sdk/testing/containerd.ts";
import { containerdClient } from "../../sdk/testing/containerd_client.ts";
import { createBusyboxBundle, createOciSpec } from "../../sdk/testing/bundle.ts";
import { createFifoSet, readFifo } from "../../sdk/testing/fifo_set.ts";
import { EventRecorder } from "../../sdk/testing/conformance/events.ts";
import { ctrRun } from "../../sdk/testing/ctr.ts";
import { installExampleShims } from "../../sdk/install/examples.ts";
import { ADDRESS_FILE, socketPath } from "../../sdk/shim/contract/socket_address.ts";
import { processAlive } from "../../sdk/linux/proc_stat.ts";
import { ProcessDetailsSchema } from "../../proto/gen/containerd/runc/v1/oci_pb.ts";
import { Status } from "../../proto/gen/containerd/types/task/task_pb.ts";
import { agentStatus, startAgent } from "../fixtures/detached_runtime/daemon.ts";

const RUNTIME = "io.containerd.skiff-detached.v1";
const LAUNCHER = "containerd-shim-skiff-detached-v1";
const NS = "skiff-detached";
const SPEC_TYPE = "types.containerd.io/opencontainers/runtime-spec/1/Spec";
const PROCESS_TYPE = "types.containerd.io/opencontainers/runtime-spec/1/Process";
/** Generous bound for what must happen eventually (a busy machine is not a failure). */
const MS = 60_000;
const enc = new TextEncoder();

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Polls `probe` until it returns a value other than undefined; fails after {@link MS}. */
async function eventually<V>(what: string, probe: () => Promise<V | undefined>): Promise<V> {
  const until = Date.now() + MS;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > until) throw new Error(`gave up waiting for ${what}`);
    await sleep(50);
  }
}

/** The parent of `pid` (from /proc/<pid>/status), undefined once it is gone. */
function parentOf(pid: number): number | undefined {
  try {
    const m = Deno.readTextFileSync(`/proc/${pid}/status`).match(/^PPid:\s*(\d+)$/m);
    return m ? Number(m[1]) : undefined;
  } catch {
    return undefined;
  }
}

/** `pid`'s ancestors, nearest first, up to pid 1. */
function ancestorsOf(pid: number): number[] {
  const out: number[] = [];
  for (let p = parentOf(pid); p !== undefined && p > 0; p = parentOf(p)) {
    out.push(p);
    if (p === 1) break;
  }
  return out;
}

/** The command line of `pid`, "" once it is gone. */
function cmdlineOf(pid: number): string {
  try {
    return Deno.readTextFileSync(`/proc/${pid}/cmdline`).split("\0").join(" ").trim();
  } catch {
    return "";
  }
}

/** Waits until `pid` runs `command`: the agent's shell execs it, keeping the pid it reported. */
async function runs(pid: number, command: string): Promise<void> {
  await eventually(
    `pid ${pid} to run "${command}"`,
    () => Promise.resolve(cmdlineOf(pid) === command ? true : undefined),
  ).catch((e) => {
    throw new Error(`${(e as Error).message}: it runs "${cmdlineOf(pid)}"`);
  });
}

const VERSIONS = containerdVersions().filter((v) => /^(1\.6|2\.4)\./.test(v.version));
if (VERSIONS.length === 0) {
  integrationTest(
    "detached runtime under containerd",
    { check: () => "containerd 1.6 or 2.4 (bash tests/setup/prepare.sh)" },
    () => Promise.resolve(),
  );
}
for (const v of VERSIONS) {
  integrationTest(
    `detached runtime under containerd ${v.version}: a shim whose processes are an agent's ` +
      "(exits, signals and stdio through the seam), driven through the Task API",
    { root: true, binaries: ["setsid", "chroot", "busybox"] },
    async (t) => {
      const tmp = await Deno.makeTempDir({ prefix: "skiff-detached-" });
      // Undone in reverse, whatever failed: nothing this test started outlives it.
      const undo: (() => unknown)[] = [() => Deno.remove(tmp, { recursive: true }).catch(() => {})];
      try {
        const [launcher] = await installExampleShims({
          prefix: tmp,
          shims: { [LAUNCHER]: "tests/fixtures/detached_runtime/shim.ts" },
          spare: false,
        });
        const agent = await startAgent(tmp, MS);
        undo.push(async () => {
          // SIGTERM first: the agent then kills what it still runs; SIGKILL would orphan it.
          const signal = (name: Deno.Signal) => {
            try {
              Deno.kill(agent.pid, name);
            } catch { /* stopped already */ }
          };
          signal("SIGTERM");
          await deadline(agent.child.status, 10_000, "the agent's exit").catch(() => {
            signal("SIGKILL");
          });
          await agent.child.status;
        });
        const c = await startContainerd({
          binDir: v.binDir,
          extraPath: [launcher.slice(0, launcher.lastIndexOf("/"))],
          // Output lags its exit report by 500 ms, as a VM agent's may: every step's output
          // must still reach its client (the exit waits for it).
          env: { SKIFF_DETACHED_AGENT: agent.socket, SKIFF_DETACHED_OUTPUT_LAG_MS: "500" },
        });
        undo.push(() => c.stop());
        const cl = containerdClient(c.address, NS);
        const events = await EventRecorder.open(cl, NS, MS);
        undo.push(() => events.close());
        const rootfs = await createBusyboxBundle({ args: ["true"] });
        undo.push(() => rootfs.cleanup());
        /** Every container process the agent ran for a test, checked gone at the end. */
        const seen: number[] = [];
        /** The shims' pids and sockets, checked gone at the end. */
        const shims: { pid: number; socket: string }[] = [];
        let n = 0;
        const newContainer = async (args: string[]) => {
          const id = `detached-${++n}`;
          const spec = createOciSpec({ args });
          (spec as { root: unknown }).root = { path: `${rootfs.bundle}/rootfs`, readonly: true };
          await cl.containers.create({
            container: {
              id,
              runtime: { name: RUNTIME },
              spec: { typeUrl: SPEC_TYPE, value: enc.encode(JSON.stringify(spec)) },
              labels: {},
              extensions: {},
            },
          });
          return id;
        };
        /** The shim serving `id`, from its bundle (while the task exists). */
        const shimOf = async (id: string) => {
          const bundle = `${c.state}/io.containerd.runtime.v2.task/${NS}/${id}`;
          const shim = {
            pid: Number(await Deno.readTextFile(`${bundle}/shim.pid`)),
            socket: socketPath((await Deno.readTextFile(`${bundle}/${ADDRESS_FILE}`)).trim()),
          };
          assert.ok(processAlive(shim.pid), `the shim of ${id} (pid ${shim.pid}) runs`);
          assert.ok(await exists(shim.socket), `the shim's socket ${shim.socket}`);
          shims.push(shim);
          return shim;
        };
        /** Asserts `pid` is the agent's process and not the shim's (its PPid chain). */
        const assertDetached = (pid: number, shimPid: number, what: string) => {
          seen.push(pid);
          const chain = ancestorsOf(pid);
          assert.equal(chain[0], agent.pid, `${what} (pid ${pid}) is the agent's child: ${chain}`);
          assert.ok(
            !chain.includes(shimPid),
            `${what} (pid ${pid}) descends from the shim ${shimPid}: ${chain}`,
          );
          assert.ok(chain.includes(1), `${what}'s chain reaches pid 1: ${chain}`);
        };
        const execSpec = (args: string[]) => ({
          typeUrl: PROCESS_TYPE,
          value: enc.encode(JSON.stringify({
            args,
            cwd: "/",
            env: ["PATH=/bin:/usr/bin"],
            user: { uid: 0, gid: 0 },
          })),
        });
        await t.step(
          "an init's stdout and stderr captured, its exit 7 in Wait, TaskExit and Delete",
          async () => {
            const id = await newContainer(["sh", "-c", "echo out $$; echo err >&2; exit 7"]);
            const io = createFifoSet(tmp, id, ["stdout", "stderr"]);
            const out = readFifo(io.stdout);
            const err = readFifo(io.stderr);
            const created = await cl.tasks.create({ containerId: id, ...io });
            assert.ok(created.pid > 0, `create's pid ${created.pid}`);
            const shim = await shimOf(id);
            // Stopped until Start, under the agent.
            assertDetached(created.pid, shim.pid, "the created init");
            await cl.tasks.start({ containerId: id });
            const [stdout, stderr] = await deadline(Promise.all([out, err]), MS, "stdio EOF");
            // `$$` is the host pid the shim reported: no pid namespace at the agent.
            assert.equal(stdout, `out ${created.pid}\n`);
            assert.equal(stderr, "err\n");
            const exit = await deadline(cl.tasks.wait({ containerId: id }), MS, "wait");
            assert.equal(exit.exitStatus, 7);
            const ev = await events.until(
              (e) => e.topic === "/tasks/exit" && e.containerId === id,
              "TaskExit",
            );
            assert.equal(ev.exitStatus, 7);
            assert.equal(ev.id, id);
            const deleted = await deadline(cl.tasks.delete({ containerId: id }), MS, "delete");
            assert.equal(deleted.exitStatus, 7);
            assert.equal(deleted.pid, created.pid);
            await cl.containers.delete({ id });
            await events.until(
              (e) => e.topic === "/tasks/delete" && e.containerId === id,
              "TaskDelete",
            );
            assert.deepEqual(
              events.of(id).map((e) => e.topic),
              ["/tasks/create", "/tasks/start", "/tasks/exit", "/tasks/delete"],
            );
          },
        );

        await t.step(
          "a running container: exec stdio round trip, exit codes, pids, SIGTERM of an exec, SIGKILL of the init and its exec",
          async () => {
            const id = await newContainer(["sleep", "600"]);
            const created = await cl.tasks.create({ containerId: id });
            await cl.tasks.start({ containerId: id });
            const shim = await shimOf(id);
            const init = await cl.tasks.get({ containerId: id });
            assert.equal(init.process?.status, Status.RUNNING);
            assert.equal(init.process?.pid, created.pid);
            await runs(created.pid, "sleep 600");
            assertDetached(created.pid, shim.pid, "the init");

            // An exec that reads stdin to EOF (CloseIO), echoes it, and exits 5.
            const payload = Array.from(
              { length: 4096 },
              (_, i) => `line ${i} of the exec's stdin\n`,
            ).join("");
            const io = createFifoSet(tmp, `${id}-cat`, ["stdin", "stdout", "stderr"]);
            const out = readFifo(io.stdout);
            const err = readFifo(io.stderr);
            await cl.tasks.exec({
              containerId: id,
              execId: "cat",
              ...io,
              spec: execSpec(["sh", "-c", "cat; echo done >&2; exit 5"]),
            });
            const started = await cl.tasks.start({ containerId: id, execId: "cat" });
            assertDetached(started.pid, shim.pid, "the exec");
            const stdin = await Deno.open(io.stdin, { write: true });
            await stdin.write(enc.encode(payload));
            stdin.close();
            await cl.tasks.closeIO({ containerId: id, execId: "cat", stdin: true });
            const [stdout, stderr] = await deadline(
              Promise.all([out, err]),
              MS,
              "the exec's stdio EOF",
            );
            assert.equal(stdout.length, payload.length);
            assert.equal(stdout, payload);
            assert.equal(stderr, "done\n");
            const catExit = await deadline(
              cl.tasks.wait({ containerId: id, execId: "cat" }),
              MS,
              "wait exec",
            );
            assert.equal(catExit.exitStatus, 5);
            const catEv = await events.until(
              (e) => e.topic === "/tasks/exit" && e.id === "cat",
              "the exec's TaskExit",
            );
            assert.equal(catEv.exitStatus, 5);
            const catDeleted = await cl.tasks.deleteProcess({ containerId: id, execId: "cat" });
            assert.equal(catDeleted.exitStatus, 5);

            // A long-running exec: listed by pid with its exec id, then SIGTERMed.
            await cl.tasks.exec({
              containerId: id,
              execId: "sleeper",
              spec: execSpec(["sleep", "601"]),
            });
            const sleeper = await cl.tasks.start({ containerId: id, execId: "sleeper" });
            assertDetached(sleeper.pid, shim.pid, "the sleeper exec");
            await runs(sleeper.pid, "sleep 601");
            const pids = await cl.tasks.listPids({ containerId: id });
            const listed = pids.processes.map((p) => ({
              pid: p.pid,
              execId: p.info ? fromBinary(ProcessDetailsSchema, p.info.value).execId : "",
            }));
            assert.deepEqual(
              listed.sort((a, b) => a.pid - b.pid),
              [{ pid: created.pid, execId: "" }, { pid: sleeper.pid, execId: "sleeper" }]
                .sort((a, b) => a.pid - b.pid),
            );
            await cl.tasks.kill({ containerId: id, execId: "sleeper", signal: 15 });
            const term = await deadline(
              cl.tasks.wait({ containerId: id, execId: "sleeper" }),
              MS,
              "wait sleeper",
            );
            assert.equal(term.exitStatus, 143);
            const termEv = await events.until(
              (e) => e.topic === "/tasks/exit" && e.id === "sleeper",
              "the sleeper's TaskExit",
            );
            assert.equal(termEv.exitStatus, 143);
            assert.equal(processAlive(sleeper.pid), false, "the SIGTERMed exec is gone");
            // A finished exec cannot be signalled again: NotFound, as containerd expects.
            await assert.rejects(
              cl.tasks.kill({ containerId: id, execId: "sleeper", signal: 15 }),
              /not found|already finished/i,
            );
            await cl.tasks.deleteProcess({ containerId: id, execId: "sleeper" });
            // The exec's signal went through RuntimeProcess.kill to the agent: the shim
            // could have signalled that host pid itself, and must not.
            const signalled = (await agentStatus(agent.socket)).signalled;
            assert.ok(signalled.includes(`${id}/sleeper 15`), `the agent's signals: ${signalled}`);

            // An exec still running when the init dies is killed with it (kill all, through
            // the agent), and its exit comes first.
            await cl.tasks.exec({
              containerId: id,
              execId: "survivor",
              spec: execSpec(["sleep", "602"]),
            });
            const survivor = await cl.tasks.start({ containerId: id, execId: "survivor" });
            assertDetached(survivor.pid, shim.pid, "the survivor exec");
            await cl.tasks.kill({ containerId: id, signal: 9 });
            const killed = await deadline(cl.tasks.wait({ containerId: id }), MS, "wait init");
            assert.equal(killed.exitStatus, 137);
            const gone = await deadline(
              cl.tasks.wait({ containerId: id, execId: "survivor" }),
              MS,
              "wait survivor",
            );
            assert.equal(gone.exitStatus, 137);
            assert.equal(processAlive(survivor.pid), false, "the survivor is gone");
            const all = (await agentStatus(agent.socket)).signalled;
            assert.ok(all.includes(`${id}/ 9`), `the agent's signals: ${all}`);
            assert.ok(all.includes(`${id}/* 9`), `the agent's signals: ${all}`);
            const killEv = await events.until(
              (e) => e.topic === "/tasks/exit" && e.id === id,
              "the init's TaskExit",
            );
            assert.equal(killEv.exitStatus, 137);
            const deleted = await deadline(cl.tasks.delete({ containerId: id }), MS, "delete");
            assert.equal(deleted.exitStatus, 137);
            await cl.containers.delete({ id });
            await events.until(
              (e) => e.topic === "/tasks/delete" && e.containerId === id,
              "TaskDelete",
            );
            // Every exec's exit before the init's; an exec's delete publishes nothing.
            assert.deepEqual(events.of(id).map((e) => `${e.topic} ${e.id}`), [
              `/tasks/create ${id}`,
              `/tasks/start ${id}`,
              "/tasks/exec-added cat",
              "/tasks/exec-started cat",
              "/tasks/exit cat",
              "/tasks/exec-added sleeper",
              "/tasks/exec-started sleeper",
              "/tasks/exit sleeper",
              "/tasks/exec-added survivor",
              "/tasks/exec-started survivor",
              "/tasks/exit survivor",
              `/tasks/exit ${id}`,
              `/tasks/delete ${id}`,
            ]);
          },
        );

        await t.step(
          "ctr run: the output through the agent, exit 7 (ctr's own client, an image's rootfs)",
          async () => {
            const image = await c.importBusyboxImage(NS);
            const r = await ctrRun(c, {
              image,
              id: "detached-ctr",
              namespace: NS,
              runtime: RUNTIME,
              args: ["sh", "-c", "echo through ctr; exit 7"],
              timeoutMs: 120_000,
            });
            assert.equal(r.code, 7, `ctr run: ${JSON.stringify(r)}`);
            assert.equal(r.stdout, "through ctr\n");
            const ev = await events.until(
              (e) => e.topic === "/tasks/exit" && e.containerId === "detached-ctr",
              "ctr's TaskExit",
            );
            assert.equal(ev.exitStatus, 7);
          },
        );

        await t.step(
          "the shim server SIGKILLed: containerd's `delete` action deletes the container at the agent",
          async () => {
            const id = await newContainer(["sleep", "603"]);
            const created = await cl.tasks.create({ containerId: id });
            await cl.tasks.start({ containerId: id });
            const shim = await shimOf(id);
            await runs(created.pid, "sleep 603");
            assertDetached(created.pid, shim.pid, "the init");
            // The agent's process outlives the shim: only the runtime's delete, which
            // containerd runs through `<shim> delete`, can end it.
            Deno.kill(shim.pid, "SIGKILL");
            const ev = await events.until(
              (e) => e.topic === "/tasks/exit" && e.containerId === id,
              "the TaskExit containerd publishes for a dead shim",
            );
            assert.equal(ev.exitStatus, 137);
            await eventually(
              `the init ${created.pid} to be killed at the agent`,
              () => Promise.resolve(processAlive(created.pid) ? undefined : true),
            );
            assert.ok(
              !(await agentStatus(agent.socket)).containers.includes(id),
              "the agent forgot the container",
            );
            await cl.tasks.delete({ containerId: id }).catch((e) => {
              if (!/not found/i.test(String(e))) throw e;
            });
            await cl.containers.delete({ id });
          },
        );

        await t.step(
          "nothing is left: the agent's processes and connections, the shims and their sockets",
          async () => {
            const held = await eventually("the agent to let go", async () => {
              const s = await agentStatus(agent.socket);
              return s.containers.length === 0 && s.live.length === 0 && s.connections === 0
                ? s
                : undefined;
            }).catch(async (e) => {
              throw new Error(
                `${(e as Error).message}: ${JSON.stringify(await agentStatus(agent.socket))}`,
              );
            });
            assert.deepEqual(
              { ...held, signalled: [] },
              { containers: [], live: [], connections: 0, signalled: [] },
            );
            // The three inits and three execs whose ancestry the steps above checked.
            assert.equal(seen.length, 6, `container processes checked: ${seen}`);
            for (const pid of seen) {
              assert.equal(processAlive(pid), false, `container process ${pid} is gone`);
            }
            for (const s of shims) {
              await eventually(
                `shim ${s.pid} to exit`,
                () => Promise.resolve(processAlive(s.pid) ? undefined : true),
              );
              assert.equal(await exists(s.socket), false, `shim socket ${s.socket} removed`);
            }
            // The agent, stopped, removes its socket.
            Deno.kill(agent.pid, "SIGTERM");
            const status = await deadline(agent.child.status, MS, "the agent's exit");
            assert.equal(status.code, 0, await Deno.readTextFile(agent.log));
            assert.equal(await exists(agent.socket), false, "the agent's socket removed");
          },
        );
      } finally {
        for (const u of undo.reverse()) {
          await Promise.resolve().then(u).catch((e) => console.error("cleanup failed:", e));
        }
      }
    },
  );
}
