// The warm spare's door (sdk/shim/spare/door.ts) with the launcher's real shell
// (startDoorPath in sdk/install/install.ts): a spare that answers makes the shell exit 0 with
// the answer on containerd's stdout; one that refuses, or none at the door, leaves the shell to
// run Deno's `start` with containerd's stdin untouched; a failure exits 1 with the reason.
import assert from "node:assert/strict";
import {
  answerLauncher,
  failLauncher,
  launcherStdin,
  openDoor,
  readLauncherStart,
  refuseLauncher,
  takeKnock,
} from "../../../../sdk/shim/spare/door.ts";
import { startDoorPath } from "../../../../sdk/install/install.ts";
import { sha256Hex } from "../../../../sdk/shim/contract/sha256.ts";
import { DEFAULT_SOCKET_DIR } from "../../../../sdk/shim/contract/socket_address.ts";
import { spareDirCache } from "../../../../sdk/shim/spare/config.ts";
import { close, mkfifo, O, open, readFd } from "../../../../sdk/linux/libc.ts";

const dec = new TextDecoder();
const CODE = "0123456789abcdef".repeat(4);
const KEY = CODE.slice(0, 16);

interface Rig {
  address: string;
  dir: string;
  launcher: string;
  bundle: string;
  /** Runs the launcher's `start` with `stdin`; its exit code and output. */
  start(stdin: string): Promise<{ code: number; stdout: string; stderr: string }>;
  /** Holds the spare's lock, as a live spare does. */
  holdLock(): Deno.FsFile;
}

/** Shared servers for the rig's launcher (`SKIFF_SHARED_PODS`). */
const SHARED = ["SKIFF_SHARED_PODS=4", "export SKIFF_SHARED_PODS"];

async function withRig(
  fn: (r: Rig) => Promise<void>,
  shared?: typeof SHARED,
): Promise<void> {
  const root = await Deno.makeTempDir({ prefix: "skiff-door-" });
  const address = `${root}/containerd.sock`;
  const dir = `${DEFAULT_SOCKET_DIR}/skiff-${sha256Hex(address).slice(0, 12)}`;
  await Deno.mkdir(dir, { recursive: true, mode: 0o700 });
  const launcher = `${root}/containerd-shim-door-v2`;
  const bundle = `${root}/bundle`;
  await Deno.mkdir(bundle);
  await Deno.writeTextFile(
    launcher,
    [
      "#!/bin/sh",
      `SKIFF_SHIM_CODE=${CODE}`,
      "export SKIFF_SHIM_CODE",
      ...(shared ?? []),
      'for a in "$@"; do last=$a; done',
      ...startDoorPath(),
      // Stands for Deno's start: it shows it ran, and what was left on stdin (with shared
      // servers, also whether it holds the `create` lock, and on which fd).
      ...(shared
        ? [
          'held=$(flock -n -s "$c" true 2>/dev/null || echo held)',
          'echo "deno start: $(cat) ${held:-free} fd=${SKIFF_SHARED_CREATE_FD-}"',
        ]
        : ['echo "deno start: $(cat)"']),
      "",
    ].join("\n"),
    { mode: 0o755 },
  );
  const rig: Rig = {
    address,
    dir,
    launcher,
    bundle,
    async start(stdin) {
      const child = new Deno.Command(launcher, {
        args: ["-namespace", "ns", "-address", address, "-id", "c1", "start"],
        cwd: bundle,
        stdin: "piped",
        stdout: "piped",
        stderr: "piped",
      }).spawn();
      const w = child.stdin.getWriter();
      await w.write(new TextEncoder().encode(stdin));
      await w.close();
      const o = await child.output();
      return { code: o.code, stdout: dec.decode(o.stdout), stderr: dec.decode(o.stderr) };
    },
    holdLock() {
      const f = Deno.openSync(`${dir}/spare-${KEY}.lock`, {
        read: true,
        write: true,
        create: true,
      });
      f.lockSync(true);
      return f;
    },
  };
  try {
    await fn(rig);
  } finally {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
    await Deno.remove(spareDirCache(address)!).catch(() => {});
    await Deno.remove(root, { recursive: true });
  }
}

/** A spare at the door that handles the first knock with `handle`. */
function spareAtDoor(r: Rig, handle: (pid: number) => Promise<void>): Promise<void> {
  const door = openDoor(`${r.dir}/spare-${KEY}.door`);
  return (async () => {
    try {
      for await (const pid of door.knocks()) {
        await handle(pid);
        return;
      }
    } finally {
      door.close();
    }
  })();
}

