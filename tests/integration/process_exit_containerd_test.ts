// What containerd's clients rely on when a process exits, checked with containerd's Go runc
// shim (the reference) and skiff's runc shim in the same run, through containerd's gRPC API the
// way its client drives it:
// - stdio EOF at exit: CRI (and containerd's Go client from 1.7 on) read a process's
//   stdout/stderr FIFOs to EOF before they delete the task, so the shim closes its FIFO writers
//   once the process (and whatever shares its pipes or terminal) has exited. FIFOs made and
//   opened by the client, read to EOF, then Wait and Delete.
// - nothing left behind: when a container's init dies, the processes of its pid namespace that
//   were the shim's children (execs) are reaped at once; none lingers as a zombie.
import assert from "node:assert/strict";
import { create, toBinary } from "@bufbuild/protobuf";
import { integrationTest } from "../_integration.ts";
import { containerdVersions, startContainerd } from "../../sdk/testing/containerd.ts";
import { containerdClient } from "../../sdk/testing/containerd_client.ts";
import { createBusyboxBundle, createOciSpec } from "../../sdk/testing/bundle.ts";
import { installExampleShims } from "../../sdk/install/examples.ts";
import { createFifoSet, readFifo } from "../../sdk/testing/fifo_set.ts";
import { processState } from "../../sdk/linux/proc_stat.ts";
import { deadline } from "../_linux_support.ts";
import { OptionsSchema as RuncOptionsSchema } from "../../proto/gen/containerd/runc/v1/oci_pb.ts";

const NS = "skiff-eof";
const SPEC_TYPE = "types.containerd.io/opencontainers/runtime-spec/1/Spec";
const PROCESS_TYPE = "types.containerd.io/opencontainers/runtime-spec/1/Process";
const enc = new TextEncoder();
const dec = new TextDecoder();

/** Children of `pid` across its threads. */
function childrenOf(pid: number): number[] {
  const out: number[] = [];
  try {
    for (const task of Deno.readDirSync(`/proc/${pid}/task`)) {
      const text = Deno.readTextFileSync(`/proc/${pid}/task/${task.name}/children`);
      out.push(...text.split(" ").filter(Boolean).map(Number));
    }
  } catch { /* gone */ }
  return out;
}

/** Pids whose command line has `arg`. */
function withArg(arg: string): number[] {
  const pids: number[] = [];
  for (const e of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(e.name)) continue;
    try {
      const argv = Deno.readTextFileSync(`/proc/${e.name}/cmdline`).split("\0");
      if (argv.includes(arg)) pids.push(Number(e.name));
    } catch { /* gone */ }
  }
  return pids;
}

/** Polls `probe` (every 50 ms, up to 10 s) until it returns `count` items; returns the last. */
async function waitFor(probe: () => number[], count: number): Promise<number[]> {
  let got = probe();
  for (let i = 0; i < 200 && got.length !== count; i++) {
    await new Promise((r) => setTimeout(r, 50));
    got = probe();
  }
  return got;
}

const versions = containerdVersions().filter((v) => /^(1\.6|1\.7|2\.4)\./.test(v.version));
const SHIMS = [
  { name: "Go runc shim", runtime: "io.containerd.runc.v2" },
  { name: "skiff runc shim", runtime: "io.containerd.skiff-runc.v2" },
];

