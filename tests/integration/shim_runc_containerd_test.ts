/**
 * The skiff runc example shim (`containerd-shim-skiff-runc-v2`) under real containerd 1.6, 1.7
 * and 2.x, driven only through each version's own `ctr`: run, exit codes, stdin, exec, kill,
 * pause, ps, metrics, OOM, terminals, log URIs, grouped containers, a containerd restart and a
 * crash, and a SIGKILLed shim server. Event order is checked through `ctr events`.
 *
 * One private containerd per version, reused by all of that version's steps; the image is
 * imported once per version. Every step uses its own container id, so a failing step leaves
 * the others meaningful, and the final step checks that nothing (shims, mounts, sockets) was
 * left behind.
 */
import assert from "node:assert/strict";
import { integrationTest } from "../_integration.ts";
import {
  containerdVersions,
  type CtrResult,
  type PrivateContainerd,
  startContainerd,
} from "../../sdk/testing/containerd.ts";
import {
  ctrRun,
  ctrRunArgs,
  type CtrRunOptions,
  RUNC_RUNTIME,
  shellQuote,
} from "../../sdk/testing/ctr.ts";
import { installExampleShims } from "../../sdk/install/examples.ts";
import { processAlive } from "../../sdk/linux/proc_stat.ts";

const RUNTIME = "io.containerd.skiff-runc.v2";
const LAUNCHER = "containerd-shim-skiff-runc-v2";
const NEEDS = {
  root: true,
  binaries: ["runc", "busybox", "script", "mount", "umount", "sh"],
};

/** Generous bound for things that must happen eventually (never a timing assertion). */
const EVENTUALLY_MS = 60_000;

function uid(tag: string): string {
  return `${tag}-${crypto.randomUUID().slice(0, 8)}`;
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Polls `probe` until it returns a value other than undefined; fails after a long bound. */
async function eventually<V>(what: string, probe: () => Promise<V | undefined>): Promise<V> {
  const until = Date.now() + EVENTUALLY_MS;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > until) throw new Error(`gave up waiting for ${what}`);
    await sleep(50);
  }
}

/** True once `pid` is gone entirely (exited and reaped by its parent), else undefined. */
function reaped(pid: number): true | undefined {
  return exists(`/proc/${pid}`) ? undefined : true;
}

function describe(r: CtrResult): string {
  return `code ${r.code}${
    r.timedOut ? " (timed out)" : ""
  }\nstdout: ${r.stdout}\nstderr: ${r.stderr}`;
}

