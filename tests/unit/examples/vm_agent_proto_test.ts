// The VM agent's protocol (examples/vm/proto/agent.proto) over skiff's ttrpc: the service
// name the guest serves, and a long-polling read answered after the call was made.
import assert from "node:assert/strict";
import { createClient, createServiceImplSpec } from "@connectrpc/connect";
import { Agent } from "../../../examples/vm/proto/agent_pb.ts";
import { TtrpcServer } from "../../../sdk/ttrpc/server.ts";
import { createTtrpcTransport } from "../../../sdk/ttrpc/transport.ts";

Deno.test("skiff.agent.v1.Agent: the service the guest serves, with every RPC the host needs", () => {
  assert.equal(Agent.typeName, "skiff.agent.v1.Agent");
  const names = Agent.methods.map((m) => m.name).sort();
  assert.deepEqual(names, [
    "CloseStdin",
    "Create",
    "Delete",
    "Exec",
    "Kill",
    "OomEvent",
    "Pause",
    "Ping",
    "Ps",
    "ReadStderr",
    "ReadStdout",
    "Release",
    "Resize",
    "Resume",
    "Shutdown",
    "Start",
    "Stats",
    "Wait",
    "WriteStdin",
  ]);
  for (const m of Agent.methods) assert.equal(m.methodKind, "unary", `${m.name} is unary`);
});

Deno.test("skiff.agent.v1.Agent over ttrpc: a ReadStdout long poll answers when data arrives", async () => {
  const dir = await Deno.makeTempDir({ prefix: "skiff-agent-proto-" });
  const path = `${dir}/agent.sock`;
  const data = Promise.withResolvers<Uint8Array>();
  const server = new TtrpcServer();
  server.register(createServiceImplSpec<typeof Agent>(Agent, {
    ping: () => ({ version: "test", kernel: "6.1", uptimeSeconds: 1.5 }),
    readStdout: async (req) => ({
      data: req.containerId === "c1" ? await data.promise : undefined,
    }),
  }));
  await server.listen(path);
  const transport = createTtrpcTransport({ path });
  try {
    const agent = createClient(Agent, transport);
    const ping = await agent.ping({});
    assert.equal(ping.version, "test");
    assert.equal(ping.uptimeSeconds, 1.5);
    const read = agent.readStdout({ containerId: "c1" });
    setTimeout(() => data.resolve(new TextEncoder().encode("hello\n")), 50);
    assert.equal(new TextDecoder().decode((await read).data), "hello\n");
  } finally {
    await transport.close();
    await server.close();
    await Deno.remove(dir, { recursive: true });
  }
});