for (const v of versions) {
  integrationTest(
    `process exits under containerd ${v.version} (Go runc shim and skiff): stdio EOF for ` +
      "init, exec, terminal exec, re-attached FIFOs with CloseIO; execs reaped when the init dies",
    {
      root: true,
      binaries: ["runc", "/bin/busybox", `${v.binDir}/containerd-shim-runc-v2`],
    },
    async (t) => {
      const tmp = await Deno.makeTempDir({ prefix: "skiff-eof-" });
      const [skiffRunc] = await installExampleShims({ prefix: tmp });
      const c = await startContainerd({
        binDir: v.binDir,
        extraPath: [skiffRunc.slice(0, skiffRunc.lastIndexOf("/"))],
      });
      const cl = containerdClient(c.address, NS);
      const rootfs = await createBusyboxBundle({ args: ["true"] });
      // runc state in the private containerd's runc root, which stop() cleans up.
      const options = {
        typeUrl: "containerd.runc.v1.Options",
        value: toBinary(RuncOptionsSchema, create(RuncOptionsSchema, { root: c.runcRoot })),
      };
      let n = 0;
      const newContainer = async (runtime: string, args: string[], namespaces?: string[]) => {
        const id = `eof-${++n}`;
        const spec = createOciSpec({ args, ...(namespaces ? { namespaces } : {}) });
        (spec as { root: unknown }).root = { path: `${rootfs.bundle}/rootfs`, readonly: true };
        await cl.containers.create({
          container: {
            id,
            runtime: { name: runtime },
            spec: { typeUrl: SPEC_TYPE, value: enc.encode(JSON.stringify(spec)) },
            labels: {},
            extensions: {},
          },
        });
        return id;
      };
      const remove = async (id: string) => {
        await cl.tasks.kill({ containerId: id, signal: 9, all: true }).catch(() => {});
        await deadline(cl.tasks.wait({ containerId: id }), 20_000, `wait ${id}`).catch(() => {});
        await deadline(cl.tasks.delete({ containerId: id }), 20_000, `delete ${id}`);
        await cl.containers.delete({ id });
      };
      try {
        for (const shim of SHIMS) {
          await t.step(
            `${shim.name}: init stdout/stderr to EOF, then Wait and Delete`,
            async () => {
              const id = await newContainer(shim.runtime, [
                "sh",
                "-c",
                "echo out; echo err >&2; head -c 300000 /dev/zero | tr '\\0' o; exit 3",
              ]);
              const io = await createFifoSet(tmp, id, ["stdout", "stderr"]);
              const out = readFifo(io.stdout);
              const err = readFifo(io.stderr);
              await cl.tasks.create({ containerId: id, ...io, options });
              await cl.tasks.start({ containerId: id });
              const [stdout, stderr] = await deadline(Promise.all([out, err]), 20_000, "stdio EOF");
              assert.equal(stdout, "out\n" + "o".repeat(300_000));
              assert.equal(stderr, "err\n");
              const exit = await deadline(cl.tasks.wait({ containerId: id }), 20_000, "wait");
              assert.equal(exit.exitStatus, 3);
              const deleted = await deadline(
                cl.tasks.delete({ containerId: id }),
                20_000,
                "delete",
              );
              assert.equal(deleted.exitStatus, 3);
              await cl.containers.delete({ id });
            },
          );

          await t.step(`${shim.name}: exec stdio and a terminal exec's output to EOF`, async () => {
            const id = await newContainer(shim.runtime, ["sleep", "600"]);
            try {
              await cl.tasks.create({ containerId: id, options });
              await cl.tasks.start({ containerId: id });
              const cases = [
                {
                  execId: "plain",
                  terminal: false,
                  script: "echo exec-out; echo exec-err >&2; exit 4",
                },
                {
                  execId: "tty",
                  terminal: true,
                  script: "head -c 200000 /dev/zero | tr '\\0' x; exit 5",
                },
              ];
              for (const x of cases) {
                const io = createFifoSet(
                  tmp,
                  `${id}-${x.execId}`,
                  x.terminal ? ["stdout"] : ["stdout", "stderr"],
                );
                const out = readFifo(io.stdout);
                const err = x.terminal ? Promise.resolve("") : readFifo(io.stderr);
                const process = {
                  args: ["sh", "-c", x.script],
                  cwd: "/",
                  env: ["PATH=/bin:/usr/bin"],
                  terminal: x.terminal,
                  user: { uid: 0, gid: 0 },
                };
                await cl.tasks.exec({
                  containerId: id,
                  execId: x.execId,
                  terminal: x.terminal,
                  ...io,
                  spec: { typeUrl: PROCESS_TYPE, value: enc.encode(JSON.stringify(process)) },
                });
                await cl.tasks.start({ containerId: id, execId: x.execId });
                const [stdout, stderr] = await deadline(
                  Promise.all([out, err]),
                  20_000,
                  `EOF of exec ${x.execId}`,
                );
                if (x.terminal) {
                  const longest = Math.max(...(stdout.match(/x+/g) ?? [""]).map((r) => r.length));
                  assert.equal(longest, 200_000, `terminal output of ${stdout.length} chars`);
                } else {
                  assert.equal(stdout, "exec-out\n");
                  assert.equal(stderr, "exec-err\n");
                }
                const exit = await deadline(
                  cl.tasks.wait({ containerId: id, execId: x.execId }),
                  20_000,
                  `wait exec ${x.execId}`,
                );
                assert.equal(exit.exitStatus, x.terminal ? 5 : 4);
                await cl.tasks.deleteProcess({ containerId: id, execId: x.execId });
              }
            } finally {
              await remove(id);
            }
          });

          await t.step(`${shim.name}: re-attached FIFOs, CloseIO: cat sees EOF`, async () => {
            const id = await newContainer(shim.runtime, ["cat"]);
            // containerd's client always hands over all three (the Go shim requires stderr).
            const io = await createFifoSet(tmp, id, ["stdin", "stdout", "stderr"]);
            // The client opens its read ends first (the Go shim's writer open waits for them).
            const firstStdout = Deno.open(io.stdout, { read: true });
            const stderr = readFifo(io.stderr);
            await cl.tasks.create({ containerId: id, ...io, options });
            await cl.tasks.start({ containerId: id });
            // First attachment: write, read the echo, detach (close both ends).
            {
              const stdout = await firstStdout;
              const stdin = await Deno.open(io.stdin, { write: true });
              await stdin.write(enc.encode("one\n"));
              const buf = new Uint8Array(16);
              const got = await deadline(stdout.read(buf), 20_000, "first echo");
              assert.equal(dec.decode(buf.subarray(0, got ?? 0)), "one\n");
              stdin.close();
              stdout.close();
            }
            // The task loaded again by a new client: the same FIFOs re-opened.
            const out = readFifo(io.stdout);
            const stdin = await Deno.open(io.stdin, { write: true });
            await stdin.write(enc.encode("two\n"));
            stdin.close();
            await cl.tasks.closeIO({ containerId: id, stdin: true });
            assert.equal(await deadline(out, 20_000, "EOF after CloseIO"), "two\n");
            assert.equal(await deadline(stderr, 20_000, "stderr EOF"), "");
            const exit = await deadline(cl.tasks.wait({ containerId: id }), 20_000, "wait cat");
            assert.equal(exit.exitStatus, 0);
            await deadline(cl.tasks.delete({ containerId: id }), 20_000, "delete");
            await cl.containers.delete({ id });
          });

          await t.step(`${shim.name}: the init killed, its execs reaped at once`, async () => {
            const id = await newContainer(shim.runtime, ["sh", "-c", "sleep 600 & sleep 600"]);
            await cl.tasks.create({ containerId: id, options });
            await cl.tasks.start({ containerId: id });
            const process = {
              args: ["sleep", "600"],
              cwd: "/",
              env: ["PATH=/bin:/usr/bin"],
              user: { uid: 0, gid: 0 },
            };
            for (const execId of ["x1", "x2"]) {
              await cl.tasks.exec({
                containerId: id,
                execId,
                spec: { typeUrl: PROCESS_TYPE, value: enc.encode(JSON.stringify(process)) },
              });
              await cl.tasks.start({ containerId: id, execId });
            }
            const shimPids = c.shims().map((s) => s.pid);
            await cl.tasks.kill({ containerId: id, signal: 9 });
            const exit = await deadline(cl.tasks.wait({ containerId: id }), 20_000, "init exit");
            assert.equal(exit.exitStatus, 137);
            // Right after the exit: the shim has no zombie children, and the execs are gone.
            const zombies = shimPids.flatMap((pid) =>
              childrenOf(pid).filter((child) => processState(child) === "Z")
            );
            assert.deepEqual(zombies, [], `zombie children of the shim (${shimPids})`);
            for (const execId of ["x1", "x2"]) {
              const st = await cl.tasks.get({ containerId: id, execId });
              assert.equal(processState(st.process!.pid), undefined, `exec ${execId} still exists`);
            }
            await deadline(cl.tasks.delete({ containerId: id }), 20_000, "delete");
            await cl.containers.delete({ id });
          });

          await t.step(
            `${shim.name}: the init of a host-pid container killed, its orphans too`,
            async () => {
              // No pid namespace of its own: the background sleeps outlive the init unless the
              // shim kills them, and then become the shim's children to reap.
              // A sleep duration no other process on the host uses tells the sleeps apart.
              const marker = String(100_000 + Math.floor(Math.random() * 800_000));
              const cid = await newContainer(
                shim.runtime,
                ["sh", "-c", `sleep ${marker} & sleep ${marker} & exec sleep 600`],
                ["ipc", "uts", "mount"],
              );
              await cl.tasks.create({ containerId: cid, options });
              await cl.tasks.start({ containerId: cid });
              const orphans = await waitFor(() => withArg(marker), 2);
              assert.equal(orphans.length, 2, `the container's background sleeps: ${orphans}`);
              await cl.tasks.kill({ containerId: cid, signal: 9 });
              const exit = await deadline(cl.tasks.wait({ containerId: cid }), 20_000, "init exit");
              assert.equal(exit.exitStatus, 137);
              const left = await waitFor(
                () => orphans.filter((pid) => processState(pid) !== undefined),
                0,
              );
              assert.deepEqual(left, [], "the init's orphans are killed and reaped");
              await deadline(cl.tasks.delete({ containerId: cid }), 20_000, "delete");
              await cl.containers.delete({ id: cid });
            },
          );
        }
      } finally {
        await c.stop();
        await rootfs.cleanup();
        await Deno.remove(tmp, { recursive: true }).catch(() => {});
      }
    },
  );
}
