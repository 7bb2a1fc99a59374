import assert from "node:assert/strict";
import { Code, ConnectError } from "@connectrpc/connect";
import { OciRuntimeCli } from "../../../sdk/oci/cli.ts";
import { isNotExist, mapKillError, OciRuntimeError } from "../../../sdk/oci/errors.ts";
import type { OciRuntimeCliOptions, ProcessStdio } from "../../../sdk/oci/options.ts";
import { readPidFile } from "../../../sdk/linux/pid_file.ts";
import { Reaper } from "../../../sdk/linux/reaper.ts";
import { exists, integrationTest } from "../../_integration.ts";

// ---------------------------------------------------------------------------------------------
// A fake runtime: records its argv, stdin and process file; its behaviour per subcommand comes
// from FAKE_<COMMAND>_{EXIT,STDOUT,STDERR,LOG} in its environment (passed through `env`).

const FAKE_RUNTIME = `#!/bin/sh
for a in "$@"; do printf '%s\\n' "$a"; done > "$FAKE_DIR/argv"
printf '%s' "\${NOTIFY_SOCKET-unset}" > "$FAKE_DIR/notify"
pwd -P > "$FAKE_DIR/cwd"
log=""; prev=""; cmd=""; pidf=""
for a in "$@"; do
  [ "$prev" = "--log" ] && log="$a"
  [ "$prev" = "--pid-file" ] && pidf="$a"
  [ "$prev" = "--process" ] && cp "$a" "$FAKE_DIR/process.json" && printf '%s' "$a" > "$FAKE_DIR/process.path"
  if [ -z "$cmd" ]; then
    case "$a" in create|start|state|kill|delete|exec|ps|pause|resume|update|checkpoint|restore|events|features) cmd="$a";; --version) cmd=version;; esac
  fi
  prev="$a"
done
[ "$cmd" = update ] && cat > "$FAKE_DIR/stdin"
up=$(printf '%s' "$cmd" | tr a-z A-Z)
eval "code=\\\${FAKE_\${up}_EXIT:-0}; out=\\\${FAKE_\${up}_STDOUT:-}; err=\\\${FAKE_\${up}_STDERR:-}; lg=\\\${FAKE_\${up}_LOG:-}"
[ -n "$lg" ] && [ -n "$log" ] && printf '%s' "$lg" >> "$log"
[ -n "$err" ] && printf '%s\\n' "$err" >&2
[ -n "$out" ] && printf '%s' "$out"
[ "$code" = 0 ] && [ -n "$pidf" ] && echo $$ > "$pidf"
exit "$code"
`;

/** Where the fake runtime's pid files go (the adapter reads them back). */
const PIDS = Deno.makeTempDirSync({ prefix: "skiff-fake-pids-" });
globalThis.addEventListener("unload", () => Deno.removeSync(PIDS, { recursive: true }));

interface Fake {
  dir: string;
  binary: string;
  log: string;
  cli(env?: Record<string, string>, extra?: OciRuntimeCliOptions): OciRuntimeCli;
  argv(): Promise<string[]>;
  [Symbol.asyncDispose](): Promise<void>;
}

async function fakeRuntime(): Promise<Fake> {
  const dir = await Deno.makeTempDir({ prefix: "skiff-fake-runtime-" });
  const binary = `${dir}/fake-runc`;
  await Deno.writeTextFile(binary, FAKE_RUNTIME, { mode: 0o755 });
  await Deno.chmod(binary, 0o755);
  const log = `${dir}/log.json`;
  return {
    dir,
    binary,
    log,
    cli: (env = {}, extra = {}) =>
      new OciRuntimeCli({ binary, log, env: { FAKE_DIR: dir, ...env }, ...extra }),
    argv: async () => (await Deno.readTextFile(`${dir}/argv`)).split("\n").slice(0, -1),
    [Symbol.asyncDispose]: () => Deno.remove(dir, { recursive: true }),
  };
}

Deno.test("OciRuntimeCli.create() passes global and create flags in the runc shim's order", async () => {
  await using fake = await fakeRuntime();
  const cli = fake.cli({}, {
    root: "/run/r/default",
    systemdCgroup: true,
    globalArgs: ["--network=none"],
  });
  await cli.create("c1", {
    bundle: "/b",
    pidFile: `${PIDS}/init.pid`,
    consoleSocket: "/s.sock",
    noPivot: true,
    noNewKeyring: true,
    extraArgs: ["--preserve-fds", "1"],
  });
  assert.deepEqual(await fake.argv(), [
    ...["--root", "/run/r/default", "--log", fake.log, "--log-format", "json"],
    ...["--systemd-cgroup", "--network=none", "create", "--bundle", "/b", "--pid-file"],
    ...[`${PIDS}/init.pid`, "--console-socket", "/s.sock", "--no-pivot", "--no-new-keyring"],
    ...["--preserve-fds", "1", "c1"],
  ]);
});

