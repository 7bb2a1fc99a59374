import assert from "node:assert/strict";
import { integrationTest } from "../../_integration.ts";
import {
  close,
  mkfifo,
  O,
  open,
  preloadLibc,
  readFd,
  unreadBytes,
} from "../../../sdk/linux/libc.ts";
import { ProcessIo } from "../../../sdk/linux/process_io.ts";
import { parseOutputTarget } from "../../../sdk/linux/stdio_uri.ts";
import { ConsoleSocket } from "../../../sdk/linux/console.ts";
import { processStartTime } from "../../../sdk/linux/proc_stat.ts";
import type { ProcessExit } from "../../../sdk/linux/reaper.ts";
import { busyboxBundle, deadline, run } from "../../_linux_support.ts";

preloadLibc(); // bound once per file, so resource sanitizers see no new library

const ctx = { containerId: "c1", namespace: "ns1" };
const enc = new TextEncoder();
const dec = new TextDecoder();

/** A temp dir with stdin/stdout/stderr FIFOs, as containerd's client would create them. */
async function fifos(): Promise<{ dir: string; stdin: string; stdout: string; stderr: string }> {
  const dir = await Deno.makeTempDir({ prefix: "skiff-io-test-" });
  for (const name of ["stdin", "stdout", "stderr"]) mkfifo(`${dir}/${name}`, 0o600);
  return { dir, stdin: `${dir}/stdin`, stdout: `${dir}/stdout`, stderr: `${dir}/stderr` };
}

/** Reads from `file` until `text` has arrived (FIFOs we hold open never reach EOF). */
async function readUntil(file: Deno.FsFile, text: string): Promise<string> {
  let got = "";
  const buf = new Uint8Array(4096);
  while (!got.includes(text)) {
    const n = await file.read(buf);
    if (n === null) break;
    got += dec.decode(buf.subarray(0, n));
  }
  return got;
}

/** Reads `file` to end of file, which comes only once ProcessIo closed its end of the FIFO. */
async function readToEof(file: Deno.FsFile, what: string): Promise<string> {
  const chunks: Uint8Array[] = [];
  const read = (async () => {
    const buf = new Uint8Array(64 * 1024);
    for (let n; (n = await file.read(buf)) !== null;) chunks.push(buf.slice(0, n));
  })();
  await deadline(read, 20_000, `EOF on ${what}`);
  return dec.decode(new Uint8Array(chunks.flatMap((c) => [...c])));
}

Deno.test("parseOutputTarget() classifies fifo, file and binary URIs", () => {
  assert.deepEqual(parseOutputTarget("/run/a/out", "/run/a/err"), {
    kind: "fifo",
    stdout: "/run/a/out",
    stderr: "/run/a/err",
  });
  assert.deepEqual(parseOutputTarget("fifo:///run/a/out", ""), {
    kind: "fifo",
    stdout: "/run/a/out",
    stderr: "",
  });
  assert.deepEqual(parseOutputTarget("file:///var/log/x%20y.log", "file:///var/log/x%20y.log"), {
    kind: "file",
    path: "/var/log/x y.log",
  });
  assert.deepEqual(parseOutputTarget("binary-v2:///bin/log?b=2&a=1", ""), {
    kind: "binary",
    path: "/bin/log",
    args: ["b", "2", "a", "1"],
    requireReady: true,
  });
  assert.throws(() => parseOutputTarget("npipe://x", ""), /unsupported scheme "npipe"/);
});

Deno.test("ProcessIo.open() with empty strings gives null stdio", async () => {
  const io = await ProcessIo.open({ stdin: "", stdout: "", stderr: "", terminal: false }, ctx);
  assert.deepEqual(io.stdio, { stdin: "null", stdout: "null", stderr: "null" });
  await io.close();
});

