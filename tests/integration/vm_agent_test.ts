// The VM runtime's guest agent (examples/vm/agent), run on the host over a unix socket with the
// host's runc: the agent's own behaviour (create/start/stdio/wait/exec/ps/stats/kill/delete)
// without a VM, so that it is quick to test. tests/external/vm_guest_test.ts runs it in a real VM.
import assert from "node:assert/strict";
import { Code, type ConnectError } from "@connectrpc/connect";
import { connectAgent, readToEnd, waitForAgent } from "../../examples/vm/client.ts";
import { createBusyboxBundle, createOciSpec } from "../../sdk/testing/bundle.ts";
import { integrationTest } from "../_integration.ts";

const AGENT = new URL("../../examples/vm/agent/main.ts", import.meta.url).pathname;
const text = (b: Uint8Array) => new TextDecoder().decode(b);
const bytes = (s: string) => new TextEncoder().encode(s);

/** The agent on the host, serving `socket`, its state under `dir`. */
function spawnAgent(dir: string, socket: string): Deno.ChildProcess {
  return new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", AGENT, "--listen", socket, "--state", `${dir}/state`],
    stdin: "null",
    stdout: "inherit",
    stderr: "inherit",
  }).spawn();
}

integrationTest(
  "vm agent on the host: a container's stdio and exit 7, an exec, ps, stats, kill, delete",
  { root: true, binaries: ["runc"] },
  async () => {
    const dir = await Deno.makeTempDir({ prefix: "skiff-vm-agent-" });
    const socket = `${dir}/agent.sock`;
    const agentProc = spawnAgent(dir, socket);
    const one = await createBusyboxBundle({
      dir: `${dir}/one`,
      args: ["sh", "-c", "read x; echo got:$x; echo oops >&2; exit 7"],
    });
    const two = await createBusyboxBundle({ dir: `${dir}/two`, args: ["sleep", "1000"] });
    let conn;
    try {
      const ready = await waitForAgent(socket, 60_000);
      conn = ready.connection;
      assert.equal(ready.ping.version, "0.1.0");
      const agent = conn.agent;
      const all = { stdin: true, stdout: true, stderr: true };

      // One: stdin in, stdout and stderr out, exit 7.
      const pid = (await agent.create({ containerId: "one", bundle: one.bundle, stdio: all })).pid;
      assert.ok(pid > 0);
      await assert.rejects(
        agent.create({ containerId: "one", bundle: one.bundle, stdio: all }),
        (e: ConnectError) => e.code === Code.AlreadyExists,
      );
      await agent.start({ containerId: "one" });
      const out = readToEnd(agent, "stdout", "one");
      const err = readToEnd(agent, "stderr", "one");
      assert.equal(
        (await agent.writeStdin({ containerId: "one", data: bytes("world\n") })).written,
        6,
      );
      await agent.closeStdin({ containerId: "one" });
      assert.equal(text(await out), "got:world\n");
      assert.equal(text(await err), "oops\n");
      const waited = await agent.wait({ containerId: "one" });
      assert.equal(waited.exitStatus, 7);
      assert.equal(waited.pid, pid);
      assert.ok(waited.exitedAt);
      const deleted = await agent.delete({ containerId: "one" });
      assert.equal(deleted.exitStatus, 7);
      await assert.rejects(
        agent.wait({ containerId: "one" }),
        (e: ConnectError) => e.code === Code.NotFound,
      );

      // Two: a long-running init, an exec in it, ps, stats, pause/resume, kill.
      const initPid = (await agent.create({ containerId: "two", bundle: two.bundle, stdio: {} }))
        .pid;
      await agent.start({ containerId: "two" });
      const process = createOciSpec({ args: ["sh", "-c", "echo in-exec; exit 3"] }).process;
      const execPid = (await agent.exec({
        containerId: "two",
        execId: "e1",
        process: bytes(JSON.stringify(process)),
        stdio: { stdout: true },
      })).pid;
      assert.ok(execPid > 0 && execPid !== initPid);
      assert.equal(text(await readToEnd(agent, "stdout", "two", "e1")), "in-exec\n");
      assert.equal((await agent.wait({ containerId: "two", execId: "e1" })).exitStatus, 3);
      assert.ok((await agent.ps({ containerId: "two" })).pids.includes(initPid));
      const stats = await agent.stats({ containerId: "two" });
      assert.match(stats.stats?.typeUrl ?? "", /^io\.containerd\.cgroups\.v[12]\.Metrics$/);
      await agent.pause({ containerId: "two" });
      await agent.resume({ containerId: "two" });
      await assert.rejects(
        agent.delete({ containerId: "two" }),
        (e: ConnectError) => e.code === Code.FailedPrecondition,
      );
      await agent.kill({ containerId: "two", signal: 9 });
      assert.equal((await agent.wait({ containerId: "two" })).exitStatus, 137);
      await agent.delete({ containerId: "two" });

      // A runc failure names what failed.
      await assert.rejects(
        agent.create({ containerId: "bad", bundle: `${dir}/nowhere`, stdio: {} }),
        (e: ConnectError) => e.code === Code.Internal && e.message.includes("runc create bad"),
      );
      await agent.shutdown({});
      assert.equal((await agentProc.status).code, 0);
    } finally {
      await conn?.close();
      try {
        agentProc.kill("SIGKILL");
      } catch { /* exited */ }
      await agentProc.status;
      await one.cleanup();
      await two.cleanup();
      await Deno.remove(dir, { recursive: true });
    }
  },
);