Deno.test("OciRuntimeCli.create() takes noPivot/noNewKeyring defaults from the constructor", async () => {
  await using fake = await fakeRuntime();
  const cli = fake.cli({}, { noPivot: true, noNewKeyring: true });
  await cli.create("c1", { bundle: "/b", pidFile: `${PIDS}/p` });
  assert.deepEqual((await fake.argv()).slice(4), [
    ...[
      "create",
      "--bundle",
      "/b",
      "--pid-file",
      `${PIDS}/p`,
      "--no-pivot",
      "--no-new-keyring",
      "c1",
    ],
  ]);
  // A per-call value overrides the default.
  await cli.create("c1", {
    bundle: "/b",
    pidFile: `${PIDS}/p`,
    noPivot: false,
    noNewKeyring: false,
  });
  assert.deepEqual((await fake.argv()).slice(4), [
    "create",
    "--bundle",
    "/b",
    "--pid-file",
    `${PIDS}/p`,
    "c1",
  ]);
  await cli.restore("c1", { bundle: "/b", imagePath: "/i", pidFile: `${PIDS}/p` });
  assert.ok((await fake.argv()).includes("--no-pivot"));
});

Deno.test("OciRuntimeCli.create() spawns through the injected spawn function", async () => {
  await using fake = await fakeRuntime();
  const spawned: Deno.Command[] = [];
  const cli = fake.cli({}, {
    spawn: (cmd) => {
      spawned.push(cmd);
      return cmd.spawn();
    },
  });
  await cli.create("c1", { bundle: "/b", pidFile: `${PIDS}/init.pid` });
  await cli.start("c1");
  assert.equal(spawned.length, 2);
});

Deno.test("OciRuntimeCli.create() removes NOTIFY_SOCKET from the runtime's environment", async () => {
  await using fake = await fakeRuntime();
  const before = Deno.env.get("NOTIFY_SOCKET");
  Deno.env.set("NOTIFY_SOCKET", "/run/systemd/notify");
  try {
    await fake.cli().create("c1", { bundle: "/b", pidFile: `${PIDS}/init.pid` });
  } finally {
    if (before === undefined) Deno.env.delete("NOTIFY_SOCKET");
    else Deno.env.set("NOTIFY_SOCKET", before);
  }
  assert.equal(await Deno.readTextFile(`${fake.dir}/notify`), "unset");
});

Deno.test("OciRuntimeCli.create() failure carries the last error entry the command logged", async () => {
  await using fake = await fakeRuntime();
  // A stale error from an earlier command must not be reported.
  await Deno.writeTextFile(fake.log, '{"level":"error","msg":"stale error"}\n');
  // runsc style: msg before level, no newline between entries.
  const cli = fake.cli({
    FAKE_CREATE_EXIT: "128",
    FAKE_CREATE_LOG: '{"msg":"debug","level":"debug"}{"msg":"first","level":"error"}' +
      '{"msg":"creating container: cannot \\"x\\" {y}","level":"error","time":"t"}',
  });
  const err = await cli.create("c9", { bundle: "/b", pidFile: `${PIDS}/p` }).then(
    () => assert.fail("create should fail"),
    (e) => e,
  );
  assert.ok(err instanceof OciRuntimeError);
  assert.equal(err.runtimeMessage, 'creating container: cannot "x" {y}');
  assert.equal(err.exitCode, 128);
  assert.equal(err.command, "create");
  assert.equal(err.id, "c9");
  assert.equal(
    err.message,
    `${fake.binary} create "c9" failed (exit status 128): creating container: cannot "x" {y}`,
  );
});

Deno.test("OciRuntimeCli.start() failure falls back to stderr when nothing new was logged", async () => {
  await using fake = await fakeRuntime();
  await Deno.writeTextFile(fake.log, '{"level":"error","msg":"stale error"}\n');
  const cli = fake.cli({ FAKE_START_EXIT: "1", FAKE_START_STDERR: "cannot start: boom" });
  await assert.rejects(cli.start("c1"), (e) => {
    assert.ok(e instanceof OciRuntimeError);
    assert.equal(e.runtimeMessage, "cannot start: boom");
    return true;
  });
});

Deno.test("OciRuntimeCli.create() without io and log reports the runtime's stderr", async () => {
  await using fake = await fakeRuntime();
  const cli = new OciRuntimeCli({
    binary: fake.binary,
    env: { FAKE_DIR: fake.dir, FAKE_CREATE_EXIT: "1", FAKE_CREATE_STDERR: "config.json not found" },
  });
  await assert.rejects(
    cli.create("c1", { bundle: "/b", pidFile: `${PIDS}/p` }),
    (e) => e instanceof OciRuntimeError && e.runtimeMessage === "config.json not found",
  );
});

Deno.test("OciRuntimeCli.create() with a text-format log reads its level=error line", async () => {
  await using fake = await fakeRuntime();
  const cli = fake.cli({
    FAKE_CREATE_EXIT: "1",
    FAKE_CREATE_LOG: 'time="t" level=warning msg="w"\ntime="t" level=error msg="bad \\"q\\""\n',
  });
  await assert.rejects(
    cli.create("c1", { bundle: "/b", pidFile: `${PIDS}/p` }),
    (e) => e instanceof OciRuntimeError && e.runtimeMessage === 'bad "q"',
  );
});

Deno.test("OciRuntimeCli.create() of a missing binary rejects with an OciRuntimeError", async () => {
  const cli = new OciRuntimeCli({ binary: "/nonexistent/skiff-no-runtime" });
  await assert.rejects(cli.create("c1", { bundle: "/b", pidFile: `${PIDS}/p` }), (e) => {
    assert.ok(e instanceof OciRuntimeError);
    assert.equal(e.exitCode, -1);
    assert.match(e.message, /skiff-no-runtime create "c1" could not be run/);
    return true;
  });
});