Deno.test("ProcessIo.open() names the missing fifo", async () => {
  await assert.rejects(
    ProcessIo.open(
      { stdin: "/nonexistent/skiff/in", stdout: "", stderr: "", terminal: false },
      ctx,
    ),
    /open stdin fifo "\/nonexistent\/skiff\/in": No such file or directory \(ENOENT\)/,
  );
});

Deno.test("ProcessIo.close() finishes although the client never opened its fifo ends", async () => {
  const f = await fifos();
  try {
    const io = await deadline(
      ProcessIo.open({ ...f, terminal: false }, ctx),
      20_000,
      "ProcessIo.open on unopened fifos",
    );
    assert.deepEqual(io.stdio, { stdin: "piped", stdout: "piped", stderr: "piped" });
    await deadline(io.close(), 20_000, "ProcessIo.close");
  } finally {
    await Deno.remove(f.dir, { recursive: true });
  }
});

Deno.test("ProcessIo.close() finishes when a runtime took the streams and never used them", async () => {
  // A streams runtime whose create fails after streams() (a VM guest refusing the process)
  // closes none of them; the shim's cleanup must still end.
  for (const terminal of [false, true]) {
    const f = await fifos();
    try {
      const io = await ProcessIo.open({ ...f, terminal }, ctx);
      const s = io.streams();
      assert.ok(s.stdin && s.stdout, "stdin and stdout are handed over");
      await deadline(io.close(), 20_000, `ProcessIo.close (terminal ${terminal})`);
    } finally {
      await Deno.remove(f.dir, { recursive: true });
    }
  }
});

integrationTest(
  "ProcessIo copies fifo stdin to the process and its stdout/stderr to fifos",
  { binaries: ["sh"] },
  async () => {
    const f = await fifos();
    const io = await ProcessIo.open({ ...f, terminal: false }, ctx);
    // The client's ends (ProcessIo already holds the other side, so these opens do not block).
    const stdout = await Deno.open(f.stdout, { read: true });
    const stderr = await Deno.open(f.stderr, { read: true });
    const stdin = await Deno.open(f.stdin, { write: true });
    try {
      const child = new Deno.Command("sh", {
        args: ["-c", 'read line; echo "out:$line"; echo "err:$line" >&2'],
        ...io.stdio,
      }).spawn();
      io.attach(child);
      await stdin.write(enc.encode("hello\n"));
      assert.equal((await child.status).code, 0);
      assert.equal(await io.drain(), true);
      assert.equal(await readUntil(stdout, "\n"), "out:hello\n");
      assert.equal(await readUntil(stderr, "\n"), "err:hello\n");
    } finally {
      stdin.close();
      await io.close();
      stdout.close();
      stderr.close();
      await Deno.remove(f.dir, { recursive: true });
    }
  },
);

/**
 * Output a process left in its pipe and in the FIFO when it exited: more than the FIFO holds,
 * less than the pipe, the copy's chunk in hand and the FIFO hold together, so the process exits
 * while nobody reads.
 */
const EXIT_TAIL = 120_000;

/**
 * A process (`head`) that writes {@link EXIT_TAIL} bytes into a stdout FIFO and exits while they
 * are still on their way; `read(client)` runs meanwhile on the client's end (a read-only,
 * non-blocking descriptor). Returns once the process has exited; `done` awaits the reading and
 * tidies up.
 */
async function exitWithTail(
  read?: (client: number) => Promise<void>,
): Promise<{ io: ProcessIo; client: number; done(): Promise<void> }> {
  const f = await fifos();
  const io = await ProcessIo.open({ ...f, stderr: "", terminal: false }, ctx);
  const client = open(f.stdout, O.RDONLY | O.NONBLOCK);
  const reading = read?.(client);
  const done = async () => {
    await reading;
    await io.close();
    close(client);
    await Deno.remove(f.dir, { recursive: true });
  };
  try {
    const args = ["-c", String(EXIT_TAIL), "/dev/zero"];
    const child = new Deno.Command("head", { args, ...io.stdio }).spawn();
    io.attach(child);
    assert.equal((await deadline(child.status, 20_000, "head exit")).code, 0);
  } catch (e) {
    await done();
    throw e;
  }
  return { io, client, done };
}

