// Vetting a connection to a spare's or a shared server's socket (sdk/shim/spare/vet.ts): only a
// well-formed handoff of the same code, sent as the first line, is taken.
import assert from "node:assert/strict";
import { readHandoff } from "../../../../sdk/shim/spare/vet.ts";

/** A connected pair over a unix socket in a temporary directory. */
async function pair(): Promise<{ client: Deno.Conn; server: Deno.Conn; done(): void }> {
  const dir = await Deno.makeTempDir();
  const path = `${dir}/s.sock`;
  const listener = Deno.listen({ transport: "unix", path });
  const [client, server] = await Promise.all([
    Deno.connect({ transport: "unix", path }),
    listener.accept(),
  ]);
  return {
    client,
    server,
    done() {
      for (const c of [client, server]) {
        try {
          c.close();
        } catch { /* closed */ }
      }
      listener.close();
      Deno.removeSync(dir, { recursive: true });
    },
  };
}

const HANDOFF = {
  codeId: "a".repeat(64),
  flags: { namespace: "k8s.io", id: "pod", address: "/run/c.sock", socket: "/run/s/x" },
  bundle: "/run/b/pod",
  env: {},
};

Deno.test("readHandoff takes a handoff of the same code", async () => {
  const p = await pair();
  try {
    await p.client.write(new TextEncoder().encode(JSON.stringify(HANDOFF) + "\n"));
    assert.deepEqual(await readHandoff(p.server, HANDOFF.codeId), HANDOFF);
  } finally {
    p.done();
  }
});

Deno.test("readHandoff refuses other code, a malformed line and a peer that hangs up", async () => {
  for (
    const line of [
      JSON.stringify({ ...HANDOFF, codeId: "b".repeat(64) }) + "\n",
      JSON.stringify({ codeId: HANDOFF.codeId }) + "\n",
      "not json\n",
      "", // closes without a line
    ]
  ) {
    const p = await pair();
    try {
      if (line) await p.client.write(new TextEncoder().encode(line));
      p.client.close();
      assert.equal(await readHandoff(p.server, HANDOFF.codeId), undefined, line);
    } finally {
      p.done();
    }
  }
});
