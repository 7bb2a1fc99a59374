// skiff's ttrpc against Go peers: the Go runc shim's server (driven by skiff's client, as
// containerd drives it) and `ctr shim` (a Go client calling skiff's server).
import assert from "node:assert/strict";
import { createRegistry, fromBinary, type Message } from "@bufbuild/protobuf";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, createServiceImplSpec } from "@connectrpc/connect";
import {
  file_containerd_events_task,
  type TaskCreate,
  type TaskDelete,
  type TaskExit,
  type TaskStart,
} from "../../proto/gen/containerd/events/task_pb.ts";
import { Events } from "../../proto/gen/containerd/services/events/ttrpc/v1/events_pb.ts";
import type { Envelope } from "../../proto/gen/containerd/types/event_pb.ts";
import { Task } from "../../proto/gen/containerd/task/v2/shim_pb.ts";
import { TtrpcServer } from "../../sdk/ttrpc/server.ts";
import { createTtrpcTransport } from "../../sdk/ttrpc/transport.ts";
import { integrationTest } from "../_integration.ts";
import { GO_SHIM, shimSocketPath, startGoShim } from "../fixtures/ttrpc/go_shim.ts";

const NS = "skiff-test";
const NS_KEY = "containerd-namespace-ttrpc";
const eventTypes = createRegistry(file_containerd_events_task);

/** Decodes an envelope's event by its bare type URL, as containerd's typeurl names it. */
function decodeEvent(env: Envelope): { type: string; msg: Message } {
  assert.ok(env.event, `envelope ${env.topic} has no event`);
  const type = env.event.typeUrl;
  const desc = eventTypes.getMessage(type);
  assert.ok(desc, `unknown event type URL "${type}"`);
  return { type, msg: fromBinary(desc, env.event.value) };
}

integrationTest(
  "createTtrpcTransport() drives the Go containerd-shim-runc-v2 through a task's life; events reach a TtrpcServer",
  { root: true, binaries: [GO_SHIM, "runc", "mkfifo", "/bin/busybox"] },
  async () => {
    const dir = await Deno.makeTempDir({ prefix: "skiff-goshim-" });
    const id = `skiff-ttrpc-${crypto.randomUUID().slice(0, 8)}`;
    // Plays containerd's ttrpc events endpoint.
    const envelopes: Envelope[] = [];
    const forwardNamespaces: Array<string | null> = [];
    const eventsServer = new TtrpcServer();
    eventsServer.register(createServiceImplSpec<typeof Events>(Events, {
      forward(req, ctx) {
        if (req.envelope) envelopes.push(req.envelope);
        forwardNamespaces.push(ctx.requestHeader.get(NS_KEY));
        return {};
      },
    }));
    const eventsPath = `${dir}/events.sock`;
    await eventsServer.listen(eventsPath);
    let shimPid: number | undefined;
    let shim: Awaited<ReturnType<typeof startGoShim>> | undefined;
    const transport = { close: () => Promise.resolve() } as { close(): Promise<void> };
    try {
      shim = await startGoShim({
        dir,
        id,
        namespace: NS,
        ttrpcAddress: eventsPath,
        args: ["sh", "-c", "exit 3"],
      });
      assert.match(shim.address, /^unix:\/\/\/run\/containerd\/s\/[0-9a-f]{64}$/);
      const t = createTtrpcTransport({ path: shim.address });
      transport.close = () => t.close();
      const task = createClient(Task, t);
      const headers = { [NS_KEY]: NS };

      const connected = await task.connect({ id }, { headers });
      shimPid = connected.shimPid;
      assert.ok(shimPid > 0);

      const created = await task.create({
        id,
        bundle: shim.bundle,
        rootfs: [],
        stdout: "",
        stderr: "",
      }, {
        headers,
        timeoutMs: 30_000,
      });
      assert.ok(created.pid > 0, "Create returns the init pid");
      const started = await task.start({ id }, { headers, timeoutMs: 30_000 });
      assert.equal(started.pid, created.pid);
      const waited = await task.wait({ id }, { headers, timeoutMs: 30_000 });
      assert.equal(waited.exitStatus, 3);
      const state = await task.state({ id }, { headers });
      assert.equal(state.bundle, shim.bundle);
      assert.equal(state.exitStatus, 3);
      // A Go error status comes back as a ConnectError with the same code.
      await assert.rejects(
        task.state({ id: "no-such-task" }, { headers }),
        (e: unknown) => e instanceof ConnectError && e.code === Code.NotFound,
      );
      const deleted = await task.delete({ id }, { headers, timeoutMs: 30_000 });
      assert.equal(deleted.exitStatus, 3);
      assert.equal(deleted.pid, created.pid);

      // The shim publishes asynchronously: wait (bounded) until the four events arrived.
      for (let i = 0; i < 200 && envelopes.length < 4; i++) {
        await new Promise((r) => setTimeout(r, 50));
      }
      assert.deepEqual(envelopes.map((e) => e.topic), [
        "/tasks/create",
        "/tasks/start",
        "/tasks/exit",
        "/tasks/delete",
      ]);
      for (const env of envelopes) {
        assert.equal(env.namespace, NS);
        assert.ok(env.timestamp && timestampMs(env.timestamp) > 0);
      }
      assert.ok(
        forwardNamespaces.every((ns) => ns === NS),
        `forward namespaces: ${forwardNamespaces}`,
      );
      const [create, start, exit, del] = envelopes.map(decodeEvent);
      assert.equal(create.type, "containerd.events.TaskCreate");
      assert.equal((create.msg as TaskCreate).containerId, id);
      assert.equal((create.msg as TaskCreate).bundle, shim.bundle);
      assert.equal((create.msg as TaskCreate).pid, created.pid);
      assert.equal(start.type, "containerd.events.TaskStart");
      assert.equal((start.msg as TaskStart).pid, created.pid);
      assert.equal(exit.type, "containerd.events.TaskExit");
      assert.equal((exit.msg as TaskExit).exitStatus, 3);
      assert.equal((exit.msg as TaskExit).containerId, id);
      assert.equal(del.type, "containerd.events.TaskDelete");
      assert.equal((del.msg as TaskDelete).exitStatus, 3);

      // Shutdown: the shim exits; its answer may or may not make it out before the socket closes.
      try {
        await task.shutdown({ id }, { headers, timeoutMs: 10_000 });
      } catch (e) {
        assert.ok(e instanceof ConnectError && e.code === Code.Unavailable, String(e));
      }
    } finally {
      await transport.close();
      await shim?.cleanup(shimPid);
      await eventsServer.close({ timeoutMs: 1000 });
      await Deno.remove(dir, { recursive: true });
    }
  },
);

