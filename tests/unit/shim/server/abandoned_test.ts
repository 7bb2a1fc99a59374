// The server of a shim that containerd abandoned before handing it anything exits by itself.
import assert from "node:assert/strict";
import { exitWhenAbandoned } from "../../../../sdk/shim/server/abandoned.ts";
import { openLogSink } from "../../../../sdk/shim/server/server_logger.ts";
import { mkfifo, O, open, preloadLibc } from "../../../../sdk/linux/libc.ts";
import { FdStream } from "../../../../sdk/linux/fd_stream.ts";

preloadLibc();

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

Deno.test("openLogSink() never blocks: no reader on the log FIFO means no log, not a hang", async () => {
  const dir = await Deno.makeTempDir({ prefix: "skiff-log-" });
  try {
    mkfifo(`${dir}/log`, 0o600);
    // containerd gone: nobody reads. A blocking open would hang this test for good.
    assert.equal(openLogSink(`${dir}/log`), undefined);
    // containerd reading: lines arrive.
    const reader = new FdStream(open(`${dir}/log`, O.RDONLY | O.NONBLOCK), "log reader");
    try {
      const sink = openLogSink(`${dir}/log`);
      assert.ok(sink);
      sink('{"msg":"hello"}\n');
      const buf = new Uint8Array(64);
      const n = await reader.read(buf);
      assert.equal(new TextDecoder().decode(buf.subarray(0, n ?? 0)), '{"msg":"hello"}\n');
    } finally {
      await reader.close();
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