Deno.test("OciRuntimeCli.exec() passes the process JSON in a temp file it removes", async () => {
  await using fake = await fakeRuntime();
  const process = { args: ["sh", "-c", "echo hi"], cwd: "/", env: ["PATH=/bin"], terminal: false };
  await fake.cli().exec("c1", "e1", process, {
    pidFile: `${PIDS}/e.pid`,
    consoleSocket: "/s",
    detach: true,
  });
  const path = await Deno.readTextFile(`${fake.dir}/process.path`);
  assert.deepEqual(await fake.argv(), [
    ...["--log", fake.log, "--log-format", "json", "exec", "--process", path, "--detach"],
    ...["--pid-file", `${PIDS}/e.pid`, "--console-socket", "/s", "c1"],
  ]);
  assert.deepEqual(JSON.parse(await Deno.readTextFile(`${fake.dir}/process.json`)), process);
  assert.equal(await exists(path), false);
});

Deno.test("OciRuntimeCli.update() writes the resources JSON to stdin", async () => {
  await using fake = await fakeRuntime();
  const resources = { memory: { limit: 1 << 26 }, cpu: { shares: 512 } };
  await fake.cli().update("c1", resources);
  assert.deepEqual((await fake.argv()).slice(4), ["update", "--resources", "-", "c1"]);
  assert.deepEqual(JSON.parse(await Deno.readTextFile(`${fake.dir}/stdin`)), resources);
});

Deno.test("OciRuntimeCli.checkpoint() maps every option to its flag", async () => {
  await using fake = await fakeRuntime();
  await fake.cli().checkpoint("c1", {
    imagePath: "/img",
    workPath: "/work",
    parentPath: "/parent",
    leaveRunning: true,
    tcpEstablished: true,
    extUnixSk: true,
    shellJob: true,
    fileLocks: true,
    emptyNs: ["network", "ipc"],
    cgroupsMode: "soft",
  });
  assert.deepEqual((await fake.argv()).slice(4), [
    ...["checkpoint", "--image-path", "/img", "--work-path", "/work", "--parent-path"],
    ...["/parent", "--leave-running", "--tcp-established", "--ext-unix-sk", "--shell-job"],
    ...["--file-locks", "--empty-ns", "network", "--empty-ns", "ipc"],
    ...["--manage-cgroups-mode", "soft", "c1"],
  ]);
});

Deno.test("OciRuntimeCli.restore() maps every option to its flag", async () => {
  await using fake = await fakeRuntime();
  await fake.cli().restore("c1", {
    bundle: "/b",
    imagePath: "/img",
    workPath: "/work",
    pidFile: `${PIDS}/init.pid`,
    consoleSocket: "/s",
    noPivot: true,
    noSubreaper: true,
    tcpEstablished: true,
    emptyNs: ["network"],
    detach: true,
  });
  assert.deepEqual((await fake.argv()).slice(4), [
    ...["restore", "--bundle", "/b", "--image-path", "/img", "--work-path", "/work"],
    ...["--detach", "--pid-file", `${PIDS}/init.pid`, "--console-socket", "/s", "--no-pivot"],
    ...["--no-subreaper", "--tcp-established", "--empty-ns", "network", "c1"],
  ]);
});

Deno.test("OciRuntimeCli.kill() and delete() pass --all and --force", async () => {
  await using fake = await fakeRuntime();
  const cli = fake.cli();
  await cli.kill("c1", 15, { all: true });
  assert.deepEqual((await fake.argv()).slice(4), ["kill", "--all", "c1", "15"]);
  await cli.kill("c1", 9);
  assert.deepEqual((await fake.argv()).slice(4), ["kill", "c1", "9"]);
  await cli.delete("c1", { force: true });
  assert.deepEqual((await fake.argv()).slice(4), ["delete", "--force", "c1"]);
});

Deno.test("OciRuntimeCli.state() accepts runsc's state without rootfs or created", async () => {
  await using fake = await fakeRuntime();
  const out = '{\n "ociVersion": "1.0.2-dev", "id": "c1", "status": "running", "pid": 7,' +
    ' "bundle": "/b"\n}';
  const state = await fake.cli({ FAKE_STATE_STDOUT: out }).state("c1");
  assert.deepEqual(state, {
    ociVersion: "1.0.2-dev",
    id: "c1",
    status: "running",
    pid: 7,
    bundle: "/b",
  });
});

Deno.test("OciRuntimeCli.state() rejects output that is not a state", async () => {
  await using fake = await fakeRuntime();
  await assert.rejects(
    fake.cli({ FAKE_STATE_STDOUT: "[1]" }).state("c1"),
    (e) => e instanceof OciRuntimeError && /unexpected output/.test(e.message),
  );
});

Deno.test("OciRuntimeCli.ps() parses the pid list and treats null as empty", async () => {
  await using fake = await fakeRuntime();
  assert.deepEqual(await fake.cli({ FAKE_PS_STDOUT: "[12,34]\n" }).ps("c1"), [12, 34]);
  assert.deepEqual(await fake.cli({ FAKE_PS_STDOUT: "null" }).ps("c1"), []);
  assert.deepEqual((await fake.argv()).slice(4), ["ps", "--format", "json", "c1"]);
});

