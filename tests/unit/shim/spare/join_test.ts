// joinOrCreate (sdk/shim/spare/handoff.ts) with no shared server taking pods: who holds the
// shared servers' `create` lock, the one `start` that brings the next server up.
import assert from "node:assert/strict";
import { joinOrCreate, takeCreateAhead } from "../../../../sdk/shim/spare/join.ts";
import { sharedJoinPaths, spareDir } from "../../../../sdk/shim/spare/config.ts";

const CODE = "fedcba9876543210".repeat(4);
const ENV = { SKIFF_SHARED_PODS: "4", SKIFF_SHIM_CODE: CODE };

async function withDirs(
  fn: (o: { address: string; socketDir: string; create: string }) => Promise<void>,
) {
  const socketDir = await Deno.makeTempDir({ prefix: "skiff-join-" });
  const address = `${socketDir}/containerd.sock`;
  try {
    const create = sharedJoinPaths(spareDir(address, socketDir), CODE, "ns").create;
    await fn({ address, socketDir, create });
  } finally {
    await Deno.remove(socketDir, { recursive: true });
  }
}

function request(address: string, shimCgroup?: string) {
  return {
    flags: {
      namespace: "ns",
      id: "c1",
      address,
      publishBinary: "/usr/bin/containerd",
      debug: false,
      socket: "/run/containerd/s/x",
    },
    bundle: "/tmp",
    env: {},
    ...(shimCgroup ? { shimCgroup } : {}),
  };
}

const envOf = (extra: Record<string, string> = {}) => {
  const all: Record<string, string> = { ...ENV, ...extra };
  return { get: (k: string) => all[k] };
};

/** Whether another open file description could take the lock now. */
function free(path: string): boolean {
  const f = Deno.openSync(path, { read: true, write: true, create: true });
  try {
    return f.tryLockSync(true);
  } finally {
    f.close();
  }
}

Deno.test("joinOrCreate: with no server taking pods, the start takes `create` and holds it", async () => {
  await withDirs(async ({ address, socketDir, create }) => {
    const got = await joinOrCreate(address, socketDir, request(address), envOf());
    assert.ok("create" in got && got.create, "this start brings the next server up");
    assert.equal(free(create), false, "the burst's other starts wait");
    got.create.close();
    assert.equal(free(create), true);
  });
});

Deno.test("joinOrCreate: a lock taken ahead (by a spare at its door) is the one returned", async () => {
  await withDirs(async ({ address, socketDir, create }) => {
    await Deno.mkdir(spareDir(address, socketDir), { recursive: true });
    const ahead = takeCreateAhead(spareDir(address, socketDir), "ns", envOf());
    assert.ok(ahead, "taken ahead");
    assert.equal(takeCreateAhead(spareDir(address, socketDir), "ns", envOf()), undefined, "once");
    const got = await joinOrCreate(address, socketDir, request(address), envOf(), ahead);
    assert.ok("create" in got && got.create === ahead);
    ahead.close();
    // A pod with a shim cgroup of its own joins no shared server: the lock goes at once.
    const again = takeCreateAhead(spareDir(address, socketDir), "ns", envOf())!;
    const own = await joinOrCreate(address, socketDir, request(address, "/pod"), envOf(), again);
    assert.deepEqual(own, { create: undefined });
    assert.equal(free(create), true, "let go");
    // Shared servers off: nothing taken.
    assert.equal(
      takeCreateAhead(spareDir(address, socketDir), "ns", { get: () => undefined }),
      undefined,
    );
  });
});

Deno.test("joinOrCreate: a start whose launcher holds `create` for it takes no lock of its own", async () => {
  await withDirs(async ({ address, socketDir, create }) => {
    const got = await joinOrCreate(
      address,
      socketDir,
      request(address),
      envOf({ SKIFF_SHARED_CREATE_FD: "9" }),
    );
    // The shell's fd holds it until this process exits: it neither waits for itself nor locks.
    assert.deepEqual(got, { create: undefined });
    assert.throws(() => Deno.statSync(create), Deno.errors.NotFound, "never opened");
  });
});