integrationTest(
  "vm agent on the host: Release answers pending reads, Wait and OomEvent at once, taking nothing",
  { root: true, binaries: ["runc"] },
  async () => {
    const dir = await Deno.makeTempDir({ prefix: "skiff-vm-agent-release-" });
    const socket = `${dir}/agent.sock`;
    const agentProc = spawnAgent(dir, socket);
    // Its stdout ends in the middle of the sleep only if a read took bytes it did not return.
    const late = await createBusyboxBundle({
      dir: `${dir}/late`,
      args: ["sh", "-c", "echo early; sleep 3; echo late; exit 6"],
    });
    let conn;
    let other;
    try {
      conn = (await waitForAgent(socket, 60_000)).connection;
      const agent = conn.agent;
      const id = { containerId: "late" };
      await agent.create({ ...id, bundle: late.bundle, stdio: { stdout: true, stderr: true } });
      await agent.start(id);
      assert.equal(text((await agent.readStdout(id)).data), "early\n");

      // Four long polls held by the agent while the process sleeps.
      const out = agent.readStdout(id);
      const err = agent.readStderr(id);
      const wait = agent.wait(id);
      const oom = agent.oomEvent({});
      await new Promise((r) => setTimeout(r, 500));
      // Released from another connection: the agent answers the polls of every connection.
      other = connectAgent(socket);
      const started = performance.now();
      const release = await other.agent.release({});
      const [o, e, w, m] = await Promise.all([out, err, wait, oom]);
      const ms = performance.now() - started;
      assert.equal(release.released, 4);
      assert.ok(
        ms < 1_500,
        `the polls answered ${Math.round(ms)} ms after Release (the sleep: 3 s)`,
      );
      assert.deepEqual([o.data.length, o.eof], [0, false], "stdout: nothing, not the end");
      assert.deepEqual([e.data.length, e.eof], [0, false], "stderr: nothing, not the end");
      assert.equal(w.released, true);
      assert.equal(w.exitStatus, 0);
      assert.equal(w.exitedAt, undefined, "a released Wait has no exit");
      assert.deepEqual([m.containerId, m.released], ["", true]);
      assert.equal((await other.agent.release({})).released, 0, "nothing is held any more");

      // The polls after it wait as before: every byte once, then the exit.
      assert.equal(text(await readToEnd(agent, "stdout", "late")), "late\n");
      assert.equal(text(await readToEnd(agent, "stderr", "late")), "");
      const exited = await agent.wait(id);
      assert.deepEqual([exited.exitStatus, exited.released], [6, false]);
      // An exit already known is answered as before, never released.
      const again = agent.wait(id);
      assert.equal((await other.agent.release({})).released, 0);
      assert.deepEqual([(await again).exitStatus, (await again).released], [6, false]);
      await agent.delete(id);

      await agent.shutdown({});
      assert.equal((await agentProc.status).code, 0);
    } finally {
      await other?.close();
      await conn?.close();
      try {
        agentProc.kill("SIGKILL");
      } catch { /* exited */ }
      await agentProc.status;
      await late.cleanup();
      await Deno.remove(dir, { recursive: true });
    }
  },
);

Deno.test("vm agent client: a socket nobody serves is reported after the bound", async () => {
  const dir = await Deno.makeTempDir({ prefix: "skiff-vm-client-" });
  try {
    await assert.rejects(
      waitForAgent(`${dir}/none.sock`, 300),
      (e: ConnectError) => e.code === Code.DeadlineExceeded && e.message.includes("none.sock"),
    );
    const c = connectAgent(`${dir}/none.sock`);
    await assert.rejects(c.agent.ping({}), (e: ConnectError) => e.code === Code.Unavailable);
    await c.close();
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

/** Reads a guest process's stdout to its end, failing (not hanging) after `ms`. */
async function outputWithin(
  agent: Parameters<typeof readToEnd>[0],
  containerId: string,
  execId: string,
  ms = 60_000,
): Promise<string> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`no end of ${containerId}/${execId}'s terminal in ${ms} ms`)),
      ms,
    );
  });
  try {
    return text(await Promise.race([readToEnd(agent, "stdout", containerId, execId), late]));
  } finally {
    clearTimeout(timer);
  }
}