Deno.test("OciRuntimeCli.events() returns the one stats event", async () => {
  await using fake = await fakeRuntime();
  const ev = '{"type":"stats","id":"c1","data":{"pids":{"current":1}}}\n';
  const event = await fake.cli({ FAKE_EVENTS_STDOUT: ev }).events("c1", { stats: true });
  assert.deepEqual(event, { type: "stats", id: "c1", data: { pids: { current: 1 } } });
  assert.deepEqual((await fake.argv()).slice(4), ["events", "--stats", "c1"]);
});

Deno.test("OciRuntimeCli.version() returns the version token without global flags", async () => {
  await using fake = await fakeRuntime();
  const cli = fake.cli({ FAKE_VERSION_STDOUT: "runc version 1.1.5+ds1\ncommit: x\n" }, {
    root: "/r",
  });
  assert.equal(await cli.version(), "1.1.5+ds1");
  assert.deepEqual(await fake.argv(), ["--version"]);
});

Deno.test("OciRuntimeCli runs every per-container command in cwd (the bundle)", async () => {
  await using fake = await fakeRuntime();
  const bundle = await Deno.realPath(await Deno.makeTempDir({ prefix: "skiff-bundle-" }));
  try {
    const here = await Deno.realPath(Deno.cwd());
    const cwdOf = async (call: (cli: OciRuntimeCli) => Promise<unknown>, cli: OciRuntimeCli) => {
      await Deno.remove(`${fake.dir}/cwd`).catch(() => {});
      await call(cli);
      return (await Deno.readTextFile(`${fake.dir}/cwd`)).trim();
    };
    const inBundle = fake.cli({
      FAKE_STATE_STDOUT: JSON.stringify({ id: "c1", pid: 1, status: "running", bundle }),
      FAKE_PS_STDOUT: "[1]",
      FAKE_EVENTS_STDOUT: JSON.stringify({ type: "stats", id: "c1", data: {} }),
      FAKE_VERSION_STDOUT: "runc version 1.1.5\n",
      FAKE_FEATURES_STDOUT: "{}",
    }, { cwd: bundle });
    const calls: Record<string, (cli: OciRuntimeCli) => Promise<unknown>> = {
      create: (cli) => cli.create("c1", { bundle: "/elsewhere", pidFile: `${PIDS}/p` }),
      start: (cli) => cli.start("c1"),
      state: (cli) => cli.state("c1"),
      kill: (cli) => cli.kill("c1", 15),
      exec: (cli) => cli.exec("c1", "e1", { args: ["true"] }, { pidFile: `${PIDS}/p` }),
      ps: (cli) => cli.ps("c1"),
      pause: (cli) => cli.pause("c1"),
      resume: (cli) => cli.resume("c1"),
      update: (cli) => cli.update("c1", {}),
      checkpoint: (cli) => cli.checkpoint("c1", { imagePath: "/i" }),
      events: (cli) => cli.events("c1"),
      delete: (cli) => cli.delete("c1", { force: true }),
    };
    for (const [name, call] of Object.entries(calls)) {
      assert.equal(await cwdOf(call, inBundle), bundle, name);
    }
    // Not per-container: where the caller is.
    assert.equal(await cwdOf((cli) => cli.version(), inBundle), here, "--version");
    assert.equal(await cwdOf((cli) => cli.features(), inBundle), here, "features");
    // Without cwd, create and restore still run in their bundle; the others where the caller is.
    const plain = fake.cli();
    const create = (cli: OciRuntimeCli) => cli.create("c1", { bundle, pidFile: `${PIDS}/p` });
    assert.equal(await cwdOf(create, plain), bundle, "create without cwd");
    assert.equal(await cwdOf((cli) => cli.start("c1"), plain), here, "start without cwd");
    // A bundle that is gone (a late delete) does not make the command fail to spawn.
    const gone = fake.cli({}, { cwd: `${bundle}/gone` });
    assert.equal(await cwdOf((cli) => cli.delete("c1"), gone), here, "delete with a gone cwd");
  } finally {
    await Deno.remove(bundle, { recursive: true });
  }
});

Deno.test("OciRuntimeCli.features() parses the document, run without global flags", async () => {
  await using fake = await fakeRuntime();
  const doc = { ociVersionMin: "1.0.0", mountOptions: ["ro", "rro"], linux: { namespaces: [] } };
  const cli = fake.cli({ FAKE_FEATURES_STDOUT: JSON.stringify(doc) }, { root: "/r" });
  assert.deepEqual(await cli.features(), doc);
  assert.deepEqual(await fake.argv(), ["features"]);
  await assert.rejects(
    fake.cli({ FAKE_FEATURES_STDOUT: "[1]" }).features(),
    (e: unknown) => e instanceof OciRuntimeError && /not a JSON object/.test(e.message),
  );
  await assert.rejects(
    fake.cli({ FAKE_FEATURES_EXIT: "1", FAKE_FEATURES_STDERR: "unknown command features" })
      .features(),
    (e: unknown) => e instanceof OciRuntimeError && /unknown command features/.test(e.message),
  );
});

Deno.test("OciRuntimeCli.state() of a missing container rejects with ConnectError NotFound", async () => {
  await using fake = await fakeRuntime();
  const cli = fake.cli({
    FAKE_STATE_EXIT: "128",
    FAKE_STATE_LOG: '{"msg":"loading container \\"c1\\": file does not exist","level":"error"}',
  });
  const err = await cli.state("c1").then(() => assert.fail("state should fail"), (e) => e);
  assert.ok(err instanceof ConnectError);
  assert.equal(err.code, Code.NotFound);
  assert.ok(err.cause instanceof OciRuntimeError);
  assert.ok(isNotExist(err));
});

