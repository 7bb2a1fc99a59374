// The server of a shim that containerd abandoned before handing it anything exits by itself.
import assert from "node:assert/strict";
import { exitWhenAbandoned } from "../sdk/shim/abandoned.ts";

const tick = (ms: number) => new Promise((r) => setTimeout(r, ms));

Deno.test("exitWhenAbandoned() fires once the bundle is gone and nothing was claimed", async () => {
  const bundle = await Deno.makeTempDir({ prefix: "skiff-abandoned-" });
  let fired = 0;
  const stop = exitWhenAbandoned({
    bundle,
    claimed: () => false,
    onAbandoned: () => fired++,
    intervalMs: 10,
  });
  try {
    await tick(50);
    assert.equal(fired, 0, "the bundle is still there");
    await Deno.remove(bundle);
    await tick(50);
    assert.equal(fired, 1, "fired once");
  } finally {
    stop();
  }
});

Deno.test("exitWhenAbandoned() never fires once a container or sandbox was claimed", async () => {
  const bundle = await Deno.makeTempDir({ prefix: "skiff-abandoned-" });
  let claimed = false;
  let fired = 0;
  const stop = exitWhenAbandoned({
    bundle,
    claimed: () => claimed,
    onAbandoned: () => fired++,
    intervalMs: 10,
  });
  try {
    claimed = true;
    await tick(30);
    claimed = false; // the last container deleted: Shutdown's business, not this watch's
    await Deno.remove(bundle);
    await tick(50);
    assert.equal(fired, 0);
  } finally {
    stop();
  }
});