Deno.test("door: the spare answers in the launcher's place; the shell exits 0", async () => {
  await withRig(async (r) => {
    const lock = r.holdLock();
    try {
      const spare = spareAtDoor(r, async (pid) => {
        assert.equal(takeKnock(r.dir, pid), true);
        const s = readLauncherStart(pid, r.launcher, r.address, {
          SKIFF_SHIM_LAUNCHER: r.launcher,
          MALLOC_ARENA_MAX: "1",
          UNRELATED: "x",
        });
        assert.ok(s, "the launcher's start");
        assert.equal(s.flags.id, "c1");
        assert.equal(s.flags.action, "start");
        assert.equal(s.bundle, r.bundle);
        assert.equal(s.containerd, Deno.pid, "containerd: the shell's parent");
        assert.equal(s.env.SKIFF_SHIM_LAUNCHER, r.launcher, "what the launcher exports");
        assert.equal(s.env.UNRELATED, undefined, "not the spare's own environment");
        assert.equal(dec.decode(await launcherStdin(pid)), "options-bytes");
        answerLauncher(r.dir, pid, "unix:///run/containerd/s/abc");
      });
      const out = await r.start("options-bytes");
      await spare;
      assert.deepEqual(out, { code: 0, stdout: "unix:///run/containerd/s/abc", stderr: "" });
      assert.deepEqual([...Deno.readDirSync(r.dir)].map((e) => e.name).sort(), [
        `spare-${KEY}.lock`,
      ], "the token is tidied, the door removed with the spare");
    } finally {
      lock.close();
    }
  });
});

Deno.test("door: a refusal or no live spare runs Deno's start with stdin untouched", async () => {
  await withRig(async (r) => {
    // No spare holds the lock: straight to Deno's start, even with a door left behind.
    const left = openDoor(`${r.dir}/spare-${KEY}.door`);
    assert.deepEqual(await r.start("opts"), { code: 0, stdout: "deno start: opts\n", stderr: "" });
    left.close();
    const lock = r.holdLock();
    try {
      // A spare that does not take it.
      const spare = spareAtDoor(r, (pid) => {
        assert.equal(takeKnock(r.dir, pid), true);
        refuseLauncher(pid);
        return Promise.resolve();
      });
      assert.deepEqual(await r.start("opts"), {
        code: 0,
        stdout: "deno start: opts\n",
        stderr: "",
      });
      await spare;
      // A spare's door nobody reads (a spare that hangs): after its second, the shell takes its
      // token back and goes the Deno way.
      const silent = openDoor(`${r.dir}/spare-${KEY}.door`);
      try {
        assert.deepEqual(await r.start("late"), {
          code: 0,
          stdout: "deno start: late\n",
          stderr: "",
        });
      } finally {
        silent.close();
      }
    } finally {
      lock.close();
    }
  });
});

Deno.test("door: a failure after the spare took the start exits 1 with its reason", async () => {
  await withRig(async (r) => {
    const lock = r.holdLock();
    try {
      const spare = spareAtDoor(r, async (pid) => {
        assert.equal(takeKnock(r.dir, pid), true);
        await launcherStdin(pid);
        failLauncher(r.dir, pid, "cannot join cgroup /x: no such file");
      });
      const out = await r.start("o");
      await spare;
      assert.deepEqual(out, {
        code: 1,
        stdout: "",
        stderr: "cannot join cgroup /x: no such file\n",
      });
      // A knock the shell gave up is not taken.
      assert.equal(takeKnock(r.dir, 999_999), false);
    } finally {
      lock.close();
    }
  });
});

/** The shared servers' join point files of namespace "ns" (sdk/shim/spare/config.ts). */
/** The pid of a process that has ended (a taker gone). */
async function deadPid(): Promise<number> {
  const child = new Deno.Command("true").spawn();
  await child.status;
  return child.pid;
}

