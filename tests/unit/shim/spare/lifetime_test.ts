// What a leaving spare takes with it (tidySpareDir in sdk/shim/spare/lifetime.ts): a gone
// containerd's spares' directory and the launcher's note of its name, once no process of that
// containerd runs; and, with the launcher's real shell (startDoorPath in sdk/install/install.ts),
// that a start after it hashes again and goes on, and that a start under way keeps everything.
import assert from "node:assert/strict";
import { addressInUse, tidySpareDir } from "../../../../sdk/shim/spare/lifetime.ts";
import { spareDir, spareDirCache } from "../../../../sdk/shim/spare/config.ts";
import { startDoorPath } from "../../../../sdk/install/install.ts";
import { processStartTime } from "../../../../sdk/linux/proc_stat.ts";
import { mkfifo } from "../../../../sdk/linux/libc.ts";

const dec = new TextDecoder();
const CODE = "0123456789abcdef".repeat(4);
const KEY = CODE.slice(0, 16);

function exists(path: string): boolean {
  try {
    Deno.lstatSync(path);
    return true;
  } catch {
    return false;
  }
}

/** A socket dir with one containerd's spares' directory in it, as a day of starts leaves it. */
async function withLeftovers(
  fn: (p: { address: string; dir: string; note: string }) => Promise<void>,
): Promise<void> {
  const root = await Deno.makeTempDir({ prefix: "skiff-tidy-" });
  const address = `${root}/containerd.sock`;
  const dir = spareDir(address, root);
  const note = spareDirCache(address, root)!;
  await Deno.mkdir(`${dir}/rehearsal-999999999/bundle`, { recursive: true, mode: 0o700 });
  for (const name of [`spare-${KEY}.lock`, `spare-${KEY}.claim`, `shared-${KEY}-01234567.lock`]) {
    await Deno.writeTextFile(`${dir}/${name}`, "999999999\n");
  }
  await Deno.writeTextFile(`${dir}/stats-0123456789abcdef.json`, '{"adopted":1,"cold":2}\n');
  await Deno.writeTextFile(`${dir}/ns-default`, "37a8eec1\n");
  mkfifo(`${dir}/spare-${KEY}.door`, 0o600); // a SIGKILLed spare's
  await Deno.writeTextFile(note, `${dir.slice(-12)}\n`);
  try {
    await fn({ address, dir, note });
  } finally {
    await Deno.remove(root, { recursive: true });
  }
}

Deno.test("tidySpareDir: a gone containerd's directory and note go; a live one's stay", async () => {
  await withLeftovers(async ({ address, dir, note }) => {
    // containerd: a process listening at the address.
    const listen = `Deno.listen({ transport: "unix", path: ${JSON.stringify(address)} });`;
    const containerd = new Deno.Command(Deno.execPath(), {
      args: ["eval", `${listen} setInterval(() => {}, 1e6);`],
    }).spawn();
    for (let i = 0; !exists(address); i++) {
      assert.ok(i < 2000, "containerd listens");
      await new Promise((done) => setTimeout(done, 5));
    }
    assert.equal(await tidySpareDir(dir, address), false, "containerd listens");
    assert.ok(exists(dir) && exists(note));
    // SIGKILLed: the socket file is left with nobody accepting. While the process the spare was
    // spawned under lives, containerd is taken to live (nothing is asked).
    containerd.kill("SIGKILL");
    await containerd.status;
    assert.ok(exists(address));
    const daemon = `${Deno.pid}:${processStartTime(Deno.pid)}`;
    assert.equal(await tidySpareDir(dir, address, daemon), false, "its process lives");
    assert.ok(exists(dir) && exists(note));
    // Gone: the connection is refused.
    assert.equal(await tidySpareDir(dir, address, `${Deno.pid}:1`), true);
    assert.ok(!exists(dir), "the directory, with everything in it");
    assert.ok(!exists(note), "the launcher's note");
    // Once more: nothing to do, and nothing fails.
    assert.equal(await tidySpareDir(dir, address), true);
    // No socket at all (a containerd stopped): gone, whatever process the spare names.
    Deno.removeSync(address);
    Deno.mkdirSync(dir);
    assert.equal(await tidySpareDir(dir, address, daemon), true);
    assert.ok(!exists(dir));
  });
});

Deno.test("tidySpareDir: a process naming the address (a shim, a start) keeps everything", async () => {
  await withLeftovers(async ({ address, dir, note }) => {
    for (const args of [["-address", address], [`--address=${address}`]]) {
      // As containerd runs a shim's action: the launcher's shell, with the address in its argv
      // (waiting in a builtin: a child it forked would show its argv too for a moment).
      const child = new Deno.Command("sh", {
        args: ["-c", "read x", "sh", "-namespace", "ns", ...args, "start"],
        stdin: "piped",
      }).spawn();
      try {
        for (let i = 0; !addressInUse(address); i++) {
          assert.ok(i < 500, `${args}: seen once it runs`);
          await new Promise((done) => setTimeout(done, 5));
        }
        assert.equal(await tidySpareDir(dir, address), false);
        assert.ok(exists(dir) && exists(note) && exists(`${dir}/spare-${KEY}.door`));
      } finally {
        await child.stdin.close(); // its `read` ends, and so does it
        await child.status;
      }
    }
    assert.ok(!addressInUse(address));
    // Another containerd's address (this one's a prefix of it) is not this one.
    const other = new Deno.Command("sh", {
      args: ["-c", "read x", "sh", "-address", `${address}.other`],
      stdin: "piped",
    }).spawn();
    try {
      assert.equal(await tidySpareDir(dir, address), true);
    } finally {
      await other.stdin.close();
      await other.status;
    }
    assert.ok(!exists(dir) && !exists(note));
  });
});