Deno.test("OciRuntimeCli.delete() maps crun's missing state file to NotFound", async () => {
  await using fake = await fakeRuntime();
  const cli = fake.cli({
    FAKE_DELETE_EXIT: "1",
    FAKE_DELETE_LOG: '{"msg":"error opening file `/run/crun/c1/status`: No such file or ' +
      'directory","level":"error"}\n',
  });
  await assert.rejects(cli.delete("c1"), (e) => isNotExist(e));
});

Deno.test("OciRuntimeCli.kill() rejects NotFound when the state says stopped", async () => {
  await using fake = await fakeRuntime();
  const cli = fake.cli({
    FAKE_KILL_EXIT: "128",
    FAKE_KILL_LOG: '{"msg":"connecting to control server at PID 7: connection refused",' +
      '"level":"error"}',
    FAKE_STATE_STDOUT: '{"id":"c1","pid":0,"status":"stopped","bundle":"/b"}',
  });
  await assert.rejects(cli.kill("c1", 9), (e) => {
    assert.ok(e instanceof ConnectError);
    assert.equal(e.code, Code.NotFound);
    assert.match(e.message, /connection refused/);
    return true;
  });
});

Deno.test("OciRuntimeCli.kill() keeps an OciRuntimeError when the container still runs", async () => {
  await using fake = await fakeRuntime();
  const cli = fake.cli({
    FAKE_KILL_EXIT: "1",
    FAKE_KILL_LOG: '{"level":"error","msg":"permission denied"}',
    FAKE_STATE_STDOUT: '{"id":"c1","pid":5,"status":"running","bundle":"/b"}',
  });
  await assert.rejects(
    cli.kill("c1", 9),
    (e) => e instanceof OciRuntimeError && e.runtimeMessage === "permission denied",
  );
});

function runtimeError(runtimeMessage: string, command = "kill"): OciRuntimeError {
  return new OciRuntimeError({
    binary: "runc",
    command,
    id: "c1",
    args: [command, "c1"],
    exitCode: 1,
    runtimeMessage,
  });
}

Deno.test("mapKillError() maps finished-process errors to NotFound and others to FailedPrecondition", () => {
  for (
    const e of [
      runtimeError("container not running"),
      runtimeError("container c1 not found"),
      new Error("os: process already finished"),
      new Error("no such process"),
      new Deno.errors.NotFound("ESRCH: No such process"),
    ]
  ) {
    assert.equal(mapKillError(e).code, Code.NotFound, String(e));
  }
  const other = mapKillError(runtimeError("permission denied"));
  assert.equal(other.code, Code.FailedPrecondition);
  assert.match(other.message, /permission denied/);
  const given = new ConnectError("x", Code.Unavailable);
  assert.equal(mapKillError(given), given);
});

Deno.test("isNotExist() recognises runc, runsc and crun wording only", () => {
  assert.ok(isNotExist(runtimeError("container does not exist", "delete")));
  assert.ok(isNotExist(runtimeError('loading container "c1": file does not exist', "delete")));
  assert.ok(isNotExist(new ConnectError("gone", Code.NotFound)));
  assert.ok(!isNotExist(runtimeError("cannot delete a running process", "delete")));
  assert.ok(!isNotExist(runtimeError("open /etc/x: No such file or directory", "delete")));
  assert.ok(!isNotExist(new ConnectError("x", Code.FailedPrecondition)));
  assert.ok(!isNotExist("does not exist"));
});

