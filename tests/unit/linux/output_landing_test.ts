import assert from "node:assert/strict";
import { OutputLanding } from "../../../sdk/linux/output_landing.ts";

/** A pipe as the copy sees it: what it read, and what waits in it. */
function pipe(waiting: number) {
  const p = { bytesRead: 0, waiting, unread: () => p.waiting };
  return p;
}

/** Resolves with whether `promise` settled within a turn of the event loop. */
async function settledSoon(promise: Promise<unknown>): Promise<boolean> {
  let settled = false;
  promise.then(() => settled = true, () => settled = true);
  await new Promise((r) => setTimeout(r, 0));
  return settled;
}

Deno.test("OutputLanding.landed() waits for what the pipe held and the copy had in hand", async () => {
  const landing = new OutputLanding();
  const source = pipe(10);
  source.bytesRead = 4; // a chunk of 4 in hand, not yet written
  const copy = landing.track(source);
  const landed = landing.landed();
  // The copy writes the chunk in hand, then reads and writes the 10 the pipe held.
  copy.settle(4);
  assert.equal(await settledSoon(landed), false);
  source.bytesRead += 10;
  source.waiting = 0;
  copy.settle(6);
  assert.equal(await settledSoon(landed), false);
  copy.settle(4);
  assert.equal(await landed, true);
});

Deno.test("OutputLanding.landed() does not wait for bytes that came into the pipe after it began", async () => {
  const landing = new OutputLanding();
  const source = pipe(0);
  const copy = landing.track(source);
  const landed = landing.landed();
  // A background process still holding the pipe writes more: not the exited process's output.
  source.waiting = 100;
  assert.equal(await landed, true);
  assert.equal(copy.ended, false);
});

Deno.test("OutputLanding.landed() waits for the end of a copy that cannot count its source (a terminal)", async () => {
  const landing = new OutputLanding();
  const copy = landing.track();
  const landed = landing.landed();
  copy.settle(100);
  assert.equal(await settledSoon(landed), false);
  copy.end();
  assert.equal(await landed, true);
});

Deno.test("OutputLanding.landed() counts a copy that ended as landed, whatever its pipe held", async () => {
  const landing = new OutputLanding();
  const ended = landing.track(pipe(50));
  ended.end(); // e.g. stopped by close()
  const other = landing.track(pipe(0));
  assert.equal(await landing.landed(), true);
  assert.equal(other.ended, false);
});

Deno.test("OutputLanding.landed() gives up at its bound when nothing moves", async () => {
  const landing = new OutputLanding();
  landing.track(pipe(10));
  assert.equal(await landing.landed(50), false);
});

Deno.test("OutputLanding.landed() waits until a watched FIFO's client has read it empty", async () => {
  const landing = new OutputLanding();
  const copy = landing.track({ bytesRead: 0, unread: () => 0 });
  // The client takes 10 bytes each time the FIFO is looked at: it reads, slowly.
  let fifo = 100;
  landing.watch({
    unread: () => fifo = Math.max(0, fifo - 10),
    activeAt: performance.now(),
  });
  copy.end();
  assert.equal(await landing.landed(), true);
  assert.equal(fifo, 0);
});

Deno.test("OutputLanding.landed() stops waiting for a FIFO whose client stopped reading", async () => {
  const landing = new OutputLanding();
  const copy = landing.track({ bytesRead: 0, unread: () => 0 });
  // Written to just now; nothing read since, nor while landed() waits: the client is gone, and
  // what it left unread can reach nobody.
  landing.watch({ unread: () => 100, activeAt: performance.now() });
  copy.end();
  assert.equal(await landing.landed(), true);
});

Deno.test("OutputLanding.landed() does not wait for a FIFO not read since long before (ctr run -d left it)", async () => {
  const landing = new OutputLanding();
  const copy = landing.track({ bytesRead: 0, unread: () => 0 });
  landing.watch({ unread: () => 100, activeAt: performance.now() - 5_000 });
  copy.end();
  assert.equal(await settledSoon(landing.landed()), true);
});
