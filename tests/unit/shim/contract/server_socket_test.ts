// server_socket.ts: which server a container goes to (its group), and whether a socket lives.
import assert from "node:assert/strict";
import { groupKey, pathPresent, socketAlive } from "../../../../sdk/shim/contract/server_socket.ts";

async function withBundle(
  annotations: Record<string, string> | null,
  fn: (b: string) => Promise<void> | void,
) {
  const b = await Deno.makeTempDir();
  try {
    if (annotations) await Deno.writeTextFile(`${b}/config.json`, JSON.stringify({ annotations }));
    await fn(b);
  } finally {
    await Deno.remove(b, { recursive: true });
  }
}

Deno.test("groupKey: runc's group annotation first, then CRI's sandbox id, else the id", async () => {
  await withBundle({
    "io.kubernetes.cri.sandbox-id": "pod1",
    "io.containerd.runc.v2.group": "g1",
  }, (b) => assert.equal(groupKey(b, "c1"), "g1"));
  await withBundle({ "io.kubernetes.cri.sandbox-id": "pod1" }, (b) => {
    assert.equal(groupKey(b, "c1"), "pod1");
  });
  await withBundle({ "other": "x" }, (b) => assert.equal(groupKey(b, "c1"), "c1"));
  await withBundle(null, (b) => assert.equal(groupKey(b, "c1"), "c1")); // no spec
});

Deno.test("groupKey: a broken spec groups nothing", async () => {
  await withBundle(null, async (b) => {
    await Deno.writeTextFile(`${b}/config.json`, "{not json");
    assert.equal(groupKey(b, "c2"), "c2");
  });
});

Deno.test("socketAlive: a listening socket is alive; a stale file or nothing is not", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const path = `${dir}/s.sock`;
    assert.equal(pathPresent(path), false);
    assert.equal(await socketAlive(path), false);
    const l = Deno.listen({ transport: "unix", path });
    assert.equal(await socketAlive(path), true);
    l.close();
    // A dead server's leftover: a path that is there, with no one listening.
    await Deno.writeTextFile(path, "");
    assert.equal(pathPresent(path), true);
    assert.equal(await socketAlive(path), false);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