integrationTest(
  "ProcessIo.landed() waits while a slow client takes what the process wrote before it exited",
  { binaries: ["head"] },
  async () => {
    // The client reads by hand: 4 KiB every 60 ms, so the tail takes about a second to land
    // (containerd 1.6's ctr closes its FIFOs as soon as it has the exit).
    let got = 0;
    let reading = true;
    const { io, client, done } = await exitWithTail(async (client) => {
      const buf = new Uint8Array(4096);
      while (reading) {
        got += readFd(client, buf, "stdout fifo") ?? 0;
        await new Promise((r) => setTimeout(r, 60));
      }
    });
    try {
      assert.equal(await io.landed(), true);
      // Everything the process wrote is with the client: its FIFO was read empty (containerd
      // 1.6 closes its FIFOs at the exit, losing what they hold).
      assert.equal(got + unreadBytes(client), EXIT_TAIL);
      assert.equal(unreadBytes(client), 0);
    } finally {
      reading = false;
      await done();
    }
  },
);

integrationTest(
  "ProcessIo.landed() gives up, and close() finishes, when the client never reads what its FIFO cannot hold",
  { binaries: ["head"] },
  async () => {
    const { io, client, done } = await exitWithTail();
    try {
      // Bounded: a client that stopped reading must not hold the exit.
      assert.equal(await deadline(io.landed(), 20_000, "landed() to give up"), false);
      assert.ok(unreadBytes(client) < EXIT_TAIL, `${unreadBytes(client)} bytes in the FIFO`);
      // The copy still waits to write into the full FIFO: close() ends that wait (Delete after
      // a client died holding its FIFOs full once hung here).
      await deadline(io.close(), 20_000, "close() with a copy waiting on a full FIFO");
    } finally {
      await done();
    }
  },
);

integrationTest(
  "ProcessIo.closeStdin() lets the process see EOF once the client closed too",
  { binaries: ["cat"] },
  async () => {
    const f = await fifos();
    const io = await ProcessIo.open({ ...f, stderr: "", terminal: false }, ctx);
    const stdout = await Deno.open(f.stdout, { read: true });
    try {
      const stdin = await Deno.open(f.stdin, { write: true });
      const child = new Deno.Command("cat", io.stdio).spawn();
      io.attach(child);
      await stdin.write(enc.encode("abc"));
      stdin.close();
      assert.equal(await readUntil(stdout, "abc"), "abc");
      await io.closeStdin(); // CloseIO: the last writer is gone, cat sees EOF and exits
      assert.equal((await deadline(child.status, 20_000, "cat exit")).code, 0);
    } finally {
      await io.close();
      stdout.close();
      await Deno.remove(f.dir, { recursive: true });
    }
  },
);

integrationTest(
  "ProcessIo shares one writer when stdout and stderr are the same fifo",
  { binaries: ["sh"] },
  async () => {
    const f = await fifos();
    const io = await ProcessIo.open(
      { stdin: "", stdout: f.stdout, stderr: f.stdout, terminal: false },
      ctx,
    );
    const out = await Deno.open(f.stdout, { read: true });
    try {
      assert.deepEqual(io.stdio, { stdin: "null", stdout: "piped", stderr: "piped" });
      const child = new Deno.Command("sh", { args: ["-c", "echo one; echo two >&2"], ...io.stdio })
        .spawn();
      io.attach(child);
      await child.status;
      assert.equal(await io.drain(), true);
      const text = await readUntil(out, "two\n");
      assert.deepEqual(text.split("\n").filter(Boolean).sort(), ["one", "two"]);
    } finally {
      await io.close();
      out.close();
      await Deno.remove(f.dir, { recursive: true });
    }
  },
);

