// EventPublisher against a real skiff ttrpc Events server: order, bare type URLs, envelopes,
// retry across a server restart (a containerd restart), InvalidArgument drops, the queue bound.
import assert from "node:assert/strict";
import { Code, ConnectError, createServiceImplSpec } from "@connectrpc/connect";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { Events } from "../../../../proto/gen/containerd/services/events/ttrpc/v1/events_pb.ts";
import { TtrpcServer } from "../../../../sdk/ttrpc/server.ts";
import { EventPublisher } from "../../../../sdk/shim/server/events.ts";

interface Seen {
  topic: string;
  namespace: string;
  typeUrl: string;
  time: Date;
  header: string | null;
}

async function eventsServer(
  path: string,
  seen: Seen[],
  reject?: (topic: string) => boolean,
): Promise<TtrpcServer> {
  const server = new TtrpcServer();
  server.register(
    createServiceImplSpec<typeof Events>(Events, {
      forward(req, ctx) {
        const env = req.envelope!;
        if (reject?.(env.topic)) {
          throw new ConnectError(`bad topic ${env.topic}`, Code.InvalidArgument);
        }
        seen.push({
          topic: env.topic,
          namespace: env.namespace,
          typeUrl: env.event!.typeUrl,
          time: timestampDate(env.timestamp!),
          header: ctx.requestHeader.get("containerd-namespace-ttrpc"),
        });
        return {};
      },
    }),
    "containerd.services.events.ttrpc.v1.Events",
  );
  await server.listen(path);
  return server;
}

async function until(cond: () => boolean, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 20));
  }
}

Deno.test("EventPublisher forwards in order with bare type URLs, namespace and timestamp", async () => {
  const dir = await Deno.makeTempDir();
  const seen: Seen[] = [];
  const server = await eventsServer(`${dir}/ttrpc.sock`, seen);
  const pub = new EventPublisher({ address: `${dir}/ttrpc.sock`, namespace: "ns1" });
  try {
    for (let i = 0; i < 20; i++) {
      pub.publish("/tasks/exit", "containerd.events.TaskExit", {
        containerId: "c",
        id: `p${i}`,
        exitStatus: i,
      });
    }
    await pub.flush();
    assert.equal(seen.length, 20);
    assert.ok(seen.every((e) => e.typeUrl === "containerd.events.TaskExit"), "bare type names");
    assert.ok(seen.every((e) => e.namespace === "ns1" && e.header === "ns1"));
    assert.ok(seen.every((e) => e.time.getTime() > 0), "timestamps set");
    assert.deepEqual(pub.stats, { published: 20, failed: 0, queued: 0 });
  } finally {
    await pub.close();
    await server.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("EventPublisher keeps events while containerd is down and delivers them in order after", async () => {
  const dir = await Deno.makeTempDir();
  const path = `${dir}/ttrpc.sock`;
  const seen: Seen[] = [];
  let server = await eventsServer(path, seen);
  const pub = new EventPublisher({ address: path, namespace: "ns1" });
  try {
    pub.publish("/tasks/oom", "containerd.events.TaskOOM", { containerId: "before" });
    await pub.flush();
    await server.close(); // containerd restarts ...
    for (const id of ["a", "b", "c"]) {
      pub.publish("/tasks/oom", "containerd.events.TaskOOM", { containerId: id });
    }
    await new Promise((r) => setTimeout(r, 700));
    assert.equal(pub.stats.queued > 0, true, "events wait while nobody listens");
    server = await eventsServer(path, seen); // ... and comes back
    await until(() => seen.length === 4);
    await pub.flush();
    assert.deepEqual(seen.map((e) => e.topic), [
      "/tasks/oom",
      "/tasks/oom",
      "/tasks/oom",
      "/tasks/oom",
    ]);
    assert.equal(pub.stats.failed, 0);
    assert.equal(pub.stats.published, 4);
  } finally {
    await pub.close();
    await server.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("EventPublisher drops what containerd rejects as invalid, and bounds its queue", async () => {
  const dir = await Deno.makeTempDir();
  const seen: Seen[] = [];
  const server = await eventsServer(`${dir}/ttrpc.sock`, seen, (t) => t === "/bad");
  const pub = new EventPublisher({ address: `${dir}/ttrpc.sock`, namespace: "ns1" });
  try {
    pub.publish("/bad", "containerd.events.TaskOOM", { containerId: "x" });
    pub.publish("/tasks/oom", "containerd.events.TaskOOM", { containerId: "y" });
    await pub.flush();
    assert.deepEqual(seen.map((e) => e.topic), ["/tasks/oom"], "the rejected event is not retried");
    assert.equal(pub.stats.failed, 1);
  } finally {
    await pub.close();
    await server.close();
  }
  // Nobody listening, tiny bound: the oldest events go first.
  const lonely = new EventPublisher({
    address: `${dir}/nobody.sock`,
    namespace: "ns1",
    maxQueue: 3,
    retryForMs: 200,
  });
  for (let i = 0; i < 10; i++) {
    lonely.publish("/tasks/oom", "containerd.events.TaskOOM", { containerId: `${i}` });
  }
  assert.ok(lonely.stats.queued <= 3);
  assert.ok(lonely.stats.failed >= 7);
  await lonely.close(500);
  await Deno.remove(dir, { recursive: true });
});