Deno.test("door: a taker gone before it said how it went fails the start at once, naming it", async () => {
  await withRig(async (r) => {
    const lock = r.holdLock();
    try {
      const gone = await deadPid();
      const spare = spareAtDoor(r, async (pid) => {
        assert.equal(takeKnock(r.dir, pid), true);
        assert.equal(Deno.readTextFileSync(`${r.dir}/taken-${pid}`), `${Deno.pid}\n`, "named");
        await launcherStdin(pid);
        // It dies here: the token names a process that is gone, and no word was left.
        Deno.writeTextFileSync(`${r.dir}/taken-${pid}`, `${gone}\n`);
      });
      const out = await r.start("o");
      await spare;
      assert.equal(out.code, 1, out.stderr);
      assert.equal(out.stdout, "", "Deno's start does not run on a stdin already read");
      assert.match(out.stderr, new RegExp(`server ${gone} .* exited without answering`));

      // One that left its answer and died before the signal: the answer stands.
      const spare2 = spareAtDoor(r, async (pid) => {
        assert.equal(takeKnock(r.dir, pid), true);
        await launcherStdin(pid);
        Deno.writeTextFileSync(`${r.dir}/answer-${pid}`, "unix:///run/x");
        Deno.writeTextFileSync(`${r.dir}/taken-${pid}`, `${gone}\n`);
      });
      assert.deepEqual(await r.start("o"), { code: 0, stdout: "unix:///run/x", stderr: "" });
      await spare2;
      assert.deepEqual([...Deno.readDirSync(r.dir)].map((e) => e.name).sort(), [
        `spare-${KEY}.lock`,
      ], "the tokens and answers are tidied");
    } finally {
      lock.close();
    }
  });
});

function sharedPaths(r: Rig) {
  const base = `${r.dir}/shared-${KEY}-${sha256Hex("ns").slice(0, 8)}`;
  return { door: `${base}.door`, lock: `${base}.lock`, create: `${base}.create` };
}

function lockFile(path: string): Deno.FsFile {
  const f = Deno.openSync(path, { read: true, write: true, create: true });
  f.lockSync(true);
  return f;
}

/**
 * A shared server's join point (its lock held, its door open) that answers the first knock with
 * `answer`, after `delayMs` (a busy server), checking that containerd's options are `stdin`.
 */
function sharedServerAtDoor(
  r: Rig,
  answer: string,
  opts: { stdin?: string; delayMs?: number } = {},
): { served: Promise<void>; close(): void } {
  const p = sharedPaths(r);
  const lock = lockFile(p.lock);
  const door = openDoor(p.door);
  const served = (async () => {
    for await (const pid of door.knocks()) {
      if (opts.delayMs) await new Promise((done) => setTimeout(done, opts.delayMs));
      assert.equal(takeKnock(r.dir, pid), true, "the shell kept its token");
      const stdin = dec.decode(await launcherStdin(pid));
      if (opts.stdin !== undefined) assert.equal(stdin, opts.stdin);
      answerLauncher(r.dir, pid, answer);
      return;
    }
  })();
  return {
    served,
    close() {
      door.close();
      lock.close();
    },
  };
}