integrationTest(
  "ProcessIo closes stdout/stderr fifos at exit: the client reads all output, then EOF",
  { binaries: ["sh", "head"] },
  async () => {
    for (const shared of [false, true]) {
      const f = await fifos();
      const stderrPath = shared ? f.stdout : f.stderr;
      const io = await ProcessIo.open(
        { stdin: "", stdout: f.stdout, stderr: stderrPath, terminal: false },
        ctx,
      );
      const out = await Deno.open(f.stdout, { read: true });
      const err = shared ? undefined : await Deno.open(f.stderr, { read: true });
      try {
        // More than a FIFO and a pipe hold, so EOF must wait for every byte to be copied.
        const child = new Deno.Command("sh", {
          args: ["-c", "head -c 1000000 /dev/zero | tr '\\0' o; echo; echo bye >&2"],
          ...io.stdio,
        }).spawn();
        io.attach(child);
        const [stdout, stderr] = await Promise.all([
          readToEof(out, `stdout fifo (shared: ${shared})`),
          err ? readToEof(err, "stderr fifo") : Promise.resolve(""),
        ]);
        assert.equal((await child.status).code, 0);
        const all = stdout + stderr;
        assert.equal(all.split("o").length - 1, 1_000_000);
        assert.match(all, /bye\n/);
        assert.equal(await io.drain(), true);
      } finally {
        await io.close(); // Delete: closing again is harmless
        out.close();
        err?.close();
        await Deno.remove(f.dir, { recursive: true });
      }
    }
  },
);