async function sha256Hex(text: string): Promise<string> {
  const h = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)));
  return Array.from(h, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** The socket a skiff shim serves a container on (no group annotation: the id is the group). */
async function shimSocket(c: PrivateContainerd, ns: string, id: string): Promise<string> {
  return `/run/containerd/s/${await sha256Hex(`${c.address}/${ns}/${id}`)}`;
}

function exists(path: string): boolean {
  try {
    Deno.lstatSync(path);
    return true;
  } catch {
    return false;
  }
}

/**
 * Runs `argv` under `script` so it has a terminal (ctr refuses `-t` without one). Like
 * `ctrRun({ tty })`, stdin stays open until the command exits, so `script` sees no hangup.
 */
async function underScript(argv: string[], env: Record<string, string>): Promise<CtrResult> {
  const child = new Deno.Command("script", {
    args: ["-q", "-e", "-c", argv.map(shellQuote).join(" "), "/dev/null"],
    env,
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const timer = setTimeout(() => child.kill("SIGKILL"), EVENTUALLY_MS);
  try {
    const out = await child.output();
    const dec = new TextDecoder();
    return {
      code: out.code,
      stdout: dec.decode(out.stdout),
      stderr: dec.decode(out.stderr),
      timedOut: out.signal === "SIGKILL",
    };
  } finally {
    clearTimeout(timer);
    await child.stdin.close().catch(() => {});
  }
}

/**
 * Runs ctr with piped stdio; `talk` reads its stdout (and may write its stdin) and returns the
 * output. ctr is killed after {@link EVENTUALLY_MS}.
 */
async function ctrTalk(
  c: PrivateContainerd,
  ns: string,
  args: string[],
  talk: (child: Deno.ChildProcess) => Promise<string>,
): Promise<CtrResult> {
  const child = new Deno.Command(`${c.binDir}/ctr`, {
    args: ["-a", c.address, "-n", ns, ...args],
    env: c.ctrEnv,
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    child.kill("SIGKILL");
  }, EVENTUALLY_MS);
  try {
    const stderr = new Response(child.stderr).text();
    const stdout = await talk(child);
    const status = await child.status;
    return { code: status.code, stdout, stderr: await stderr, timedOut };
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Runs ctr with its stdin on a pipe: waits until the container printed "ready", then writes
 * `input` and closes the pipe. (ctr sends CloseIO on stdin EOF only once the task exists; an
 * EOF that comes earlier is lost, a race in ctr itself.)
 */
function ctrWithInput(
  c: PrivateContainerd,
  ns: string,
  args: string[],
  input: string,
): Promise<CtrResult> {
  return ctrTalk(c, ns, args, async (child) => {
    const dec = new TextDecoder();
    const reader = child.stdout.getReader();
    let stdout = "";
    let done = false;
    while (!done && !stdout.includes("ready\n")) {
      const r = await reader.read();
      done = r.done;
      if (r.value) stdout += dec.decode(r.value, { stream: true });
    }
    const w = child.stdin.getWriter();
    await w.write(new TextEncoder().encode(input)).catch(() => {});
    await w.close().catch(() => {});
    while (!done) {
      const r = await reader.read();
      done = r.done;
      if (r.value) stdout += dec.decode(r.value, { stream: true });
    }
    return stdout;
  });
}

/** How fast {@link ctrReadSlowly} takes ctr's output: bytes per millisecond (~200 KB/s). */
const SLOW_READ_BYTES_PER_MS = 200;
/** In steps this small, so ctr's copy (32 KiB at a time) is never held long. */
const SLOW_READ_STEP = 4096;

/**
 * Runs ctr and reads its stdout slowly, as a loaded node's client would: ctr cannot read the
 * container's FIFO faster than its own stdout drains. The container exits with a large tail of
 * its output still between it and ctr (its pipe, the shim, the FIFO, ctr's stdout pipe).
 */
function ctrReadSlowly(c: PrivateContainerd, ns: string, args: string[]): Promise<CtrResult> {
  return ctrTalk(c, ns, args, async (child) => {
    await child.stdin.close();
    const dec = new TextDecoder();
    let stdout = "";
    const reader = child.stdout.getReader({ mode: "byob" });
    for (;;) {
      const { done, value } = await reader.read(new Uint8Array(SLOW_READ_STEP));
      if (done) break;
      stdout += dec.decode(value, { stream: true });
      await sleep(value.byteLength / SLOW_READ_BYTES_PER_MS);
    }
    return stdout;
  });
}

/** Removes the (empty) cgroup dirs `/<name>` left in every cgroup v1 hierarchy. */
async function removeCgroupDirs(name: string): Promise<void> {
  let hierarchies: Deno.DirEntry[];
  try {
    hierarchies = [...Deno.readDirSync("/sys/fs/cgroup")];
  } catch {
    return;
  }
  for (const h of hierarchies) {
    const dirs: string[] = [];
    const walk = (d: string) => {
      try {
        for (const e of Deno.readDirSync(d)) if (e.isDirectory) walk(`${d}/${e.name}`);
        dirs.push(d);
      } catch { /* not in this hierarchy */ }
    };
    walk(`/sys/fs/cgroup/${h.name}/${name}`);
    // Children first; a cgroup dir is removed with rmdir although it lists files.
    for (const d of dirs) await Deno.remove(d).catch(() => {});
  }
}

/**
 * `ctr events` running in the background, collecting lines. containerd restarts end a
 * subscription, so {@linkcode EventLog.resubscribe} starts a new one; the text accumulates.
 */
class EventLog {
  #c: PrivateContainerd;
  #ns: string;
  #child: Deno.ChildProcess | undefined;
  #text = "";
  #done: Promise<void> = Promise.resolve();

  constructor(c: PrivateContainerd, ns: string) {
    this.#c = c;
    this.#ns = ns;
    this.resubscribe();
  }

  resubscribe(): void {
    this.#child = new Deno.Command(`${this.#c.binDir}/ctr`, {
      args: ["-a", this.#c.address, "-n", this.#ns, "events"],
      env: this.#c.ctrEnv,
      stdin: "null",
      stdout: "piped",
      stderr: "null",
    }).spawn();
    const dec = new TextDecoder();
    this.#done = this.#child.stdout.pipeTo(
      new WritableStream({ write: (chunk) => void (this.#text += dec.decode(chunk)) }),
    ).catch(() => {});
  }

  /** Events of one container, in arrival order: topic plus the decoded event. */
  of(containerId: string): { topic: string; event: Record<string, unknown> }[] {
    const out: { topic: string; event: Record<string, unknown> }[] = [];
    for (const line of this.#text.split("\n")) {
      // "<date> <time> <zone> <namespace> <topic> <json>" (the timestamp has spaces)
      const m = / (\/[a-z/-]+) (\{.*\})$/.exec(line);
      if (!m) continue;
      let event: Record<string, unknown>;
      try {
        event = JSON.parse(m[2]!);
      } catch {
        continue;
      }
      if (field(event, "container_id", "ContainerID") === containerId) {
        out.push({ topic: m[1]!, event });
      }
    }
    return out;
  }

  /** Waits until `containerId` has an event with `topic`; returns all its events. */
  until(containerId: string, topic: string) {
    return eventually(`a ${topic} event of ${containerId}`, () => {
      const list = this.of(containerId);
      return Promise.resolve(list.some((e) => e.topic === topic) ? list : undefined);
    });
  }

  get text(): string {
    return this.#text;
  }

  async stop(): Promise<void> {
    try {
      this.#child?.kill("SIGKILL");
    } catch { /* exited */ }
    await this.#child?.status;
    await this.#done;
  }
}

/** Reads a field of a `ctr events` JSON event whatever its spelling (snake or Go case). */
function field(event: Record<string, unknown>, ...names: string[]): unknown {
  for (const n of names) if (n in event) return event[n];
  return undefined;
}

const versions = containerdVersions();

// The per-version tests below exist only for versions found: make a missing one visible.
integrationTest("the skiff runc shim is tested under containerd 1.6, 1.7, 2.1, 2.2, 2.3, 2.4", {
  ...NEEDS,
  check() {
    const have = versions.map((v) => v.version);
    const lacking = ["1.6", "1.7", "2.1", "2.2", "2.3", "2.4"].filter((p) =>
      !have.some((h) => h.startsWith(`${p}.`))
    );
    return lacking.length > 0
      ? `containerd ${lacking.join(", ")} (found ${have.join(", ") || "none"}; ` +
        "run tests/setup/prepare.sh as root)"
      : undefined;
  },
}, () => {
  assert.ok(versions.length >= 6, versions.map((v) => v.version).join(", "));
  return Promise.resolve();
});

for (const v of versions) {
  integrationTest(
    `skiff runc shim under containerd ${v.version}: ctr run, exec, kill, pause, ps, tty, logs, restart, dead shim`,
    NEEDS,
    async (t) => {
      const prefix = await Deno.makeTempDir({ prefix: "skiff-shim-ctrd-" });
      await installExampleShims({ prefix, shims: { [LAUNCHER]: "examples/runc/main.ts" } });
      const c = await startContainerd({
        binDir: v.binDir,
        runtimes: { skiff: { runtimeType: RUNTIME, binaryDir: `${prefix}/bin` } },
      });
      const ns = uid("skiff-shim");
      // runc state goes to the private containerd's runc root, so stop() cleans it up.
      const runtimeConfig = `${prefix}/runc.toml`;
      await Deno.writeTextFile(runtimeConfig, `Root = "${c.runcRoot}"\n`);
      const events = new EventLog(c, ns);
      const ids: string[] = [];
      /** Group keys: their sockets are not named after a container id. */
      const groups: string[] = [];
      let image = "";

      const track = (id: string) => {
        ids.push(id);
        return id;
      };
      const run = (o: Omit<CtrRunOptions, "image" | "namespace" | "runtime">) => {
        track(o.id);
        return ctrRun(c, {
          ...o,
          image,
          namespace: ns,
          runtime: "skiff",
          runtimeConfigPath: runtimeConfig,
        });
      };
      const ctr = (args: string[]) => c.ctr(args, { namespace: ns, timeoutMs: 60_000 });
      const ok = async (args: string[]) => {
        const r = await ctr(args);
        assert.equal(r.code, 0, `ctr ${args.join(" ")}: ${describe(r)}`);
        return r;
      };
      /** `ctr task ls` as id → { pid, status }. */
      const tasks = async () => {
        const r = await ok(["tasks", "ls"]);
        const out = new Map<string, { pid: number; status: string }>();
        for (const line of r.stdout.split("\n").slice(1)) {
          const [id, pid, status] = line.trim().split(/\s+/);
          if (id && pid && status) out.set(id, { pid: Number(pid), status });
        }
        return out;
      };
      const statusOf = async (id: string) => (await tasks()).get(id)?.status;
      const becomes = (id: string, status: string) =>
        eventually(`task ${id} to be ${status}`, async () => {
          const s = await statusOf(id);
          return s === status ? s : undefined;
        });
      /** A detached `sleep` container, RUNNING. */
      const sleeper = async (tag: string) => {
        const id = uid(tag);
        const r = await run({ id, detach: true, args: ["sleep", "600"] });
        assert.equal(r.code, 0, describe(r));
        await becomes(id, "RUNNING");
        return id;
      };
      /**
       * Deletes a stopped task and its container; returns the exit status `ctr task delete`
       * reports ("task <id> exit with non-zero exit code N" on stderr, nothing for 0).
       */
      const remove = async (id: string) => {
        const del = await ok(["tasks", "delete", id]);
        await ok(["containers", "delete", id]);
        const m = /exit with non-zero exit code (\d+)/.exec(del.stderr);
        return m ? Number(m[1]) : 0;
      };

      try {
        image = await c.importBusyboxImage(ns);

        await t.step("ctr run --rm: the container's stdout and stderr reach ctr", async () => {
          const id = uid("echo");
          const r = await run({
            id,
            args: ["sh", "-c", "echo hello from skiff; echo to-stderr >&2"],
          });
          assert.equal(r.code, 0, describe(r));
          assert.equal(r.stdout, "hello from skiff\n");
          assert.equal(r.stderr, "to-stderr\n");
          const seen = await events.until(id, "/tasks/delete");
          assert.deepEqual(seen.map((e) => e.topic), [
            "/tasks/create",
            "/tasks/start",
            "/tasks/exit",
            "/tasks/delete",
          ]);
        });

        await t.step("ctr run --rm: large output arrives whole and in order", async () => {
          const r = await run({
            id: uid("seq"),
            args: ["sh", "-c", "seq 1 200000; seq 1 5000 >&2"],
          });
          assert.equal(r.code, 0, describe(r).slice(0, 300));
          const out = r.stdout.split("\n");
          assert.equal(out.length, 200001);
          assert.equal(out[0], "1");
          assert.equal(out[199999], "200000");
          assert.equal(r.stderr.split("\n").length, 5001);
        });

        await t.step(
          "ctr run --rm read slowly: the output's tail arrives before the exit",
          async () => {
            // containerd 1.6's ctr closes its FIFOs as soon as it has the exit (its task Delete
            // closes before it waits for its copies): the shim may publish the exit only once the
            // output the process left behind has reached the FIFO, however slowly ctr reads it.
            const id = track(uid("slow"));
            const r = await ctrReadSlowly(c, ns, [
              ...ctrRunArgs(c, {
                id,
                image,
                namespace: ns,
                runtime: "skiff",
                runtimeConfigPath: runtimeConfig,
                args: ["seq", "1", "60000"],
              }),
            ]);
            assert.equal(r.code, 0, describe(r).slice(0, 300));
            const out = r.stdout.split("\n");
            assert.equal(out.length, 60001, `last line ${out.at(-2)}`);
            assert.equal(out[59999], "60000");
          },
        );

        await t.step("memory limit exceeded: /tasks/oom, then exit status 137", async () => {
          // containerd's contract: once a started task exceeds its memory limit, at least one
          // /tasks/oom, every one of them after start and before delete, and exit status 137.
          // The memory fills only once /tasks/start has arrived: containerd's Go runc shim before
          // 2.2 adds the cgroup to its OOM watcher after `runc start` has returned, just before
          // it publishes /tasks/start (task/service.go, Start; 2.2 on, in Create), so a container
          // killed in its first milliseconds is an OOM it never reports (CI, under load, gave up
          // waiting for the Go shim's /tasks/oom; the conformance `oom` scenario steps around the
          // same race with a `sleep 1`). skiff watches from Create on, before /tasks/create: it
          // is also held to the kill in its first milliseconds, `tail /dev/zero` at once.
          // How many /tasks/oom depends on the kernel's memory events (the Go shim publishes one
          // or two for this very command here), and under load the Go shim's OOM watcher can
          // publish after /tasks/exit (seen on 1.7.24), so neither the count nor the order
          // against exit is asserted. The Go shim forwards events asynchronously and exits on
          // the Shutdown that follows Delete, so its /tasks/delete is sometimes lost (seen on
          // 2.1.9): skiff's must arrive, the Go shim's may be missing, and may even overtake its
          // /tasks/exit (seen on 2.4.2). The Go shim runs the same scenario under the same
          // assertion otherwise.
          const cases = [
            { shim: "skiff", afterStart: false },
            { shim: "skiff", afterStart: true },
            { shim: "go", afterStart: true },
          ] as const;
          for (const { shim, afterStart } of cases) {
            const id = uid(`oom-${shim}`);
            const what = `${shim}${afterStart ? ", filled after /tasks/start" : ", at once"}`;
            const trigger = `${prefix}/trigger-${id}`;
            await Deno.mkdir(trigger);
            const o = {
              id,
              flags: [
                "--memory-limit",
                String(32 << 20),
                ...["--mount", `type=bind,src=${trigger},dst=/trigger,options=rbind:ro`],
              ],
              args: [
                "sh",
                "-c",
                afterStart
                  ? "while [ ! -e /trigger/fill ]; do sleep 0.05; done; tail /dev/zero"
                  : "tail /dev/zero",
              ],
            };
            const running = shim === "skiff"
              ? run(o)
              : ctrRun(c, { ...o, image, namespace: ns, runtime: RUNC_RUNTIME });
            if (shim === "go") track(id);
            let notStarted: unknown;
            if (afterStart) {
              await events.until(id, "/tasks/start").catch((e) => notStarted = e);
              // Even when /tasks/start never came: the container then ends all the same.
              await Deno.writeTextFile(`${trigger}/fill`, "");
            }
            const r = await running;
            if (notStarted) throw notStarted;
            assert.equal(r.code, 137, `${what}: ${describe(r)}`);
            if (shim === "skiff") {
              await events.until(id, "/tasks/delete");
            } else {
              // The Go shim's last events can be lost altogether when it exits on Shutdown
              // (seen on 2.4.2 at load 30: neither /tasks/exit nor /tasks/delete arrived).
              await events.until(id, "/tasks/exit").catch(() => undefined);
            }
            await events.until(id, "/tasks/oom");
            const topics = events.of(id).map((e) => e.topic);
            const ooms = topics.filter((topic) => topic === "/tasks/oom").length;
            let expected = ["/tasks/create", "/tasks/start", "/tasks/exit", "/tasks/delete"];
            let others = topics.filter((topic) => topic !== "/tasks/oom");
            if (shim === "go") expected = expected.filter((topic) => others.includes(topic));
            if (shim === "go" && others.at(-2) === "/tasks/delete") {
              others = [...others.slice(0, -2), others.at(-1)!, "/tasks/delete"];
            }
            assert.deepEqual(others, expected, `${what}: ${topics}`);
            const end = topics.includes("/tasks/delete")
              ? topics.indexOf("/tasks/delete")
              : topics.length;
            const between = topics.slice(topics.indexOf("/tasks/start") + 1, end);
            assert.equal(
              between.filter((topic) => topic === "/tasks/oom").length,
              ooms,
              `${what}: /tasks/oom outside start..delete: ${topics}`,
            );
          }
        });

        await t.step("ctr run --rm: sh -c 'exit 3' makes ctr exit 3", async () => {
          const r = await run({ id: uid("exit3"), args: ["sh", "-c", "exit 3"] });
          assert.equal(r.code, 3, describe(r));
        });

        await t.step("stdin reaches the container and EOF closes it (CloseIO)", async () => {
          const runArgs = ctrRunArgs(c, {
            image,
            id: track(uid("stdin")),
            namespace: ns,
            runtime: "skiff",
            runtimeConfigPath: runtimeConfig,
            args: ["sh", "-c", "echo ready; cat; echo cat-done"],
          });
          const r = await ctrWithInput(c, ns, runArgs, "line one\nline two\n");
          assert.equal(r.code, 0, describe(r));
          assert.equal(r.stdout, "ready\nline one\nline two\ncat-done\n");
          const id = await sleeper("stdinexec");
          const e = await ctrWithInput(c, ns, [
            "tasks",
            "exec",
            "--fifo-dir",
            c.fifoDir,
            "--exec-id",
            "in",
            id,
            "sh",
            "-c",
            "echo ready; wc -l",
          ], "a\nb\nc\n");
          assert.equal(e.code, 0, describe(e));
          assert.equal(e.stdout.replace(/ +/g, ""), "ready\n3\n");
          await ok(["tasks", "kill", "-s", "SIGKILL", id]);
          await becomes(id, "STOPPED");
          assert.equal(await remove(id), 137);
        });

        await t.step("errors: delete running, kill/exec stopped, duplicate exec id", async () => {
          const id = await sleeper("errors");
          const delRunning = await ctr(["tasks", "delete", id]);
          assert.notEqual(delRunning.code, 0, describe(delRunning));
          assert.match(delRunning.stderr, /running/, describe(delRunning));
          await ok([
            "tasks",
            "exec",
            "-d",
            "--fifo-dir",
            c.fifoDir,
            "--exec-id",
            "dup",
            id,
            "sleep",
            "600",
          ]);
          const dup = await ctr([
            "tasks",
            "exec",
            "--fifo-dir",
            c.fifoDir,
            "--exec-id",
            "dup",
            id,
            "true",
          ]);
          assert.notEqual(dup.code, 0, describe(dup));
          assert.match(dup.stderr, /already exists/, describe(dup));
          await ok(["tasks", "kill", "-s", "SIGKILL", id]);
          await becomes(id, "STOPPED");
          const kill = await ctr(["tasks", "kill", "-s", "SIGKILL", id]);
          assert.notEqual(kill.code, 0, describe(kill));
          assert.match(kill.stderr, /not found|already finished/i, describe(kill));
          const exec = await ctr([
            "tasks",
            "exec",
            "--fifo-dir",
            c.fifoDir,
            "--exec-id",
            "late",
            id,
            "true",
          ]);
          assert.notEqual(exec.code, 0, describe(exec));
          assert.equal(await remove(id), 137);
        });

        await t.step(
          "ctr task exec: output and exit code 5; the exec exits before init",
          async () => {
            const id = await sleeper("exec");
            // The runtime options (Root from --runtime-config-path) reached runc.
            assert.ok(
              exists(`${c.runcRoot}/${ns}/${id}/state.json`),
              "runc state in the runc root",
            );
            const e = await ctr([
              "tasks",
              "exec",
              "--fifo-dir",
              c.fifoDir,
              "--exec-id",
              "x2",
              id,
              "sh",
              "-c",
              "echo exec-out; echo exec-err >&2; exit 5",
            ]);
            assert.equal(e.code, 5, describe(e));
            assert.equal(e.stdout, "exec-out\n");
            assert.equal(e.stderr, "exec-err\n");
            // The same exec id can be used again once the first one was deleted.
            const again = await ok([
              "tasks",
              "exec",
              "--fifo-dir",
              c.fifoDir,
              "--exec-id",
              "x2",
              id,
              "echo",
              "again",
            ]);
            assert.equal(again.stdout, "again\n");
            assert.equal(await statusOf(id), "RUNNING");
            await ok(["tasks", "kill", "-s", "SIGKILL", id]);
            await becomes(id, "STOPPED");
            assert.equal(await remove(id), 137);
            const seen = await events.until(id, "/tasks/delete");
            const topics = seen.map((e) =>
              e.topic === "/tasks/exit" ? `/tasks/exit ${field(e.event, "id", "ID")}` : e.topic
            );
            assert.deepEqual(topics, [
              "/tasks/create",
              "/tasks/start",
              "/tasks/exec-added",
              "/tasks/exec-started",
              "/tasks/exit x2",
              "/tasks/exec-added",
              "/tasks/exec-started",
              "/tasks/exit x2",
              `/tasks/exit ${id}`,
              "/tasks/delete",
            ]);
            const exits = seen.filter((e) => e.topic === "/tasks/exit")
              .map((e) => field(e.event, "exit_status", "ExitStatus") ?? 0);
            assert.deepEqual(exits, [5, 0, 137]);
          },
        );

        await t.step(
          "ctr task kill -s SIGKILL: the waiting client gets exit status 137",
          async () => {
            const id = await sleeper("kill");
            // attach waits for the exit (Task.Wait) and exits with the task's status.
            const attach = ctr(["tasks", "attach", id]);
            await ok(["tasks", "kill", "-s", "SIGKILL", id]);
            const a = await attach;
            assert.equal(a.code, 137, describe(a));
            // ctr task attach deletes the task once it has its exit status.
            assert.equal(await statusOf(id), undefined);
            await ok(["containers", "delete", id]);
            const exit = (await events.until(id, "/tasks/delete")).find((e) =>
              e.topic === "/tasks/exit"
            );
            assert.equal(field(exit!.event, "exit_status", "ExitStatus"), 137);
          },
        );

        await t.step(
          "ctr task kill: SIGTERM reaches a trap; --exec-id signals only the exec",
          async () => {
            const id = track(uid("term"));
            const r = await run({
              id,
              detach: true,
              args: ["sh", "-c", "trap 'exit 7' TERM; while :; do sleep 0.1; done"],
            });
            assert.equal(r.code, 0, describe(r));
            await becomes(id, "RUNNING");
            await ok([
              "tasks",
              "exec",
              "-d",
              "--fifo-dir",
              c.fifoDir,
              "--exec-id",
              "victim",
              id,
              "sleep",
              "600",
            ]);
            await ok(["tasks", "kill", "--exec-id", "victim", "-s", "SIGKILL", id]);
            const exit = await eventually("the exec's exit event", () =>
              Promise.resolve(
                events.of(id).find((e) =>
                  e.topic === "/tasks/exit" && field(e.event, "id", "ID") === "victim"
                ),
              ));
            assert.equal(field(exit.event, "exit_status", "ExitStatus"), 137);
            assert.equal(await statusOf(id), "RUNNING", "the init lives on");
            await ok(["tasks", "kill", id]); // SIGTERM by default
            await becomes(id, "STOPPED");
            assert.equal(await remove(id), 7);
          },
        );

        await t.step(
          "ctr container create, then ctr task start: output and exit code",
          async () => {
            const id = track(uid("created"));
            // (ctr container create has no --cgroup: this one lands in /<ns>/<id>.)
            await ok([
              "containers",
              "create",
              "--runtime",
              RUNTIME,
              "--runtime-config-path",
              runtimeConfig,
              image,
              id,
              // 1.6's ctr moves flags ("-c") ahead of the arguments unless after "--"; later
              // ones would run "--" as the command.
              ...(c.version.startsWith("1.6.") ? ["--"] : []),
              "sh",
              "-c",
              "echo created-then-started; exit 6",
            ]);
            const r = await ctr(["tasks", "start", "--fifo-dir", c.fifoDir, id]);
            assert.equal(r.code, 6, describe(r));
            assert.equal(r.stdout, "created-then-started\n");
            // ctr task start, like attach, deletes the task once it has the exit status.
            assert.equal(await statusOf(id), undefined);
            await ok(["containers", "delete", id]);
          },
        );

        await t.step("ctr task pause / resume: PAUSED (frozen cgroup), then RUNNING", async () => {
          const id = await sleeper("pause");
          const freezer = `/sys/fs/cgroup/freezer/${c.cgroupParent}/${ns}/${id}/freezer.state`;
          // On cgroup v1 (this suite's machines) the freezer state is checked too.
          const v1 = exists("/sys/fs/cgroup/freezer");
          if (v1) assert.ok(exists(freezer), freezer);
          await ok(["tasks", "pause", id]);
          assert.equal(await statusOf(id), "PAUSED");
          if (v1) assert.equal((await Deno.readTextFile(freezer)).trim(), "FROZEN");
          // A paused task cannot be deleted.
          const del = await ctr(["tasks", "delete", id]);
          assert.notEqual(del.code, 0, describe(del));
          await ok(["tasks", "resume", id]);
          assert.equal(await statusOf(id), "RUNNING");
          if (v1) assert.equal((await Deno.readTextFile(freezer)).trim(), "THAWED");
          await ok(["tasks", "kill", "-s", "SIGKILL", id]);
          await becomes(id, "STOPPED");
          assert.equal(await remove(id), 137);
          const topics = (await events.until(id, "/tasks/delete")).map((e) => e.topic);
          assert.deepEqual(topics, [
            "/tasks/create",
            "/tasks/start",
            "/tasks/paused",
            "/tasks/resumed",
            "/tasks/exit",
            "/tasks/delete",
          ]);
        });

        await t.step("ctr task ps: lists the init pid and a running exec", async () => {
          const id = await sleeper("ps");
          const initPid = (await tasks()).get(id)!.pid;
          assert.ok(initPid > 0 && processAlive(initPid));
          await ok([
            "tasks",
            "exec",
            "-d",
            "--fifo-dir",
            c.fifoDir,
            "--exec-id",
            "bg",
            id,
            "sleep",
            "600",
          ]);
          const ps = await ok(["tasks", "ps", id]);
          const rows = ps.stdout.trim().split("\n").slice(1).map((l) => l.trim().split(/\s+/));
          const pids = rows.map((r) => Number(r[0]));
          assert.ok(pids.includes(initPid), ps.stdout);
          assert.equal(rows.length, 2, ps.stdout);
          const exec = rows.find((r) => Number(r[0]) !== initPid)!;
          assert.match(exec.slice(1).join(" "), /bg/, "the exec's row names its exec id");
          // Only the init is killed; the exec dies with the pid namespace, and its exit is
          // published before the init's.
          await ok(["tasks", "kill", "-s", "SIGKILL", id]);
          await becomes(id, "STOPPED");
          assert.ok(!processAlive(Number(exec[0])), "the exec died with the init");
          assert.equal(await remove(id), 137);
          const exits = (await events.until(id, "/tasks/delete"))
            .filter((e) => e.topic === "/tasks/exit")
            .map((e) =>
              `${field(e.event, "id", "ID")} ${field(e.event, "exit_status", "ExitStatus")}`
            );
          assert.deepEqual(exits, ["bg 137", `${id} 137`]);
        });

        await t.step("ctr task metrics: cgroup v1 memory and pids statistics", async () => {
          const id = await sleeper("metrics");
          const m = await ok(["tasks", "metrics", id]);
          assert.match(m.stdout, new RegExp(`^ID\\s+TIMESTAMP\\s*\\n${id}\\s`, "m"), m.stdout);
          const usage = /memory\.usage_in_bytes\s+(\d+)/.exec(m.stdout);
          assert.ok(usage && Number(usage[1]) > 0, m.stdout);
          assert.match(m.stdout, /pids\.current\s+[1-9]/, m.stdout);
          const json = await ok(["tasks", "metrics", "--format", "json", id]);
          const doc = JSON.parse(json.stdout) as Record<string, unknown>;
          const memory = (field(doc, "memory", "Memory") ?? {}) as Record<string, unknown>;
          const usageJson = (field(memory, "usage", "Usage") ?? {}) as Record<string, unknown>;
          assert.ok(Number(field(usageJson, "usage", "Usage")) > 0, json.stdout);
          await ok(["tasks", "kill", "-s", "SIGKILL", id]);
          await becomes(id, "STOPPED");
          // A stopped task keeps its cgroup until Delete, and answers from it as the Go shim does
          // (containerd 2.4's CRI reads it to tell an OOM kill); after Delete, nothing.
          const stopped = await ok(["tasks", "metrics", id]);
          assert.match(stopped.stdout, /memory\.usage_in_bytes\s+\d+/, stopped.stdout);
          assert.equal(await remove(id), 137);
          const gone = await ctr(["tasks", "metrics", id]);
          assert.notEqual(gone.code, 0, describe(gone));
        });

        await t.step("ctr run -t and ctr task exec -t: a /dev/pts terminal", async () => {
          const r = await run({
            id: uid("tty"),
            tty: true,
            args: ["sh", "-c", "tty; test -t 0 && echo tty-ok; exit 4"],
          });
          // Terminal line endings (the Go runc shim gives the same "\r\r\n" through script).
          assert.match(r.stdout, /^\/dev\/pts\/\d+\r+\ntty-ok\r+\n/m, JSON.stringify(r));
          assert.equal(r.code, 4, describe(r));
          // Typed input reaches the container through the terminal.
          const typed = await run({
            id: uid("ttyin"),
            tty: true,
            stdin: "hello\n",
            args: ["sh", "-c", "read x; echo got-$x; exit 5"],
          });
          assert.match(typed.stdout, /^got-hello\r+\n/m, JSON.stringify(typed));
          assert.equal(typed.code, 5, describe(typed));

          const id = await sleeper("ttyexec");
          const argv = [
            `${c.binDir}/ctr`,
            "-a",
            c.address,
            "-n",
            ns,
            "tasks",
            "exec",
            "-t",
            "--fifo-dir",
            c.fifoDir,
            "--exec-id",
            "tx",
            id,
            "sh",
            "-c",
            "tty; echo exec-tty-ok; exit 6",
          ];
          const e = await underScript(argv, c.ctrEnv);
          assert.match(e.stdout, /^\/dev\/pts\/\d+\r+\nexec-tty-ok\r+\n/m, JSON.stringify(e));
          assert.equal(e.code, 6, describe(e));
          await ok(["tasks", "kill", "-s", "SIGKILL", id]);
          await becomes(id, "STOPPED");
          assert.equal(await remove(id), 137);
        });

        await t.step("--log-uri file://: stdout and stderr land in the file", async () => {
          const log = `${prefix}/logs/sub/file.log`;
          const r = await run({
            id: uid("filelog"),
            logUri: `file://${log}`,
            args: ["sh", "-c", "echo to-file; echo err-to-file >&2; exit 2"],
          });
          assert.equal(r.code, 2, describe(r));
          assert.equal(r.stdout, "");
          const text = await Deno.readTextFile(log);
          assert.deepEqual(text.split("\n").filter(Boolean).sort(), ["err-to-file", "to-file"]);
        });

        await t.step(
          "--log-uri binary://: the logger gets stdout on fd 3, stderr on fd 4",
          async () => {
            const logger = `${prefix}/logger.sh`;
            const out = `${prefix}/logs/binary.log`;
            // containerd's binary logging protocol: fd 3 = stdout, fd 4 = stderr, and a byte
            // (or EOF) on fd 5 says the logger is ready. URI query k=v becomes args "k v".
            await Deno.writeTextFile(
              logger,
              [
                "#!/bin/sh",
                'test "$1" = file || exit 9',
                'sed "s/^/out $CONTAINER_NAMESPACE\\/$CONTAINER_ID: /" <&3 >>"$2.out" &',
                'sed "s/^/err: /" <&4 >>"$2.err" &',
                "printf x >&5",
                "exec 5>&-",
                "wait",
                'cat "$2.out" "$2.err" >"$2"',
                "",
              ].join("\n"),
              { mode: 0o755 },
            );
            const id = uid("binlog");
            const r = await run({
              id,
              logUri: `binary://${logger}?file=${out}`,
              args: ["sh", "-c", "echo to-logger; echo err-to-logger >&2; exit 7"],
            });
            assert.equal(r.code, 7, describe(r));
            assert.equal(r.stdout, "");
            // The shim waits for the logger to exit before it answers Delete.
            assert.equal(
              await Deno.readTextFile(out),
              `out ${ns}/${id}: to-logger\nerr: err-to-logger\n`,
            );
          },
        );

        await t.step(
          "grouped containers share one shim, which outlives the first one's bundle",
          async () => {
            const group = uid("grp");
            groups.push(group);
            const flags = ["--annotation", `io.containerd.runc.v2.group=${group}`];
            const [g1, g2] = [track(uid("g1")), track(uid("g2"))];
            for (const id of [g1, g2]) {
              const r = await run({ id, detach: true, flags, args: ["sleep", "600"] });
              assert.equal(r.code, 0, describe(r));
              await becomes(id, "RUNNING");
            }
            const socket = await shimSocket(c, ns, group);
            for (const id of [g1, g2]) {
              const bundle = `${c.state}/io.containerd.runtime.v2.task/${ns}/${id}`;
              assert.equal(await Deno.readTextFile(`${bundle}/address`), `unix://${socket}`);
            }
            const servers = c.shims().filter((s) => s.argv.includes(socket));
            assert.equal(servers.length, 1, "one shim server for the group");
            const exec = (execId: string) =>
              ctr([
                "tasks",
                "exec",
                "--fifo-dir",
                c.fifoDir,
                "--exec-id",
                execId,
                g2,
                "sh",
                "-c",
                "echo in-g2; exit 4",
              ]);
            const e1 = await exec("before");
            assert.equal(e1.code, 4, describe(e1));
            // The shim was started in g1's bundle, which goes away with g1.
            await ok(["tasks", "kill", "-s", "SIGKILL", g1]);
            await becomes(g1, "STOPPED");
            assert.equal(await remove(g1), 137);
            assert.ok(!exists(`${c.state}/io.containerd.runtime.v2.task/${ns}/${g1}`));
            assert.equal(await statusOf(g2), "RUNNING");
            const e2 = await exec("after");
            assert.equal(e2.code, 4, describe(e2));
            assert.equal(e2.stdout, "in-g2\n");
            const ps = await ok(["tasks", "ps", g2]);
            assert.match(ps.stdout, new RegExp(`^${(await tasks()).get(g2)!.pid}\\s`, "m"));
            assert.ok(processAlive(servers[0]!.pid), "the shim still serves g2");
            await ok(["tasks", "kill", "-s", "SIGKILL", g2]);
            await becomes(g2, "STOPPED");
            assert.equal(await remove(g2), 137);
            await eventually(
              "the group's shim to exit",
              () => Promise.resolve(processAlive(servers[0]!.pid) ? undefined : true),
            );
            assert.ok(!exists(socket), "the group's socket is gone");
          },
        );

        await t.step(
          "a grouped shim serves 12 containers (a pod of many; each adds stdio waits and a connection)",
          async () => {
            const group = uid("big");
            groups.push(group);
            const flags = ["--annotation", `io.containerd.runc.v2.group=${group}`];
            const ids = Array.from({ length: 12 }, (_, i) => track(uid(`b${i}`)));
            for (const id of ids) {
              const r = await run({ id, detach: true, flags, args: ["sleep", "600"] });
              assert.equal(r.code, 0, `${id}: ${describe(r)}`);
              await becomes(id, "RUNNING");
            }
            const last = ids[ids.length - 1]!;
            const e = await ctr([
              "tasks",
              "exec",
              "--fifo-dir",
              c.fifoDir,
              "--exec-id",
              "many",
              last,
              "sh",
              "-c",
              "echo in-last; exit 5",
            ]);
            assert.equal(e.code, 5, describe(e));
            assert.equal(e.stdout, "in-last\n");
            for (const id of ids) await ok(["tasks", "kill", "-s", "SIGKILL", id]);
            for (const id of ids) {
              await becomes(id, "STOPPED");
              assert.equal(await remove(id), 137);
            }
          },
        );

        await t.step(
          "containerd restarts while a task runs: reconnect, state, exec, exit",
          async () => {
            const id = await sleeper("restart");
            const before = await tasks();
            const initPid = before.get(id)!.pid;
            const shimPids = c.shims().filter((s) => s.argv.includes(id)).map((s) => s.pid);
            assert.equal(shimPids.length, 1, "one shim server for the container");
            // What containerd reconnects with: the shim's `address` file (read by 1.6 and
            // 1.7), and the bootstrap.json containerd 2.x writes from start's answer.
            const bundle = `${c.state}/io.containerd.runtime.v2.task/${ns}/${id}`;
            const address = `unix://${await shimSocket(c, ns, id)}`;
            assert.equal(await Deno.readTextFile(`${bundle}/address`), address);
            if (c.major >= 2) {
              assert.deepEqual(JSON.parse(await Deno.readTextFile(`${bundle}/bootstrap.json`)), {
                version: 3,
                address,
                protocol: "ttrpc",
              });
            }
            await events.stop();
            await c.restart();
            events.resubscribe();
            // Found again through the bundle's address file (1.x) or bootstrap.json (2.x).
            assert.deepEqual((await tasks()).get(id), { pid: initPid, status: "RUNNING" });
            const ps = await ok(["tasks", "ps", id]);
            assert.match(ps.stdout, new RegExp(`^${initPid}\\s`, "m"), ps.stdout);
            const e = await ctr([
              "tasks",
              "exec",
              "--fifo-dir",
              c.fifoDir,
              "--exec-id",
              "after",
              id,
              "sh",
              "-c",
              "echo after-restart; exit 8",
            ]);
            assert.equal(e.code, 8, describe(e));
            assert.equal(e.stdout, "after-restart\n");
            // Still the same shim: reconnected, not restarted.
            assert.ok(processAlive(shimPids[0]!));
            assert.deepEqual(
              c.shims().filter((s) => s.argv.includes(id)).map((s) => s.pid),
              shimPids,
            );
            const attach = ctr(["tasks", "attach", id]);
            await ok(["tasks", "kill", "-s", "SIGKILL", id]);
            const a = await attach;
            assert.equal(a.code, 137, describe(a));
            assert.equal(await statusOf(id), undefined, "ctr task attach deleted the task");
            await ok(["containers", "delete", id]);
            const exit = (await events.until(id, "/tasks/delete")).find((e) =>
              e.topic === "/tasks/exit" && field(e.event, "id", "ID") === id
            );
            assert.equal(field(exit!.event, "exit_status", "ExitStatus"), 137);
            await eventually(
              "the shim to exit",
              () => Promise.resolve(processAlive(shimPids[0]!) ? undefined : true),
            );
          },
        );

        await t.step(
          "containerd crashes (SIGKILL): exits during the downtime are reported once it is back",
          async () => {
            const trigger = `${prefix}/trigger-${uid("t")}`;
            await Deno.mkdir(trigger);
            const waiter = track(uid("waiter"));
            const r = await run({
              id: waiter,
              detach: true,
              flags: ["--mount", `type=bind,src=${trigger},dst=/trigger,options=rbind:ro`],
              args: ["sh", "-c", "while [ ! -e /trigger/go ]; do sleep 0.05; done; exit 3"],
            });
            assert.equal(r.code, 0, describe(r));
            await becomes(waiter, "RUNNING");
            const id = await sleeper("crash");
            await ok([
              "tasks",
              "exec",
              "-d",
              "--fifo-dir",
              c.fifoDir,
              "--exec-id",
              "bg",
              id,
              "sleep",
              "600",
            ]);
            const before = await tasks();
            const ps = await ok(["tasks", "ps", id]);
            const execPid = ps.stdout.trim().split("\n").slice(1).map((l) =>
              Number(l.trim().split(/\s+/)[0])
            )
              .find((p) => p !== before.get(id)!.pid)!;
            assert.ok(execPid > 0 && processAlive(execPid), ps.stdout);

            await events.stop();
            Deno.kill(c.pid!, "SIGKILL");
            await eventually(
              "containerd to die",
              () => Promise.resolve(c.pid === undefined ? true : undefined),
            );
            // While containerd is down: the waiter's init exits 3, the exec is killed.
            await Deno.writeTextFile(`${trigger}/go`, "");
            Deno.kill(execPid, "SIGKILL");
            const waiterPid = before.get(waiter)!.pid;
            // Reaped (not just dead): the shim has seen both exits before containerd is back.
            await eventually(
              "the shim to reap the waiter",
              () => Promise.resolve(reaped(waiterPid)),
            );
            await eventually("the shim to reap the exec", () => Promise.resolve(reaped(execPid)));
            await c.start();
            events.resubscribe();

            const after = await tasks();
            assert.deepEqual(after.get(id), before.get(id));
            const psAfter = await ok(["tasks", "ps", id]);
            const rows = psAfter.stdout.trim().split("\n").slice(1);
            assert.deepEqual(rows.map((l) => Number(l.trim().split(/\s+/)[0])), [
              before.get(id)!.pid,
            ]);
            if (c.version.startsWith("1.6.")) {
              // 1.6 reconnects to every shim it finds: the exit status is still there.
              assert.equal(after.get(waiter)?.status, "STOPPED");
              assert.equal(await remove(waiter), 3);
            } else {
              // 1.7+ ask Pids on reconnect and clean up a non-sandbox shim with none, as
              // "leaked" (the Go runc shim gets the same treatment): Delete, then Shutdown.
              assert.equal(after.get(waiter), undefined);
              await ok(["containers", "delete", waiter]);
            }
            await eventually("the waiter's shim to exit", () =>
              Promise.resolve(
                c.shims().some((s) => s.argv.includes(waiter)) ? undefined : true,
              ));
            const waiterBundle = `${c.state}/io.containerd.runtime.v2.task/${ns}/${waiter}`;
            assert.deepEqual((await c.mounts()).filter((m) => m.startsWith(waiterBundle)), []);
            await ok(["tasks", "kill", "-s", "SIGKILL", id]);
            await becomes(id, "STOPPED");
            assert.equal(await remove(id), 137);
          },
        );

        await t.step(
          "the shim server is SIGKILLed: containerd cleans up through `delete`",
          async () => {
            const id = await sleeper("deadshim");
            const initPid = (await tasks()).get(id)!.pid;
            const bundle = `${c.state}/io.containerd.runtime.v2.task/${ns}/${id}`;
            const socket = await shimSocket(c, ns, id);
            assert.ok(exists(socket), "the shim serves on its socket");
            const servers = c.shims().filter((s) =>
              s.argv.includes(id) && !s.argv.includes("start") && !s.argv.includes("delete")
            );
            assert.equal(servers.length, 1);
            Deno.kill(servers[0]!.pid, "SIGKILL");
            // containerd runs `<shim> delete`, which kills the container and reports 137.
            const seen = await events.until(id, "/tasks/delete");
            const exit = seen.find((e) => e.topic === "/tasks/exit");
            assert.ok(exit, JSON.stringify(seen));
            assert.equal(field(exit.event, "exit_status", "ExitStatus"), 137);
            await eventually("the task to go away", async () => {
              const s = await statusOf(id);
              return s === undefined || s === "STOPPED" ? true : undefined;
            });
            await eventually(
              "the container init to die",
              () => Promise.resolve(processAlive(initPid) ? undefined : true),
            );
            const del = await ctr(["tasks", "delete", id]);
            assert.ok(del.code === 0 || /not found/i.test(del.stderr), describe(del));
            await ok(["containers", "delete", id]);
            assert.deepEqual(
              (await c.mounts()).filter((m) => m.startsWith(bundle)),
              [],
            );
            assert.ok(!exists(bundle), "containerd removed the bundle");
            assert.ok(!exists(socket), "the dead shim's socket is gone");
            assert.ok(!exists(`${c.runcRoot}/${ns}/${id}`), "runc forgot the container");
          },
        );

        await t.step("nothing is left: no shims, mounts, sockets or containers", async () => {
          await eventually(
            "every skiff shim to exit",
            () => Promise.resolve(c.shims().length === 0 ? true : undefined),
          );
          assert.deepEqual(await c.mounts(), []);
          for (const id of ids) assert.ok(!exists(await shimSocket(c, ns, id)), `socket of ${id}`);
          assert.deepEqual([...(await tasks()).keys()], []);
          const cs = await ok(["containers", "ls", "-q"]);
          assert.equal(cs.stdout.trim(), "");
        });
      } finally {
        await events.stop();
        await c.stop();
        await removeCgroupDirs(ns);
        // stop() removes sockets named after containers; a group's is named after the group.
        for (const g of groups) {
          const socket = await shimSocket(c, ns, g);
          for (const p of [socket, `${socket}.ops`]) await Deno.remove(p).catch(() => {});
        }
        await Deno.remove(prefix, { recursive: true }).catch(() => {});
      }
    },
  );
}
