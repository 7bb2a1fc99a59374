// poll.ts: every wait of the process shares one poll(2) on one worker thread. Deno runs at most
// 32 `nonblocking` FFI calls at once, and a poll per wait stalled the 33rd (a grouped shim's
// seventh container hung in Create).
import assert from "node:assert/strict";
import { close, eventfd, preloadLibc, readFd, writeFd } from "../../../sdk/linux/libc.ts";
import { Canceller, POLLIN, waitFd } from "../../../sdk/linux/poll.ts";
import { deadline } from "../../_linux_support.ts";

preloadLibc();
const ONE = new Uint8Array(new BigUint64Array([1n]).buffer);

Deno.test("waitFd: 200 waits at once; each resolves when its own descriptor is ready", async () => {
  const canceller = new Canceller();
  const fds = Array.from({ length: 200 }, () => eventfd());
  try {
    const waits = fds.map((fd) => waitFd(fd, POLLIN, canceller));
    // The last one first: on a pool of 32 threads it would never have been polled.
    writeFd(fds[199], ONE, "eventfd");
    assert.equal(await deadline(waits[199], 10_000, "the 200th wait"), true);
    for (const i of [0, 57, 198]) {
      writeFd(fds[i], ONE, "eventfd");
      assert.equal(await deadline(waits[i], 10_000, `wait ${i}`), true);
    }
    // The rest end with the canceller.
    canceller.cancel();
    const rest = await deadline(Promise.all(waits), 10_000, "the cancelled waits");
    assert.equal(rest.filter((r) => r === false).length, 196);
    // A wait added after the cancel ends at once.
    assert.equal(await waitFd(fds[1], POLLIN, canceller), false);
  } finally {
    for (const fd of fds) close(fd);
    canceller.close();
  }
});

Deno.test("waitFd: a wait added while the poll runs is polled too, and cancellers are separate", async () => {
  const a = new Canceller();
  const b = new Canceller();
  const x = eventfd();
  const y = eventfd();
  try {
    const first = waitFd(x, POLLIN, a);
    await new Promise((r) => setTimeout(r, 20)); // the poll is running now
    const second = waitFd(y, POLLIN, b);
    writeFd(y, ONE, "eventfd");
    assert.equal(await deadline(second, 10_000, "the wait added later"), true);
    assert.equal(readFd(y, new Uint8Array(8), "eventfd"), 8);
    b.cancel(); // cancels only b's waits
    const again = waitFd(x, POLLIN, a);
    writeFd(x, ONE, "eventfd");
    assert.deepEqual(await deadline(Promise.all([first, again]), 10_000, "a's waits"), [
      true,
      true,
    ]);
  } finally {
    close(x);
    close(y);
    a.close();
    b.close();
  }
});
