/**
 * The scale benchmark's floor (bench/scale_floor.ts) runs idle Deno processes "exactly as the
 * launcher starts its shim": its launcher is the installed launcher's text with only the entry
 * swapped. Checked on the texts `installExampleShims` writes in both modes, and on a real idle process
 * started from such a text (it runs, and it runs with the launcher's flags and environment).
 */
import assert from "node:assert/strict";
import {
  bundleLauncherScript,
  DEFAULT_SHIM_V8_FLAGS,
  launcherScript,
} from "../../../sdk/install/install.ts";
import { idleLauncher } from "../../../bench/scale_floor.ts";

const IDLE = "/tmp/floor/idle.js";

Deno.test("idleLauncher: a bundle launcher's text with only its entry swapped", () => {
  const entry = "/opt/lib/skiff/containerd-shim-skiff-runc-v2/0123/main.js";
  const text = bundleLauncherScript({
    deno: "/usr/bin/deno",
    denoDir: "/opt/lib/skiff/cache",
    entry,
    v8Flags: DEFAULT_SHIM_V8_FLAGS,
  });
  const idle = idleLauncher(text, IDLE);
  assert.equal(idle, text.replaceAll(entry, IDLE), "nothing but the entry changes");
  assert.ok(!idle.includes(entry), "the bundle is gone everywhere (exec and SKIFF_SHIM_BUNDLE)");
  const exec = idle.split("\n").find((l) => l.startsWith("exec "))!;
  assert.ok(exec.includes("--no-code-cache"), exec);
  assert.ok(exec.includes(`--v8-flags=${DEFAULT_SHIM_V8_FLAGS.join(",")}`), exec);
  assert.ok(exec.endsWith(`'${IDLE}' "$@"`), exec);
  assert.ok(idle.includes(': "${MALLOC_ARENA_MAX:=1}"'), "the launcher's malloc arenas");
});

Deno.test("idleLauncher: a source launcher's text, and a text with no exec line", () => {
  const text = launcherScript({
    deno: "/usr/bin/deno",
    denoDir: "/root/.cache/deno",
    config: "/src/deno.json",
    entry: "/src/examples/runc/main.ts",
  });
  const idle = idleLauncher(text, IDLE);
  assert.equal(idle, text.replaceAll("'/src/examples/runc/main.ts'", `'${IDLE}'`));
  assert.notEqual(idle, text);
  assert.throws(() => idleLauncher("#!/bin/sh\necho hi\n", IDLE), /no "exec/);
});

Deno.test("idleLauncher: the idle process runs with the launcher's flags and environment", async () => {
  const dir = await Deno.makeTempDir({ prefix: "skiff-floor-test-" });
  try {
    // Prints what the floor's processes run with, instead of waiting.
    await Deno.writeTextFile(
      `${dir}/idle.js`,
      "console.log(JSON.stringify([Deno.env.get('MALLOC_ARENA_MAX'), typeof gc]));\n",
    );
    const text = bundleLauncherScript({
      deno: Deno.execPath(),
      denoDir: `${dir}/cache`,
      entry: `${dir}/never-bundled/main.js`,
      v8Flags: DEFAULT_SHIM_V8_FLAGS,
    });
    await Deno.writeTextFile(`${dir}/launcher`, idleLauncher(text, `${dir}/idle.js`));
    const env = Deno.env.toObject();
    delete env.MALLOC_ARENA_MAX;
    const out = await new Deno.Command("/bin/sh", {
      args: [`${dir}/launcher`],
      env,
      clearEnv: true,
      stdout: "piped",
      stderr: "piped",
    }).output();
    const err = new TextDecoder().decode(out.stderr);
    assert.equal(out.code, 0, err);
    // `gc` exists only under the launcher's --expose-gc.
    assert.deepEqual(JSON.parse(new TextDecoder().decode(out.stdout)), ["1", "function"], err);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
