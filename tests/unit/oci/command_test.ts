// command.ts: one runtime command run, its output, and its failure as an error naming the
// binary, command, id and the runtime's own message (log first, stderr otherwise); a container
// the runtime does not know is NotFound. A shell script stands in for runc.
import assert from "node:assert/strict";
import { cliSettings, outputJson, runCommand } from "../../../sdk/oci/command.ts";
import { Code, isStatusError } from "../../../sdk/ttrpc/status_error.ts";

async function withRuntime(script: string, fn: (binary: string, dir: string) => Promise<void>) {
  const dir = await Deno.makeTempDir();
  try {
    const binary = `${dir}/fake-runc`;
    await Deno.writeTextFile(binary, `#!/bin/sh\n${script}\n`);
    await Deno.chmod(binary, 0o755);
    await fn(binary, dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

const runner = (binary: string, log?: string) => ({
  binary,
  spawn: (cmd: Deno.Command) => cmd.spawn(),
  env: { FAKE: "1" },
  log,
});

Deno.test("runCommand: argv as given, environment added, stdout returned", async () => {
  await withRuntime('echo "$FAKE $*"', async (binary) => {
    const out = await runCommand(runner(binary), "state", "c1", ["state", "c1"]);
    assert.equal(out, "1 state c1\n");
  });
});

Deno.test("runCommand: a failure names the command and carries stderr's last words", async () => {
  await withRuntime('echo "noise" >&2; echo "cannot pause: frozen" >&2; exit 3', async (binary) => {
    await assert.rejects(runCommand(runner(binary), "pause", "c1", ["pause", "c1"]), (e) => {
      const m = String((e as Error).message);
      assert.match(m, /fake-runc/);
      assert.match(m, /pause/);
      assert.match(m, /c1/);
      assert.match(m, /cannot pause: frozen/);
      return true;
    });
  });
});

Deno.test("runCommand: the runtime's log wins over stderr; 'does not exist' is NotFound", async () => {
  await withRuntime(
    `echo '{"level":"error","msg":"container \\"c9\\" does not exist"}' >> "$LOG"; echo junk >&2; exit 1`,
    async (binary, dir) => {
      const log = `${dir}/log.json`;
      await Deno.writeTextFile(log, '{"level":"error","msg":"an older error"}\n');
      const r = { ...runner(binary, log), env: { LOG: log } };
      await assert.rejects(runCommand(r, "kill", "c9", ["kill", "c9", "9"]), (e) => {
        assert.ok(isStatusError(e));
        assert.equal(e.code, Code.NotFound);
        assert.match(e.message, /container "c9" does not exist/);
        assert.doesNotMatch(e.message, /older error/);
        return true;
      });
      // Not about a container (no id): the same message is not NotFound.
      await assert.rejects(runCommand(r, "features", undefined, ["features"]), (e) => {
        assert.equal(isStatusError(e) ? e.code : undefined, undefined);
        return true;
      });
    },
  );
});

Deno.test("runCommand: a binary that cannot be spawned fails naming it", async () => {
  await assert.rejects(
    runCommand(runner("/nonexistent/runc"), "create", "c1", ["create", "c1"]),
    /nonexistent\/runc/,
  );
});

Deno.test("cliSettings fills runc's defaults; outputJson refuses output that is not the value", () => {
  const s = cliSettings({});
  assert.equal(s.binary, "runc");
  assert.equal(s.systemdCgroup, false);
  assert.equal(s.initExit, "reap");
  assert.deepEqual(s.globalArgs, []);
  assert.deepEqual(
    outputJson("runc", "ps", "c1", "[1,2]\n", (v: unknown) => Array.isArray(v)),
    [1, 2],
  );
  assert.throws(
    () => outputJson("runc", "ps", "c1", "oops", (v: unknown) => Array.isArray(v)),
    /runc/,
  );
});