/** Waits until a process runs `flock` with `args` (the shell blocked on a lock). */
async function flockWaiting(args: string[]): Promise<void> {
  const want = ["flock", ...args].join("\0");
  for (;;) {
    for (const e of Deno.readDirSync("/proc")) {
      if (!/^\d+$/.test(e.name)) continue;
      try {
        if (Deno.readTextFileSync(`/proc/${e.name}/cmdline`).includes(want)) return;
      } catch { /* gone */ }
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}

Deno.test("door, shared servers: a start waits while another brings a server up, then knocks on its door", async () => {
  await withRig(async (r) => {
    const p = sharedPaths(r);
    // Another start brings the next server up: it holds `create` until that server takes pods.
    const create = lockFile(p.create);
    const out = r.start("opts");
    // The shell waits on the lock (a `flock` of its own), not in a Deno `start`.
    await Promise.race([
      flockWaiting(["-s", "-w", "30", "9"]),
      out.then((o) => {
        throw new Error(`the shell did not wait for the server: ${JSON.stringify(o)}`);
      }),
    ]);
    // The server opens its join point (lock and door), then `create` is let go.
    const server = sharedServerAtDoor(r, "unix:///run/containerd/s/joined", { stdin: "opts" });
    create.close();
    try {
      assert.deepEqual(await out, {
        code: 0,
        stdout: "unix:///run/containerd/s/joined",
        stderr: "",
      });
      await server.served;
    } finally {
      server.close();
    }
  }, SHARED);
});

Deno.test("door, shared servers: a busy server that takes the knock after a second still gets the start", async () => {
  await withRig(async (r) => {
    // Busy (a loaded node): the knock is taken only after the shell's first second. A spare's
    // door gives up then; a shared server's, alive and at normal priority, does not.
    const server = sharedServerAtDoor(r, "unix:///run/containerd/s/late", {
      stdin: "opts",
      delayMs: 1_500,
    });
    try {
      assert.deepEqual(await r.start("opts"), {
        code: 0,
        stdout: "unix:///run/containerd/s/late",
        stderr: "",
      });
      await server.served;
    } finally {
      server.close();
    }
  }, SHARED);
});

Deno.test("door, shared servers: with no server taking pods, Deno's start runs holding create", async () => {
  await withRig(async (r) => {
    // Nothing at any door, nobody bringing a server up: this start does, and the starts that
    // come meanwhile wait for it (the lock is held on fd 9 until Deno's start exits).
    assert.deepEqual(await r.start("opts"), {
      code: 0,
      stdout: "deno start: opts held fd=9\n",
      stderr: "",
    });
    // Held no longer: it went with the process.
    const again = Deno.openSync(sharedPaths(r).create, { read: true, write: true });
    try {
      assert.equal(again.tryLockSync(true), true);
    } finally {
      again.close();
    }
  }, SHARED);
  // Without shared servers the shell takes no lock.
  await withRig(async (r) => {
    assert.deepEqual(await r.start("opts"), { code: 0, stdout: "deno start: opts\n", stderr: "" });
    assert.equal([...Deno.readDirSync(r.dir)].some((e) => e.name.endsWith(".create")), false);
  });
});

Deno.test("door, shared servers: a server that fills up with a knock unread in its door sends the shell on to the spare", async () => {
  await withRig(async (r) => {
    const p = sharedPaths(r);
    const sharedLock = lockFile(p.lock);
    const door = openDoor(p.door);
    // The shared server reads the knock but fills up before taking it: it shuts its join point
    // (the door removed first, then the lock let go, as JoinPoint#shut does).
    const shut = (async () => {
      for await (const _ of door.knocks()) {
        door.close();
        sharedLock.close();
        return;
      }
    })();
    const spareLock = r.holdLock();
    try {
      const spare = spareAtDoor(r, async (pid) => {
        assert.equal(takeKnock(r.dir, pid), true, "its token, taken back from the shared door");
        assert.equal(dec.decode(await launcherStdin(pid)), "opts");
        answerLauncher(r.dir, pid, "unix:///run/containerd/s/spare");
      });
      assert.deepEqual(await r.start("opts"), {
        code: 0,
        stdout: "unix:///run/containerd/s/spare",
        stderr: "",
      });
      await Promise.all([shut, spare]);
    } finally {
      door.close();
      spareLock.close();
      try {
        sharedLock.close();
      } catch { /* closed */ }
    }
  }, SHARED);
});

Deno.test("door, shared servers: with a spare still loading, the shell waits for its door rather than boot Deno's start", async () => {
  await withRig(async (r) => {
    // A spare loading: it holds its lock, its door is not open yet.
    const lock = r.holdLock();
    const out = r.start("opts");
    let spare: Promise<void> | undefined;
    try {
      // The shell holds `create` while it waits (the burst's other starts wait behind it).
      const p = sharedPaths(r);
      let ended = false;
      void out.then(() => ended = true);
      for (;;) {
        if (ended) assert.fail(`the shell did not wait: ${JSON.stringify(await out)}`);
        const f = Deno.openSync(p.create, { read: true, write: true, create: true });
        const free = f.tryLockSync(true);
        f.close();
        if (!free) break;
        await new Promise((done) => setTimeout(done, 20));
      }
      // Loaded: the door opens, and the spare answers the knock.
      spare = spareAtDoor(r, async (pid) => {
        assert.equal(takeKnock(r.dir, pid), true);
        assert.equal(dec.decode(await launcherStdin(pid)), "opts");
        answerLauncher(r.dir, pid, "unix:///run/containerd/s/loaded");
      });
      assert.deepEqual(await out, {
        code: 0,
        stdout: "unix:///run/containerd/s/loaded",
        stderr: "",
      });
      await spare;
    } finally {
      lock.close();
    }
  }, SHARED);
});

Deno.test("door: the spares' directory is found by the shell's note of the address's hash, checked for its form", async () => {
  await withRig(async (r) => {
    const note = spareDirCache(r.address)!;
    const hash = r.dir.slice(-12);
    // The first start hashes the address and leaves the note beside the directory.
    assert.deepEqual(await r.start("a"), { code: 0, stdout: "deno start: a\n", stderr: "" });
    assert.equal(Deno.readTextFileSync(note), `${hash}\n`);
    const lock = r.holdLock();
    try {
      // The note is what a start goes by: one naming another directory misses this spare.
      Deno.writeTextFileSync(note, "0123456789ab\n");
      assert.deepEqual(await r.start("b"), { code: 0, stdout: "deno start: b\n", stderr: "" });
      // One not in the form of 12 hex digits is not used: hashed again, and written again.
      for (const bad of ["not-a-hash\n", "", "0123456789abc\n", "../../../tmp\n"]) {
        Deno.writeTextFileSync(note, bad);
        const spare = spareAtDoor(r, async (pid) => {
          assert.equal(takeKnock(r.dir, pid), true);
          await launcherStdin(pid);
          answerLauncher(r.dir, pid, "unix:///run/containerd/s/c");
        });
        assert.deepEqual(await r.start("c"), {
          code: 0,
          stdout: "unix:///run/containerd/s/c",
          stderr: "",
        }, `note ${JSON.stringify(bad)}`);
        await spare;
        assert.equal(Deno.readTextFileSync(note), `${hash}\n`);
      }
    } finally {
      lock.close();
    }
  });
});

Deno.test("door, shared servers: the namespace's hash is noted in the spares' directory", async () => {
  await withRig(async (r) => {
    assert.deepEqual(await r.start("o"), {
      code: 0,
      stdout: "deno start: o held fd=9\n",
      stderr: "",
    });
    assert.equal(Deno.readTextFileSync(`${r.dir}/ns-ns`), `${sha256Hex("ns").slice(0, 8)}\n`);
    // A bad note is not used: the start still finds the namespace's server by its hash.
    Deno.writeTextFileSync(`${r.dir}/ns-ns`, "zzzzzzzz\n");
    const server = sharedServerAtDoor(r, "unix:///run/containerd/s/ns");
    try {
      assert.deepEqual(await r.start("o"), {
        code: 0,
        stdout: "unix:///run/containerd/s/ns",
        stderr: "",
      });
      await server.served;
    } finally {
      server.close();
    }
  }, SHARED);
});

/**
 * A door FIFO that no spare reads (its spare died): the knocks written into it stay there, read
 * back at once, without waiting, when the test asks.
 */
function deadDoor(r: Rig): { knocks(): string; close(): void } {
  const path = `${r.dir}/spare-${KEY}.door`;
  mkfifo(path, 0o600);
  const fd = open(path, O.RDWR | O.NONBLOCK);
  return {
    knocks() {
      const buf = new Uint8Array(256);
      const n = readFd(fd, buf, "door");
      return n ? dec.decode(buf.subarray(0, n)) : "";
    },
    close() {
      close(fd);
      Deno.removeSync(path);
    },
  };
}

Deno.test("door: a lock naming a live pid is taken as held; one nobody holds is found out within the wait", async () => {
  await withRig(async (r) => {
    const lockPath = `${r.dir}/spare-${KEY}.lock`;
    // Nobody holds the lock, but the pid it names lives (its holder died, the pid was reused):
    // the shell knocks, finds the lock free within its first second, takes its token back and
    // goes the Deno way.
    Deno.writeTextFileSync(lockPath, `${Deno.pid}\n`);
    let door = deadDoor(r);
    try {
      const out = await r.start("o");
      assert.deepEqual(out, { code: 0, stdout: "deno start: o\n", stderr: "" });
      assert.match(door.knocks(), /^\d+\n$/, "it knocked: the pid was taken for a holder");
    } finally {
      door.close();
    }
    assert.deepEqual(
      [...Deno.readDirSync(r.dir)].map((e) => e.name).filter((n) => /^(start|taken)-/.test(n)),
      [],
      "its token taken back",
    );
    // A dead pid in it and nobody holding it: no knock at all.
    Deno.writeTextFileSync(lockPath, `${await deadPid()}\n`);
    door = deadDoor(r);
    try {
      assert.deepEqual(await r.start("p"), { code: 0, stdout: "deno start: p\n", stderr: "" });
      assert.equal(door.knocks(), "");
    } finally {
      door.close();
    }
  });
});

Deno.test("door: closed with knocks unread, it hands them over (their shells are told at once)", async () => {
  await withRig(async (r) => {
    const path = `${r.dir}/spare-${KEY}.door`;
    const door = openDoor(path);
    const w = Deno.openSync(path, { write: true });
    w.writeSync(new TextEncoder().encode("101\n202\nnot a pid\n303\n"));
    w.close();
    const unread: number[] = [];
    door.close((pid) => unread.push(pid));
    assert.deepEqual(unread, [101, 202, 303]);
    assert.equal(await Deno.stat(path).then(() => true, () => false), false, "the FIFO is gone");
    for await (const _ of door.knocks()) assert.fail("a closed door yields no knock");
    // With nobody to hand them to, they are dropped, as before.
    const again = openDoor(path);
    const w2 = Deno.openSync(path, { write: true });
    w2.writeSync(new TextEncoder().encode("404\n"));
    w2.close();
    again.close();
  });
});