integrationTest(
  "TtrpcServer answers `ctr shim state` (a Go ttrpc client) at containerd's socket address for the id",
  { root: true, binaries: ["ctr"] },
  async () => {
    const dir = await Deno.makeTempDir({ prefix: "skiff-ctr-" });
    const address = `${dir}/containerd.sock`;
    const id = `skiff-ttrpc-${crypto.randomUUID().slice(0, 8)}`;
    const path = shimSocketPath(address, NS, id);
    const server = new TtrpcServer();
    const requests: string[] = [];
    server.register(
      createServiceImplSpec<typeof Task>(Task, {
        state(req) {
          requests.push(req.id);
          return {
            id: req.id,
            bundle: "/skiff/bundle/from-deno",
            pid: 31337,
            exitStatus: 0,
            stdout: "/skiff/out",
          };
        },
      }),
      "containerd.task.v2.Task",
      "containerd.task.v3.Task",
    );
    try {
      await Deno.mkdir("/run/containerd/s", { recursive: true });
      await server.listen(path);
      const out = await new Deno.Command("ctr", {
        args: ["-a", address, "-n", NS, "shim", "--id", id, "state"],
        stdout: "piped",
        stderr: "piped",
      }).output();
      const stdout = new TextDecoder().decode(out.stdout);
      assert.ok(out.success, `ctr failed: ${new TextDecoder().decode(out.stderr)}`);
      const printed = JSON.parse(stdout);
      assert.equal(printed.id, id);
      assert.equal(printed.bundle, "/skiff/bundle/from-deno");
      assert.equal(printed.pid, 31337);
      assert.equal(printed.stdout, "/skiff/out");
      assert.deepEqual(requests, [id]);
    } finally {
      await server.close({ timeoutMs: 1000 });
      await Deno.remove(path).catch(() => {});
      await Deno.remove(dir, { recursive: true });
    }
  },
);
