// The server's processes as a live upgrade carries them (sdk/shim/server/carry.ts): what is
// carried, what is refused and why, and that the next code's process is the same one.
import assert from "node:assert/strict";
import { ShimProcess } from "../../../../sdk/shim/server/process.ts";
import {
  adoptProcess,
  carriedDescriptors,
  carryProcess,
} from "../../../../sdk/shim/server/carry.ts";
import type { ProcessIoHandle } from "../../../../sdk/shim/server/process.ts";

const stdio = { stdin: "", stdout: "/run/x/out", stderr: "/run/x/err", terminal: false };

function io(carry: () => unknown): ProcessIoHandle {
  return {
    closeStdin: () => Promise.resolve(),
    drain: () => Promise.resolve(),
    close: () => Promise.resolve(),
    carry: carry as ProcessIoHandle["carry"],
  };
}

Deno.test("carryProcess: a running process with its pid, start time, state and stdio; adoptProcess takes it back", async () => {
  const p = new ShimProcess("web", "e1", stdio, { args: ["sh"] });
  p.started({ pid: 4242 }, 777);
  p.markStarted();
  p.attachIo(io(() => ({ stdout: { sink: 20, pipe: 22 } })));
  const carried = carryProcess(p);
  assert.deepEqual(carried, {
    execId: "e1",
    stdio,
    spec: { args: ["sh"] },
    pid: 4242,
    startTime: 777,
    state: "running",
    io: { stdout: { sink: 20, pipe: 22 } },
  });
  const adopted: unknown[] = [];
  const back = adoptProcess("web", JSON.parse(JSON.stringify(carried)), {
    adoptIo: (c) => (adopted.push(c), io(() => c)),
  });
  assert.equal(back.pid, 4242);
  assert.equal(back.startTime, 777);
  assert.equal(back.state, "running");
  assert.equal(back.describe(), p.describe());
  assert.deepEqual(adopted, [{ stdout: { sink: 20, pipe: 22 } }]);
  assert.equal(back.exit, undefined);
  // Its exit is still to come, and is delivered to it as to any running process.
  back.markExited({ status: 3, exitedAt: new Date(0) });
  assert.equal((await back.exited).status, 3);
});

Deno.test("carryProcess: an exited process keeps its status and time and carries no stdio", async () => {
  const p = new ShimProcess("web", "", stdio);
  p.started({ pid: 10 }, 1);
  p.attachIo(io(() => assert.fail("the stdio of an exited process is not carried")));
  const at = new Date("2026-12-05T12:00:00.000Z");
  p.markExited({ status: 137, exitedAt: at });
  const carried = carryProcess(p);
  assert.deepEqual(carried.exit, { status: 137, exitedAt: at.toISOString() });
  assert.equal(carried.io, undefined);
  const back = adoptProcess("web", carried, {});
  assert.equal(back.state, "stopped");
  assert.deepEqual(await back.exited, { status: 137, exitedAt: at });
});

Deno.test("carryProcess refuses, naming the process: an exit the runtime reports, stdio that cannot be carried", () => {
  const vm = new ShimProcess("vm", "", stdio);
  vm.started({ pid: 1, exited: new Promise(() => {}) }, undefined);
  assert.throws(
    () => carryProcess(vm, {}),
    /container "vm": its exit is reported by a runtime that cannot report it again/,
  );

  const tty = new ShimProcess("web", "sh", { ...stdio, terminal: true });
  tty.started({ pid: 2 }, 1);
  tty.markStarted();
  tty.attachIo(io(() => {
    throw new Error("a terminal's stdio is not carried across a live upgrade yet");
  }));
  assert.throws(() => carryProcess(tty), /exec "sh" of container "web": a terminal's stdio/);

  const bare = new ShimProcess("web", "x", stdio);
  bare.started({ pid: 3 }, 1);
  bare.markStarted();
  bare.attachIo({
    closeStdin: () => Promise.resolve(),
    drain: () => Promise.resolve(),
    close: () => Promise.resolve(),
  });
  assert.throws(() => carryProcess(bare), /its stdio cannot be carried/);
  assert.throws(
    () => adoptProcess("web", { execId: "", stdio, pid: 1, state: "running", io: {} }, {}),
    /cannot adopt carried stdio/,
  );
});

Deno.test("carriedDescriptors: every stdio and runtime descriptor of every process, once, in order; nothing else", () => {
  const base = { stdio, state: "running" as const };
  assert.deepEqual(
    carriedDescriptors([{
      id: "web",
      namespace: "default",
      bundle: "/b",
      options: {},
      rootfsMounted: true,
      init: {
        ...base,
        execId: "",
        pid: 1,
        io: { stdout: { sink: 9, pipe: 11 }, stderr: { sink: 9 } },
      },
      execs: [{
        ...base,
        execId: "e",
        pid: 2,
        io: {
          stdin: { fifo: 30, keepAlive: 31, pipe: 32 },
          stdout: { sink: 33 },
          stderr: { sink: 34 },
          // A binary:// logger: its pid, start time and timeout are no descriptors.
          logger: { path: "/l", pid: 5000, startTime: 6000, dir: "/tmp/l", exitTimeoutMs: 7000 },
        },
        runtimeCarry: { descriptors: { waitOutput: 35 }, data: { pid: 8000 } },
      }, {
        ...base,
        execId: "tty",
        pid: 3,
        io: { pty: 40, stdin: { fifo: 41 }, stdout: { sink: 42 } },
      }],
    }]),
    [9, 11, 30, 31, 32, 33, 34, 35, 40, 41, 42],
  );
});

Deno.test("a process whose exit the runtime reports is carried when the runtime can report it again", async () => {
  const p = new ShimProcess("sub", "", stdio);
  p.started({ pid: 7, exited: new Promise(() => {}) }, undefined);
  p.markStarted();
  const asked: unknown[] = [];
  const runtime = {
    resumeProcess: (id: string, q: { execId: string; pid: number; created: boolean }) => {
      asked.push([id, q]);
      return { pid: q.pid, exited: Promise.resolve(9) };
    },
  };
  const carried = carryProcess(p, runtime);
  assert.equal(carried.runtimeExit, true);
  const back = adoptProcess("sub", carried, {}, runtime);
  assert.deepEqual(asked, [["sub", { execId: "", pid: 7, created: false }]]);
  assert.equal(await back.runtime?.exited, 9, "the new report is the process's");
  assert.throws(() => adoptProcess("sub", carried, {}), /cannot report its exit again/);
});
