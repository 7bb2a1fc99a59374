/**
 * Helpers shared by the tests/linux_*_test.ts files (a busybox OCI bundle for runc, deadlines),
 * plus tests of the helpers themselves.
 */
import assert from "node:assert/strict";

/** Rejects with a message naming `what` if `p` is not settled within `ms` (a hang guard). */
export async function deadline<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const guard = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  try {
    return await Promise.race([p, guard]);
  } finally {
    clearTimeout(timer);
  }
}

Deno.test("deadline() rejects naming what it waited for", async () => {
  await assert.rejects(
    deadline(new Promise(() => {}), 1, "nothing"),
    /timed out after 1 ms waiting for nothing/,
  );
  assert.equal(await deadline(Promise.resolve(3), 1000, "three"), 3);
});
