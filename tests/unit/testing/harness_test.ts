/**
 * ShimHarness's own bounds and its log FIFO, with a fake shim (a shell script): `close()` keeps
 * the lines a shim writes while it goes away and returns even when a process never closes the
 * FIFO; `runDelete()` gives up on a `delete` that never ends.
 */
import assert from "node:assert/strict";
import { ShimHarness } from "../../../sdk/testing/harness.ts";

// `start` prints an address nothing serves (Shutdown fails at once, as for a dead shim) and
// leaves a process writing the bundle's log FIFO, as a shim server does.
const FAKE_SHIM = `#!/bin/bash
case "\${@: -1}" in
start)
  case "$FAKE_MODE" in
  last-words)
    # Writes its last line once the harness has begun closing (its events socket is gone).
    ( exec >log 2>/dev/null </dev/null
      echo "first"
      while [ -S "$TTRPC_ADDRESS" ]; do sleep 0.05; done
      echo "last words" ) &
    ;;
  stays)
    ( exec >log 2>/dev/null </dev/null
      echo "staying"
      echo $BASHPID >"$FAKE_PIDFILE"
      exec sleep 600 ) &
    ;;
  esac
  echo "unix://$PWD/nothing.sock"
  ;;
delete)
  exec sleep 600
  ;;
esac
`;

/** Fails instead of hanging the run when a bound inside the harness does not hold. */
function guard<T>(p: Promise<T>, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  return Promise.race([
    p,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} never finished`)), 60_000);
    }),
  ]).finally(() => clearTimeout(timer));
}

async function fakeShim(): Promise<{ dir: string; shim: string; bundle: string }> {
  const dir = await Deno.makeTempDir({ prefix: "skiff-harness-test-" });
  const shim = `${dir}/containerd-shim-fake-v2`;
  await Deno.writeTextFile(shim, FAKE_SHIM, { mode: 0o755 });
  const bundle = `${dir}/bundle`;
  await Deno.mkdir(bundle);
  return { dir, shim, bundle };
}

Deno.test("ShimHarness.close() keeps the lines a shim writes while it goes away", async () => {
  const { dir, shim, bundle } = await fakeShim();
  try {
    const h = await ShimHarness.start({ shim, bundle, env: { FAKE_MODE: "last-words" } });
    await guard(h.close(), "close()");
    assert.equal(h.log, "first\nlast words\n");
    await guard(h.close(), "a second close()");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("ShimHarness.close() returns while a process still holds the log FIFO", async () => {
  const { dir, shim, bundle } = await fakeShim();
  const pidFile = `${dir}/pid`;
  try {
    const h = await ShimHarness.start({
      shim,
      bundle,
      env: { FAKE_MODE: "stays", FAKE_PIDFILE: pidFile },
    });
    await guard(h.close(), "close()");
    assert.equal(h.log, "staying\n");
  } finally {
    // The process this test left: stop it by its pid.
    const pid = Number(await Deno.readTextFile(pidFile).catch(() => ""));
    if (pid > 0) {
      try {
        Deno.kill(pid, "SIGKILL");
      } catch { /* gone */ }
    }
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("ShimHarness.runDelete() kills a delete that outlives its bound and names it", async () => {
  const { dir, shim, bundle } = await fakeShim();
  try {
    const h = await ShimHarness.start({ shim, bundle, id: "never-deleted" });
    try {
      await assert.rejects(
        guard(h.runDelete({ timeoutMs: 500 }), "runDelete()"),
        (e: Error) => {
          assert.match(e.message, /shim delete ".*containerd-shim-fake-v2" \(id "never-deleted"\)/);
          assert.match(e.message, /did not finish within 500ms/);
          return true;
        },
      );
    } finally {
      await guard(h.close(), "close()");
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