Deno.test("readPidFile() waits for a pid file written after the call", async () => {
  const dir = await Deno.makeTempDir({ prefix: "skiff-pid-" });
  try {
    const path = `${dir}/init.pid`;
    const pending = readPidFile(path, { attempts: 200, intervalMs: 10 });
    await new Promise((r) => setTimeout(r, 50));
    await Deno.writeTextFile(path, "4242");
    assert.equal(await pending, 4242);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("readPidFile() rejects naming the file when it never holds a pid", async () => {
  const dir = await Deno.makeTempDir({ prefix: "skiff-pid-" });
  try {
    await Deno.writeTextFile(`${dir}/bad.pid`, "abc");
    await assert.rejects(
      readPidFile(`${dir}/bad.pid`, { attempts: 2, intervalMs: 1 }),
      (e) => e instanceof Error && e.message.includes(`${dir}/bad.pid`) && /"abc"/.test(e.message),
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

// ---------------------------------------------------------------------------------------------
// Real runtimes.

interface Bundle {
  dir: string;
  root: string;
  [Symbol.asyncDispose](): Promise<void>;
}

/**
 * A busybox bundle in a temp dir (config.json from `runc spec`, patched), with a runtime state
 * root beside it. Disposal force-deletes the listed containers and removes the directory.
 */
async function busyboxBundle(
  binary: string,
  ids: string[],
  args: string[],
  patch: (config: Record<string, unknown>) => void = () => {},
): Promise<Bundle> {
  const tmp = await Deno.makeTempDir({ prefix: "skiff-runtime-test-" });
  const dir = `${tmp}/bundle`;
  const root = `${tmp}/root`;
  await Deno.mkdir(`${dir}/rootfs/bin`, { recursive: true });
  await Deno.mkdir(root);
  await Deno.copyFile("/bin/busybox", `${dir}/rootfs/bin/busybox`);
  await Deno.chmod(`${dir}/rootfs/bin/busybox`, 0o755);
  for (const tool of ["sh", "echo", "sleep", "cat"]) {
    await Deno.symlink("busybox", `${dir}/rootfs/bin/${tool}`);
  }
  const spec = await new Deno.Command("runc", { args: ["spec", "--bundle", dir] }).output();
  assert.equal(spec.code, 0, new TextDecoder().decode(spec.stderr));
  const config = JSON.parse(await Deno.readTextFile(`${dir}/config.json`));
  config.process.args = args;
  config.process.terminal = false;
  config.process.env = ["PATH=/bin"];
  config.root.readonly = false;
  patch(config);
  await Deno.writeTextFile(`${dir}/config.json`, JSON.stringify(config, null, 2));
  return {
    dir,
    root,
    async [Symbol.asyncDispose]() {
      for (const id of ids) {
        await new Deno.Command(binary, { args: ["--root", root, "delete", "--force", id] })
          .output();
      }
      await Deno.remove(tmp, { recursive: true });
    },
  };
}

/** A ProcessStdio stand-in that collects the container's stdout and stderr. */
class CapturedStdio implements ProcessStdio {
  readonly stdio = { stdin: "null", stdout: "piped", stderr: "piped" } as const;
  stdout = "";
  stderr = "";
  #readers: ReadableStreamDefaultReader<Uint8Array>[] = [];
  #done: Promise<unknown> = Promise.resolve();
  #ended = false;
  #changed: () => void = () => {};

  attach(child: Deno.ChildProcess): void {
    this.#done = Promise.all([
      this.#pump(child.stdout, (s) => this.stdout += s),
      this.#pump(child.stderr, (s) => this.stderr += s),
    ]).finally(() => {
      this.#ended = true;
      this.#changed();
    });
  }

  async #pump(stream: ReadableStream<Uint8Array>, add: (s: string) => void): Promise<void> {
    const reader = stream.getReader();
    this.#readers.push(reader);
    const decoder = new TextDecoder();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return;
        add(decoder.decode(value, { stream: true }));
        this.#changed();
      }
    } catch {
      // cancelled by close()
    }
  }

  /** Resolves once stdout contains `text`; rejects if both streams end without it. */
  async waitForStdout(text: string): Promise<void> {
    while (!this.stdout.includes(text)) {
      if (this.#ended) {
        throw new Error(`stdout ended without ${JSON.stringify(text)}: ${this.stdout}`);
      }
      await new Promise<void>((r) => this.#changed = r);
    }
  }

  /** Resolves when every holder of the pipes has closed them. */
  async ended(): Promise<void> {
    await this.#done;
  }

  async close(): Promise<void> {
    await Promise.all(this.#readers.map((r) => r.cancel().catch(() => {})));
    await this.#done;
  }
}

async function waitForStatus(cli: OciRuntimeCli, id: string, status: string): Promise<void> {
  let last = "";
  for (let i = 0; i < 200; i++) {
    last = (await cli.state(id)).status;
    if (last === status) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  assert.fail(`container ${id} never reached status "${status}" (last "${last}")`);
}

function uniqueId(prefix: string): string {
  return `${prefix}-${crypto.randomUUID().slice(0, 8)}`;
}

const INIT_ARGS = ["sh", "-c", "echo init-out; exec sleep 1000"];
const EXEC_PROCESS = {
  terminal: false,
  user: { uid: 0, gid: 0 },
  args: ["sh", "-c", "echo exec-ok"],
  env: ["PATH=/bin"],
  cwd: "/",
};

/** create → start → state/ps → pause/resume → events → exec → kill → delete, with output. */
async function mainFlow(binary: string, globalArgs: string[], hostPids: boolean): Promise<void> {
  const id = uniqueId("skiff-flow");
  await using bundle = await busyboxBundle(binary, [id], INIT_ARGS);
  const cli = new OciRuntimeCli({
    binary,
    root: bundle.root,
    log: `${bundle.dir}/log.json`,
    globalArgs,
  });
  const initIo = new CapturedStdio();
  const execIo = new CapturedStdio();
  try {
    await cli.create(id, { bundle: bundle.dir, pidFile: `${bundle.dir}/init.pid`, io: initIo });
    const pid = await readPidFile(`${bundle.dir}/init.pid`);
    const created = await cli.state(id);
    assert.equal(created.status, "created");
    assert.equal(created.id, id);
    assert.equal(created.pid, pid);
    assert.equal(created.bundle, bundle.dir);
    assert.equal(initIo.stdout, "");

    await cli.start(id);
    await initIo.waitForStdout("init-out\n");
    assert.equal((await cli.state(id)).status, "running");
    const pids = await cli.ps(id);
    // runc/crun report host pids; runsc reports pids inside the sandbox.
    if (hostPids) assert.ok(pids.includes(pid), `ps ${JSON.stringify(pids)} lacks init ${pid}`);
    else assert.ok(pids.length >= 1, `ps returned ${JSON.stringify(pids)}`);

    await cli.pause(id);
    assert.equal((await cli.state(id)).status, "paused");
    await cli.resume(id);
    assert.equal((await cli.state(id)).status, "running");

    const stats = await cli.events(id, { stats: true });
    assert.equal(stats.type, "stats");
    assert.equal(typeof stats.data, "object");

    await cli.exec(id, "e1", EXEC_PROCESS, {
      pidFile: `${bundle.dir}/exec.pid`,
      io: execIo,
      detach: true,
    });
    assert.ok((await readPidFile(`${bundle.dir}/exec.pid`)) > 0);
    await execIo.ended();
    assert.equal(execIo.stdout, "exec-ok\n");
    assert.equal(execIo.stderr, "");

    await cli.kill(id, 9);
    await waitForStatus(cli, id, "stopped");
    await assert.rejects(
      cli.kill(id, 9),
      (e) => e instanceof ConnectError && e.code === Code.NotFound,
    );
    await cli.delete(id);
    await assert.rejects(cli.state(id), (e) => isNotExist(e));
    await assert.rejects(
      cli.delete(id),
      (e) => e instanceof ConnectError && e.code === Code.NotFound && isNotExist(e),
    );
  } finally {
    await initIo.close();
    await execIo.close();
  }
}

integrationTest(
  "OciRuntimeCli drives runc through create, start, ps, pause, exec, kill and delete",
  { root: true, binaries: ["runc", "/bin/busybox"] },
  () => mainFlow("runc", [], true),
);

integrationTest(
  "OciRuntimeCli drives runsc (--network=none) through the same flow",
  { root: true, binaries: ["runsc", "runc", "/bin/busybox"] },
  () => mainFlow("runsc", ["--network=none"], false),
);

integrationTest(
  "OciRuntimeCli.create() with runc rejects with runc's error for a missing executable",
  { root: true, binaries: ["runc", "/bin/busybox"] },
  async () => {
    const id = uniqueId("skiff-bad-args");
    await using bundle = await busyboxBundle("runc", [id], ["/nonexistent"]);
    const cli = new OciRuntimeCli({ root: bundle.root, log: `${bundle.dir}/log.json` });
    const io = new CapturedStdio();
    try {
      await assert.rejects(
        cli.create(id, { bundle: bundle.dir, pidFile: `${bundle.dir}/init.pid`, io }),
        (e) => {
          assert.ok(e instanceof OciRuntimeError, String(e));
          assert.match(e.runtimeMessage, /exec: "\/nonexistent"/);
          assert.match(e.message, new RegExp(`^runc create "${id}" failed \\(exit status 1\\)`));
          return true;
        },
      );
    } finally {
      await io.close();
    }
  },
);

integrationTest(
  "OciRuntimeCli.create() with runc rejects with runc's error for a bundle without config.json",
  { root: true, binaries: ["runc", "/bin/busybox"] },
  async () => {
    const id = uniqueId("skiff-bad-bundle");
    await using bundle = await busyboxBundle("runc", [id], INIT_ARGS);
    await Deno.remove(`${bundle.dir}/config.json`);
    // With a log file, and without one (then the error comes from runc's stderr).
    for (const log of [`${bundle.dir}/log.json`, undefined]) {
      const cli = new OciRuntimeCli({ root: bundle.root, ...(log ? { log } : {}) });
      await assert.rejects(
        cli.create(id, { bundle: bundle.dir, pidFile: `${bundle.dir}/init.pid` }),
        (e) => e instanceof OciRuntimeError && /config\.json not found/.test(e.runtimeMessage),
      );
    }
  },
);

integrationTest(
  "OciRuntimeCli.kill() of a stopped runc container rejects with ConnectError NotFound",
  { root: true, binaries: ["runc", "/bin/busybox"] },
  async () => {
    const id = uniqueId("skiff-stopped");
    await using bundle = await busyboxBundle("runc", [id], ["sh", "-c", "exit 3"]);
    const cli = new OciRuntimeCli({ root: bundle.root, log: `${bundle.dir}/log.json` });
    await cli.create(id, { bundle: bundle.dir, pidFile: `${bundle.dir}/init.pid` });
    await cli.start(id);
    await waitForStatus(cli, id, "stopped");
    const err = await cli.kill(id, 15).then(() => assert.fail("kill should fail"), (e) => e);
    assert.ok(err instanceof ConnectError, String(err));
    assert.equal(err.code, Code.NotFound);
    assert.match(err.message, /container not running/);
    await cli.delete(id);
  },
);

integrationTest(
  "OciRuntimeCli spawning through Reaper.spawn leaves init and exec exits to the reaper",
  { root: true, binaries: ["runc", "/bin/busybox"] },
  async () => {
    const id = uniqueId("skiff-reaped");
    await using bundle = await busyboxBundle("runc", [id], ["sleep", "1000"]);
    const reaper = Reaper.start();
    const exits = new Map<number, number>();
    const off = reaper.onExit((e) => exits.set(e.pid, e.status));
    const exitOf = async (pid: number): Promise<number> => {
      for (let i = 0; i < 500; i++) {
        const status = exits.get(pid);
        if (status !== undefined) return status;
        await new Promise((r) => setTimeout(r, 20));
      }
      return assert.fail(`the reaper never saw pid ${pid} exit`);
    };
    try {
      const cli = new OciRuntimeCli({
        root: bundle.root,
        log: `${bundle.dir}/log.json`,
        spawn: (cmd) => reaper.spawn(cmd),
      });
      await cli.create(id, { bundle: bundle.dir, pidFile: `${bundle.dir}/init.pid` });
      const initPid = await readPidFile(`${bundle.dir}/init.pid`);
      await cli.start(id);
      await cli.exec(id, "e1", { ...EXEC_PROCESS, args: ["sh", "-c", "exit 7"] }, {
        pidFile: `${bundle.dir}/exec.pid`,
        detach: true,
      });
      assert.equal(await exitOf(await readPidFile(`${bundle.dir}/exec.pid`)), 7);
      await cli.kill(id, 9);
      assert.equal(await exitOf(initPid), 128 + 9);
      await cli.delete(id);
    } finally {
      off();
      reaper.close();
    }
  },
);

function criuWorks(): boolean {
  return new Deno.Command("criu", { args: ["check"], stdout: "null", stderr: "null" })
    .outputSync().success;
}

integrationTest(
  "OciRuntimeCli.checkpoint() with runc reports criu's failure (or dumps where criu works)",
  { root: true, binaries: ["runc", "criu", "/bin/busybox"] },
  async () => {
    const id = uniqueId("skiff-ckpt");
    await using bundle = await busyboxBundle("runc", [id], ["sleep", "1000"]);
    const cli = new OciRuntimeCli({ root: bundle.root, log: `${bundle.dir}/log.json` });
    await cli.create(id, { bundle: bundle.dir, pidFile: `${bundle.dir}/init.pid` });
    await cli.start(id);
    const imagePath = `${bundle.dir}/image`;
    const options = { imagePath, workPath: `${bundle.dir}/work`, leaveRunning: true };
    if (criuWorks()) {
      await cli.checkpoint(id, options);
      assert.ok([...Deno.readDirSync(imagePath)].length > 0, "checkpoint image is empty");
    } else {
      // This kernel (no usable vDSO for criu) cannot dump: the error must say so clearly.
      await assert.rejects(cli.checkpoint(id, options), (e) => {
        assert.ok(e instanceof OciRuntimeError, String(e));
        assert.match(e.message, new RegExp(`^runc checkpoint "${id}" failed`));
        assert.match(e.runtimeMessage, /criu failed/);
        return true;
      });
    }
    await cli.delete(id, { force: true });
  },
);

/** crun 1.8 refuses to create containers when the v1/v2 hybrid hierarchy has v2 controllers. */
function crunRefusesHybridCgroups(): boolean {
  try {
    return Deno.readTextFileSync("/sys/fs/cgroup/unified/cgroup.controllers").trim() !== "";
  } catch {
    return false;
  }
}

integrationTest(
  "OciRuntimeCli drives crun (main flow, or its cgroup error on hybrid hierarchies)",
  { root: true, binaries: ["crun", "runc", "/bin/busybox"] },
  async () => {
    const cli0 = new OciRuntimeCli({ binary: "crun" });
    assert.match(await cli0.version(), /^\d+\.\d+/);
    if (!crunRefusesHybridCgroups()) {
      await mainFlow("crun", [], true);
      return;
    }
    const id = uniqueId("skiff-crun");
    await using bundle = await busyboxBundle("crun", [id], INIT_ARGS);
    const cli = new OciRuntimeCli({
      binary: "crun",
      root: bundle.root,
      log: `${bundle.dir}/log.json`,
    });
    await assert.rejects(
      cli.create(id, { bundle: bundle.dir, pidFile: `${bundle.dir}/init.pid` }),
      (e) => e instanceof OciRuntimeError && /cgroups in hybrid mode/.test(e.runtimeMessage),
    );
    // crun's wording for a missing container is recognised.
    await assert.rejects(cli.state(id), (e) => e instanceof ConnectError && isNotExist(e));
    await assert.rejects(cli.delete(id), (e) => isNotExist(e));
  },
);

Deno.test("OciRuntimeCli hands the container's stdio to create, or to start with stdioAt: start", async () => {
  await using fake = await fakeRuntime();
  const env = { FAKE_CREATE_STDOUT: "from-create", FAKE_START_STDOUT: "from-start" };
  for (const stdioAt of ["create", "start"] as const) {
    const outputs: Promise<string>[] = [];
    const io: ProcessStdio = {
      stdio: { stdin: "null", stdout: "piped", stderr: "null" },
      attach: (child) => outputs.push(new Response(child.stdout).text()),
    };
    const cli = fake.cli(env, { stdioAt });
    await cli.create("c1", { bundle: fake.dir, pidFile: `${fake.dir}/pid`, io });
    assert.equal(outputs.length, stdioAt === "create" ? 1 : 0, `${stdioAt}: attached at create`);
    await cli.start("c1");
    assert.equal(outputs.length, 1, `${stdioAt}: attached once`);
    assert.equal(await outputs[0], `from-${stdioAt}`, stdioAt);
  }
});

Deno.test("OciRuntimeCli.ps() with psPids: sandbox lists nothing and runs nothing", async () => {
  await using fake = await fakeRuntime();
  const cli = fake.cli({ FAKE_PS_STDOUT: "[1,2]" }, { psPids: "sandbox" });
  assert.deepEqual(await cli.ps("c1"), []);
  assert.equal(await exists(`${fake.dir}/argv`), false, "the runtime was not run");
  assert.deepEqual(await fake.cli({ FAKE_PS_STDOUT: "[1,2]" }).ps("c1"), [1, 2]);
});