interface Rig {
  address: string;
  dir: string;
  note: string;
  /** The launcher's `start`: its exit code and output. */
  start(stdin: string): { pid: number; out: Promise<string> };
}

/** A launcher with the real door path, under the default socket dir (the shell's own). */
async function withLauncher(fn: (r: Rig) => Promise<void>): Promise<void> {
  const root = await Deno.makeTempDir({ prefix: "skiff-tidy-door-" });
  const address = `${root}/containerd.sock`;
  const dir = spareDir(address);
  const note = spareDirCache(address)!;
  const launcher = `${root}/containerd-shim-tidy-v2`;
  await Deno.writeTextFile(
    launcher,
    [
      "#!/bin/sh",
      `SKIFF_SHIM_CODE=${CODE}`,
      "export SKIFF_SHIM_CODE",
      'for a in "$@"; do last=$a; done',
      ...startDoorPath(),
      'echo "deno start: $(cat)"', // stands for Deno's start
      "",
    ].join("\n"),
    { mode: 0o755 },
  );
  const rig: Rig = {
    address,
    dir,
    note,
    start(stdin) {
      const child = new Deno.Command(launcher, {
        args: ["-namespace", "ns", "-address", address, "-id", "c1", "start"],
        cwd: root,
        stdin: "piped",
        stdout: "piped",
        stderr: "piped",
      }).spawn();
      const w = child.stdin.getWriter();
      const out = w.write(new TextEncoder().encode(stdin)).then(() => w.close())
        .then(() => child.output())
        .then((o) => `${o.code} ${dec.decode(o.stdout)}${dec.decode(o.stderr)}`);
      return { pid: child.pid, out };
    },
  };
  try {
    await fn(rig);
  } finally {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
    await Deno.remove(note).catch(() => {});
    await Deno.remove(root, { recursive: true });
  }
}

Deno.test("tidySpareDir and the launcher's shell: a start after it hashes again and goes on", async () => {
  await withLauncher(async (r) => {
    await Deno.mkdir(r.dir, { recursive: true, mode: 0o700 });
    assert.equal(await r.start("a").out, "0 deno start: a\n");
    assert.equal(Deno.readTextFileSync(r.note), `${r.dir.slice(-12)}\n`, "noted");
    // No containerd at the address, no process naming it: both go.
    assert.equal(await tidySpareDir(r.dir, r.address), true);
    assert.ok(!exists(r.dir) && !exists(r.note));
    // The next start finds neither: it hashes, and goes Deno's way (whose server makes the
    // directory again); no note for a directory that is not there.
    assert.equal(await r.start("b").out, "0 deno start: b\n");
    assert.ok(!exists(r.note));
    await Deno.mkdir(r.dir, { mode: 0o700 });
    assert.equal(await r.start("c").out, "0 deno start: c\n");
    assert.equal(Deno.readTextFileSync(r.note), `${r.dir.slice(-12)}\n`, "noted again");
  });
});

Deno.test("tidySpareDir and the launcher's shell: a start knocking at a dead spare's door keeps everything", async () => {
  await withLauncher(async (r) => {
    await Deno.mkdir(r.dir, { recursive: true, mode: 0o700 });
    // A SIGKILLed spare's door, and its lock naming a live pid (reused): the shell knocks, and
    // waits up to a second before it finds the lock free. Were the directory removed under it
    // before it made its token, the shell would end there (a failed redirection of `:`).
    const door = `${r.dir}/spare-${KEY}.door`;
    mkfifo(door, 0o600);
    Deno.writeTextFileSync(`${r.dir}/spare-${KEY}.lock`, `${Deno.pid}\n`);
    const holder = Deno.openSync(door, { read: true, write: true }); // its knock is kept
    try {
      const start = r.start("o");
      const token = `${r.dir}/start-${start.pid}`;
      for (let i = 0; !exists(token); i++) {
        assert.ok(i < 500, "the shell knocked");
        await new Promise((done) => setTimeout(done, 5));
      }
      assert.equal(await tidySpareDir(r.dir, r.address), false, "a start of it runs");
      assert.ok(exists(token) && exists(door) && exists(r.dir));
      assert.equal(await start.out, "0 deno start: o\n", "it goes Deno's way, as without");
    } finally {
      holder.close();
    }
    assert.equal(await tidySpareDir(r.dir, r.address), true);
    assert.ok(!exists(r.dir) && !exists(r.note));
  });
});