integrationTest(
  "vm agent on the host: terminals (stdin, output, resize, CloseIO's hangup, end at the exit)",
  { root: true, binaries: ["runc"] },
  async () => {
    const dir = await Deno.makeTempDir({ prefix: "skiff-vm-agent-tty-" });
    const socket = `${dir}/agent.sock`;
    const agentProc = spawnAgent(dir, socket);
    const tty = await createBusyboxBundle({
      dir: `${dir}/tty`,
      args: ["sh", "-c", "read x; stty size; echo got:$x; exit 4"],
      terminal: true,
    });
    let conn;
    try {
      conn = (await waitForAgent(socket, 60_000)).connection;
      const agent = conn.agent;
      const terminal = { stdin: true, stdout: true, terminal: true };

      // A terminal init: sized before it starts, typed into, its output and exit 4; no stderr.
      await agent.create({ containerId: "tty", bundle: tty.bundle, stdio: terminal });
      await agent.resize({ containerId: "tty", width: 101, height: 31 });
      await agent.start({ containerId: "tty" });
      const out = outputWithin(agent, "tty", "");
      await agent.writeStdin({ containerId: "tty", data: bytes("hi\n") });
      const initOut = await out;
      assert.match(initOut, /31 101\r\n/, `stty size in the terminal: ${JSON.stringify(initOut)}`);
      assert.match(initOut, /got:hi\r\n/, JSON.stringify(initOut));
      assert.equal(text(await readToEnd(agent, "stderr", "tty")), "", "a terminal has no stderr");
      assert.equal((await agent.wait({ containerId: "tty" })).exitStatus, 4);

      await agent.delete({ containerId: "tty" });

      // Terminal execs in a running container.
      const host = await createBusyboxBundle({ dir: `${dir}/host`, args: ["sleep", "1000"] });
      try {
        await agent.create({ containerId: "host", bundle: host.bundle, stdio: {} });
        await agent.start({ containerId: "host" });
        // Resizing a process without a terminal is refused.
        await assert.rejects(
          agent.resize({ containerId: "host", width: 80, height: 24 }),
          (e: ConnectError) => e.code === Code.FailedPrecondition,
        );
        const exec = (execId: string, args: string[], stdio: object) =>
          agent.exec({
            containerId: "host",
            execId,
            process: bytes(JSON.stringify(createOciSpec({ args, terminal: true }).process)),
            stdio,
          });

        // Resized while it waits for its input, then it prints the new size and exits 5.
        await exec("sized", ["sh", "-c", "read x; stty size; exit 5"], terminal);
        const sized = outputWithin(agent, "host", "sized");
        await agent.resize({ containerId: "host", execId: "sized", width: 120, height: 40 });
        await agent.writeStdin({ containerId: "host", execId: "sized", data: bytes("go\n") });
        assert.match(await sized, /40 120\r\n/);
        assert.equal((await agent.wait({ containerId: "host", execId: "sized" })).exitStatus, 5);

        // CloseIO closes the terminal, as containerd's shim does when its stdin ends: `cat`
        // gets the hangup (SIGHUP, 129) and the output ends.
        await exec("cat", ["cat"], terminal);
        const catOut = outputWithin(agent, "host", "cat");
        await agent.writeStdin({ containerId: "host", execId: "cat", data: bytes("abc\n") });
        await agent.closeStdin({ containerId: "host", execId: "cat" });
        await catOut;
        assert.equal((await agent.wait({ containerId: "host", execId: "cat" })).exitStatus, 129);

        // A background process keeps the terminal open: the output still ends after the exit.
        await exec("bg", ["sh", "-c", "trap '' HUP; sleep 1000 & echo started; exit 2"], {
          stdout: true,
          terminal: true,
        });
        assert.match(await outputWithin(agent, "host", "bg"), /started\r\n/);
        assert.equal((await agent.wait({ containerId: "host", execId: "bg" })).exitStatus, 2);

        await agent.kill({ containerId: "host", signal: 9, all: true });
        await agent.wait({ containerId: "host" });
        await agent.delete({ containerId: "host" });
      } finally {
        await host.cleanup();
      }
      await agent.shutdown({});
      assert.equal((await agentProc.status).code, 0);
    } finally {
      await conn?.close();
      try {
        agentProc.kill("SIGKILL");
      } catch { /* exited */ }
      await agentProc.status;
      await tty.cleanup();
      await Deno.remove(dir, { recursive: true });
    }
  },
);