integrationTest(
  "ProcessIo with file:// appends stdout and stderr to one file",
  { binaries: ["sh"] },
  async () => {
    const dir = await Deno.makeTempDir({ prefix: "skiff-io-test-" });
    const path = `${dir}/nested/dir/log.txt`;
    try {
      await Deno.mkdir(`${dir}/nested/dir`, { recursive: true });
      await Deno.writeTextFile(path, "before\n");
      const uri = `file://${path}`;
      const io = await ProcessIo.open(
        { stdin: "", stdout: uri, stderr: uri, terminal: false },
        ctx,
      );
      const child = new Deno.Command("sh", { args: ["-c", "echo out; echo err >&2"], ...io.stdio })
        .spawn();
      io.attach(child);
      await child.status;
      assert.equal(await io.drain(), true);
      await io.close();
      const lines = (await Deno.readTextFile(path)).split("\n").filter(Boolean);
      assert.equal(lines[0], "before");
      assert.deepEqual(lines.slice(1).sort(), ["err", "out"]);
      assert.equal((await Deno.stat(path)).mode! & 0o777, 0o644);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
);

/** Writes a logger script that records its env, args and fds 3/4 into `dir`. */
async function loggerScript(dir: string, ready: "byte" | "eof"): Promise<string> {
  const path = `${dir}/logger-${ready}.sh`;
  const signal = ready === "byte" ? "printf x >&5" : "exec 5>&-";
  await Deno.writeTextFile(
    path,
    `#!/bin/sh
out="$2"
echo "$CONTAINER_ID $CONTAINER_NAMESPACE $*" > "$out/meta"
cat <&3 5>&- > "$out/stdout" &
cat <&4 5>&- > "$out/stderr" &
exec 3<&- 4<&-
${signal}
exec 5>&-
wait
`,
  );
  await Deno.chmod(path, 0o755);
  return path;
}

for (const scheme of ["binary", "binary-v2"] as const) {
  integrationTest(
    `ProcessIo with ${scheme}:// runs the logger with fds 3, 4 and 5`,
    { binaries: ["sh", "cat"] },
    async () => {
      const dir = await Deno.makeTempDir({ prefix: "skiff-io-test-" });
      try {
        const logger = await loggerScript(dir, scheme === "binary" ? "eof" : "byte");
        const uri = `${scheme}://${logger}?out=${encodeURIComponent(dir)}&level=debug`;
        const io = await ProcessIo.open(
          { stdin: "", stdout: uri, stderr: uri, terminal: false },
          ctx,
        );
        assert.deepEqual(io.stdio, { stdin: "null", stdout: "piped", stderr: "piped" });
        const child = new Deno.Command("sh", {
          args: ["-c", "echo out; echo err >&2"],
          ...io.stdio,
        })
          .spawn();
        io.attach(child);
        await child.status;
        assert.equal(await io.drain(), true);
        await io.close(); // closes fds 3/4 and waits for the logger to exit
        assert.equal(await Deno.readTextFile(`${dir}/meta`), `c1 ns1 out ${dir} level debug\n`);
        assert.equal(await Deno.readTextFile(`${dir}/stdout`), "out\n");
        assert.equal(await Deno.readTextFile(`${dir}/stderr`), "err\n");
      } finally {
        await Deno.remove(dir, { recursive: true });
      }
    },
  );
}

integrationTest(
  "ProcessIo with a binary:// logger is carried: the next code writes to the same logger and waits for its exit",
  { binaries: ["sh", "cat", "sleep"] },
  async () => {
    const dir = await Deno.makeTempDir({ prefix: "skiff-io-test-" });
    try {
      const logger = await loggerScript(dir, "eof");
      const uri = `binary://${logger}?out=${encodeURIComponent(dir)}`;
      const io = await ProcessIo.open(
        { stdin: "", stdout: uri, stderr: uri, terminal: false },
        ctx,
      );
      const child = new Deno.Command("sh", {
        args: ["-c", "sleep 0.3; echo after; echo err-after >&2"],
        ...io.stdio,
      }).spawn();
      io.attach(child);
      const carry = io.carry();
      const carried = carry.logger;
      assert.ok(carried, "the logger is carried");
      assert.equal(carried.startTime, processStartTime(carried.pid));
      assert.equal(carried.exitCode, undefined);
      assert.ok(carry.stdout && carry.stderr && carry.stdout.sink !== carry.stderr.sink);
      assert.throws(() => ProcessIo.adopt(carry), /adopting it needs the shim's reaper/);
      // In one process the previous code's Deno reaps the logger; the shim's reaper would
      // report it after a real upgrade: stand in for it.
      const reaper = {
        onExit(listener: (e: ProcessExit) => void): () => void {
          const timer = setInterval(() => {
            if (processStartTime(carried.pid) === carried.startTime) return;
            clearInterval(timer);
            listener({
              pid: carried.pid,
              startTime: carried.startTime,
              status: 0,
              exitedAt: new Date(),
            });
          }, 20);
          return () => clearInterval(timer);
        },
      };
      const next = ProcessIo.adopt(carry, { reaper });
      await child.status;
      assert.equal(await next.drain(), true);
      await next.close(); // closes fds 3/4 and waits for the logger's exit
      assert.equal(processStartTime(carried.pid), undefined, "the logger has exited");
      assert.equal(await Deno.readTextFile(`${dir}/stdout`), "after\n");
      assert.equal(await Deno.readTextFile(`${dir}/stderr`), "err-after\n");
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
);

integrationTest(
  "ProcessIo.open() rejects a missing logger and a binary-v2 logger that never signals ready",
  { binaries: ["sh", "cat"] },
  async () => {
    const dir = await Deno.makeTempDir({ prefix: "skiff-io-test-" });
    try {
      const eof = await loggerScript(dir, "eof");
      const uri = `binary-v2://${eof}?out=${encodeURIComponent(dir)}`;
      await assert.rejects(
        ProcessIo.open({ stdin: "", stdout: uri, stderr: uri, terminal: false }, ctx),
        /closed its wait pipe without signalling ready/,
      );
      const missing = `binary://${dir}/no-such-logger`;
      await assert.rejects(
        ProcessIo.open({ stdin: "", stdout: missing, stderr: missing, terminal: false }, ctx),
        new RegExp(`start binary logger "${dir}/no-such-logger": No such file`),
      );
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
);

integrationTest(
  "ProcessIo carries a runc container's stdio through fifos",
  { root: true, binaries: ["runc", "/bin/busybox"] },
  async () => {
    const bundle = await busyboxBundle({
      args: ["sh", "-c", 'read line; echo "got:$line"; echo problem >&2'],
    });
    const f = await fifos();
    const io = await ProcessIo.open({ ...f, terminal: false }, { ...ctx, containerId: bundle.id });
    const stdout = await Deno.open(f.stdout, { read: true });
    const stderr = await Deno.open(f.stderr, { read: true });
    const stdin = await Deno.open(f.stdin, { write: true });
    try {
      const create = bundle.runc(["create", "--bundle", bundle.dir, bundle.id], io.stdio).spawn();
      io.attach(create);
      assert.equal((await create.status).code, 0);
      await run(bundle.runc(["start", bundle.id], { stderr: "piped" }), "runc start");
      await stdin.write(enc.encode("ping\n"));
      // The container exits: its pipes close, copying finishes and the client sees EOF.
      assert.equal(await readToEof(stdout, "container stdout"), "got:ping\n");
      assert.equal(await readToEof(stderr, "container stderr"), "problem\n");
      assert.equal(await io.drain(20_000), true);
    } finally {
      stdin.close();
      await io.close();
      stdout.close();
      stderr.close();
      await bundle.cleanup();
      await Deno.remove(f.dir, { recursive: true });
    }
  },
);

integrationTest(
  "ProcessIo.attachPty() copies between the fifos and a runc terminal",
  { root: true, binaries: ["runc", "/bin/busybox"] },
  async () => {
    const bundle = await busyboxBundle({ args: ["sh"], terminal: true });
    const f = await fifos();
    const socket = await ConsoleSocket.create();
    const io = await ProcessIo.open({ ...f, stderr: "", terminal: true }, ctx);
    const stdout = await Deno.open(f.stdout, { read: true });
    const stdin = await Deno.open(f.stdin, { write: true });
    try {
      assert.deepEqual(io.stdio, { stdin: "null", stdout: "null", stderr: "null" });
      const master = socket.receiveMaster();
      await run(
        bundle.runc(
          ["create", "--bundle", bundle.dir, "--console-socket", socket.path, bundle.id],
          io.stdio,
        ),
        "runc create",
      );
      io.attachPty(await deadline(master, 20_000, "pty master"));
      await run(bundle.runc(["start", bundle.id], { stderr: "piped" }), "runc start");
      // A lot of output right before the exit: all of it arrives, then EOF.
      await stdin.write(enc.encode('echo "x""y"; head -c 300000 /dev/zero | tr "\\0" o; exit 0\n'));
      const text = await readToEof(stdout, "terminal output");
      assert.match(text, /(^|\n)xy\r\n/);
      const longest = Math.max(...(text.match(/o+/g) ?? [""]).map((run) => run.length));
      assert.equal(longest, 300000);
      assert.equal(await io.drain(20_000), true);
    } finally {
      stdin.close();
      await io.close();
      stdout.close();
      await socket.close();
      await bundle.cleanup();
      await Deno.remove(f.dir, { recursive: true });
    }
  },
);

Deno.test("ProcessIo a runtime took as streams is carried: the next code takes streams again over the same fifos", async () => {
  const f = await fifos();
  const io = await ProcessIo.open({ ...f, terminal: false }, ctx);
  // The client's ends, as containerd's would be.
  const stdout = await Deno.open(f.stdout, { read: true });
  const stdin = await Deno.open(f.stdin, { write: true });
  let next: ProcessIo | undefined;
  try {
    const before = io.streams();
    assert.ok(before.stdin && before.stdout && before.stderr, "all three are handed over");
    const w1 = before.stdout.getWriter();
    await w1.write(enc.encode("one\n"));
    assert.equal(io.inHand, false, "the chunk is written: nothing in hand");
    // The old code's streams are left as they are (its process image is replaced): closing
    // them here would close the carried descriptors.
    w1.releaseLock();

    const carry = io.carry();
    assert.deepEqual(carry.streams, { terminal: false }, "the carry says the streams were taken");
    assert.ok(carry.stdin && carry.stdin.keepAlive !== undefined, "stdin fifo and its keep-alive");
    assert.equal(carry.stdin.pipe, undefined, "no pipes: the runtime moved the bytes");
    assert.ok(carry.stdout && carry.stderr && carry.stdout.sink !== carry.stderr.sink);
    assert.equal(carry.stdout.pipe, undefined);
    assert.equal(carry.stderr.pipe, undefined);

    next = ProcessIo.adopt(carry);
    const after = next.streams(); // not attached: the next code takes them again
    assert.ok(after.stdin && after.stdout && after.stderr, "all three are handed over again");
    const w2 = after.stdout.getWriter();
    await w2.write(enc.encode("two\n"));
    await w2.write(enc.encode("three\n"));

    // The client writes stdin; the next code's stream reads it.
    await stdin.write(enc.encode("ping\n"));
    const reader = after.stdin.getReader();
    let got = "";
    while (!got.includes("\n")) {
      const { done, value } = await deadline(reader.read(), 20_000, "carried stdin");
      if (done) break;
      got += dec.decode(value);
    }
    assert.equal(got, "ping\n");
    reader.releaseLock();

    // The runtime ends stdout: the fifo is closed, and the client has every byte once, in order.
    await w2.close();
    assert.equal(await readToEof(stdout, "carried stdout fifo"), "one\ntwo\nthree\n");
    await after.stderr.close();
    assert.equal(await next.drain(20_000), true, "both writables closed: drained");
  } finally {
    stdin.close();
    // Only the next code's io is closed: the first one's descriptors are the same ones.
    await (next ?? io).close();
    stdout.close();
    await Deno.remove(f.dir, { recursive: true });
  }
});

Deno.test("ProcessIo.inHand is true while a chunk written into a streams writable is not yet in its target", async () => {
  const f = await fifos();
  const io = await ProcessIo.open({ ...f, stdin: "", stderr: "", terminal: false }, ctx);
  // The client's end of stdout, not read until the chunk is known to be held.
  const stdout = await Deno.open(f.stdout, { read: true });
  try {
    const { stdout: out } = io.streams();
    assert.ok(out);
    const writer = out.getWriter();
    await writer.write(enc.encode("x")); // the stream has started, the fifo takes one byte
    assert.equal(io.inHand, false);
    // More than a FIFO holds (64 KiB by default, 1 MiB at most): the write waits for the reader.
    const size = 4 * 1024 * 1024;
    let written = false;
    const big = writer.write(new Uint8Array(size).fill(0x6f)).then(() => written = true);
    // Bounded wait, no timing assertion: the write cannot finish while nobody reads.
    for (let i = 0; i < 1000 && !io.inHand; i++) await new Promise((r) => setTimeout(r, 10));
    assert.equal(io.inHand, true, "the chunk is in hand while the fifo is full");
    assert.equal(written, false, "the write is still pending");
    // The client reads: the write finishes, nothing is in hand any more.
    let read = 0;
    const buf = new Uint8Array(64 * 1024);
    const reading = (async () => {
      while (read < size + 1) {
        const n = await stdout.read(buf);
        if (n === null) break;
        read += n;
      }
    })();
    await deadline(big, 20_000, "the big write");
    await deadline(reading, 20_000, "the client's read");
    assert.equal(read, size + 1);
    assert.equal(io.inHand, false, "written: nothing in hand");
    await writer.close();
  } finally {
    await io.close();
    stdout.close();
    await Deno.remove(f.dir, { recursive: true });
  }
});
