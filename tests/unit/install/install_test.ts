import { SKIFF_VERSION } from "../../../sdk/shim/version.ts";
import assert from "node:assert/strict";
import { checkoutRoot, EXAMPLE_SHIMS, installExampleShims } from "../../../sdk/install/examples.ts";
import {
  bundleLauncherScript,
  currentDenoDir,
  deleteFastPath,
  launcherScript,
} from "../../../sdk/install/install.ts";
import { parseInstallArgs } from "../../../sdk/install/cli.ts";
import { launcherCodeId } from "../../../sdk/shim/spare/mod.ts";
import { sha256Hex } from "../../../sdk/shim/contract/sha256.ts";
import { runDelete } from "../../../sdk/shim/boot/delete.ts";
import { RUNTIME_DELETED_FILE } from "../../../sdk/shim/contract/bundle_files.ts";
import { ADDRESS_FILE, OPS_SOCKET_SUFFIX } from "../../../sdk/shim/contract/socket_address.ts";
import { UPGRADE_STATE_SUFFIX } from "../../../sdk/shim/contract/upgrade.ts";
import { parseShimFlags } from "../../../sdk/shim/contract/flags.ts";
import { LAUNCHER_DEFAULTS, LAUNCHER_SETS } from "../../../sdk/shim/contract/launcher_env.ts";
import type { Shim } from "../../../sdk/shim/shim.ts";
import { Logger } from "../../../sdk/shim/logger.ts";

const SKIFF_VERSION_RE = SKIFF_VERSION.replaceAll(".", "\\.");
const dec = new TextDecoder();

Deno.test("installExampleShims() in source mode writes launchers that run the checkout", async () => {
  const prefix = await Deno.makeTempDir({ prefix: "skiff-install-" });
  try {
    const paths = await installExampleShims({ prefix, mode: "source" });
    const root = checkoutRoot();
    assert.deepEqual(paths, [
      `${await Deno.realPath(prefix)}/bin/containerd-shim-skiff-runc-v2`,
      `${await Deno.realPath(prefix)}/bin/containerd-shim-skiff-runsc-v2`,
      `${await Deno.realPath(prefix)}/bin/containerd-shim-skiff-crun-v2`,
      `${await Deno.realPath(prefix)}/bin/containerd-shim-skiff-vm-v2`,
    ]);
    assert.ok((await Deno.stat(`${root}/deno.json`)).isFile);
    for (const [i, p] of paths.entries()) {
      assert.equal((await Deno.stat(p)).mode! & 0o777, 0o755);
      const text = await Deno.readTextFile(p);
      assert.ok(text.startsWith("#!/bin/sh\n"));
      const entry = Object.values(EXAMPLE_SHIMS)[i]!;
      assert.ok(
        text.includes(
          `exec '${Deno.execPath()}' run -A --quiet --no-prompt --cached-only ` +
            `--config '${root}/deno.json' '${root}/${entry}' "$@"\n`,
        ),
        text,
      );
      assert.ok(text.includes(`DENO_DIR='${await currentDenoDir()}'\n`), text);
    }
    // Installing again replaces the launchers in place.
    assert.deepEqual(await installExampleShims({ prefix, mode: "source" }), paths);
    assert.deepEqual([...Deno.readDirSync(`${prefix}/bin`)].map((e) => e.name).sort(), [
      "containerd-shim-skiff-crun-v2",
      "containerd-shim-skiff-runc-v2",
      "containerd-shim-skiff-runsc-v2",
      "containerd-shim-skiff-vm-v2",
    ]);
  } finally {
    await Deno.remove(prefix, { recursive: true });
  }
});

Deno.test("a launcher runs its entry from any cwd with args, pinned DENO_DIR and the config", async () => {
  const prefix = await Deno.makeTempDir({ prefix: "skiff-install-" });
  const root = await Deno.makeTempDir({ prefix: "skiff-install-root-" });
  const elsewhere = await Deno.makeTempDir({ prefix: "skiff-install-cwd-" });
  try {
    // An import-map alias proves the launcher passes --config.
    await Deno.writeTextFile(
      `${root}/deno.json`,
      JSON.stringify({ imports: { "#greeting": "./greeting.ts" } }),
    );
    await Deno.writeTextFile(`${root}/greeting.ts`, `export const greeting = "hi";\n`);
    await Deno.writeTextFile(
      `${root}/probe.ts`,
      `import { greeting } from "#greeting";\n` +
        `console.log(JSON.stringify({ greeting, args: Deno.args, denoDir: Deno.env.get("DENO_DIR"), ` +
        `cwd: Deno.cwd() }));\n`,
    );
    const [launcher] = await installExampleShims({
      prefix,
      root,
      mode: "source",
      shims: { "containerd-shim-probe-v1": "probe.ts" },
    });
    const out = await new Deno.Command(launcher!, {
      args: ["-namespace", "a b", "-id", "x'y", "start"],
      cwd: elsewhere,
      env: { PATH: "/usr/bin:/bin", DENO_DIR: "/nonexistent" },
      clearEnv: true,
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.equal(dec.decode(out.stderr), "");
    assert.equal(out.code, 0);
    const got = JSON.parse(dec.decode(out.stdout));
    assert.deepEqual(got, {
      greeting: "hi",
      args: ["-namespace", "a b", "-id", "x'y", "start"],
      denoDir: await currentDenoDir(),
      cwd: await Deno.realPath(elsewhere),
    });
  } finally {
    for (const d of [prefix, root, elsewhere]) await Deno.remove(d, { recursive: true });
  }
});

Deno.test("a bundled launcher needs neither the checkout nor deno's cache, and keeps its code until reinstalled", async () => {
  const prefix = await Deno.makeTempDir({ prefix: "skiff-install-" });
  const root = await Deno.makeTempDir({ prefix: "skiff-install-root-" });
  const elsewhere = await Deno.makeTempDir({ prefix: "skiff-install-cwd-" });
  try {
    // An npm import through the import map and a dynamic import: both must be in the bundle.
    await Deno.writeTextFile(
      `${root}/deno.json`,
      JSON.stringify({ imports: { "#wire": "npm:@bufbuild/protobuf@2.17.0/wire" } }),
    );
    const probe = (greeting: string) =>
      `import { BinaryWriter } from "#wire";\n` +
      `const { lazy } = await import("./lazy.ts");\n` +
      `console.log(JSON.stringify({ greeting: ${JSON.stringify(greeting)}, lazy, ` +
      `bytes: new BinaryWriter().uint32(300).finish().length, args: Deno.args, ` +
      `launcher: Deno.env.get("SKIFF_SHIM_LAUNCHER") }));\n`;
    await Deno.writeTextFile(`${root}/probe.ts`, probe("v1"));
    await Deno.writeTextFile(`${root}/lazy.ts`, `export const lazy = "loaded";\n`);
    const install = () =>
      installExampleShims({ prefix, root, shims: { "containerd-shim-probe-v1": "probe.ts" } });
    const [launcher] = await install();
    const text = await Deno.readTextFile(launcher!);
    assert.match(
      text,
      /--no-config --no-lock --cached-only --no-code-cache '--v8-flags=[^']*' '[^']+\/probe\.js'/,
    );
    assert.ok(!text.includes(root), text);
    const run = async () => {
      const out = await new Deno.Command(launcher!, {
        args: ["-id", "x'y", "start"],
        cwd: elsewhere,
        // An empty DENO_DIR elsewhere would not matter either: the launcher pins its own.
        env: { PATH: "/usr/bin:/bin", DENO_DIR: "/nonexistent" },
        clearEnv: true,
        stdout: "piped",
        stderr: "piped",
      }).output();
      assert.equal(out.code, 0, dec.decode(out.stderr));
      return JSON.parse(dec.decode(out.stdout));
    };
    // The source changes and the project is moved away: the installed shim does not change.
    await Deno.writeTextFile(`${root}/probe.ts`, probe("v2"));
    await Deno.rename(root, `${root}.moved`);
    assert.deepEqual(await run(), {
      greeting: "v1",
      lazy: "loaded",
      bytes: 2,
      args: ["-id", "x'y", "start"],
      launcher: launcher,
    });
    // Installed again, it runs the new source; the old bundle, which nothing runs, is gone.
    const bundles = `${prefix}/lib/skiff/containerd-shim-probe-v1`;
    const before = [...Deno.readDirSync(bundles)].map((e) => e.name);
    await Deno.rename(`${root}.moved`, root);
    await install();
    assert.equal((await run()).greeting, "v2");
    const after = [...Deno.readDirSync(bundles)].map((e) => e.name);
    assert.equal(after.length, 1, after.join(" "));
    assert.ok(!before.includes(after[0]!), `${before} → ${after}`);
  } finally {
    await Deno.remove(`${root}.moved`, { recursive: true }).catch(() => {});
    for (const d of [prefix, root, elsewhere]) await Deno.remove(d, { recursive: true });
  }
});

Deno.test("launcherScript() quotes paths with spaces and quotes", () => {
  const s = launcherScript({
    deno: "/opt/my deno/deno",
    denoDir: "/c/it's",
    config: "/r/deno.json",
    entry: "/r/m.ts",
  });
  assert.ok(s.includes(`DENO_DIR='/c/it'\\''s'\n`));
  assert.ok(s.includes(`exec '/opt/my deno/deno' run`));
});

Deno.test("parseInstallArgs() takes NAME=ENTRY pairs and the options, and names what is wrong", () => {
  assert.deepEqual(parseInstallArgs(["containerd-shim-mine-v1=main.ts"]), {
    help: false,
    options: { prefix: "/usr/local", shims: { "containerd-shim-mine-v1": "main.ts" } },
  });
  assert.deepEqual(
    parseInstallArgs([
      "--prefix=/p",
      "--root",
      "/src",
      "--source",
      "--no-spare",
      "containerd-shim-a-v1=a.ts",
      "containerd-shim-b-v2=b/main.ts",
    ]),
    {
      help: false,
      options: {
        prefix: "/p",
        root: "/src",
        mode: "source",
        spare: false,
        shims: { "containerd-shim-a-v1": "a.ts", "containerd-shim-b-v2": "b/main.ts" },
      },
    },
  );
  assert.equal(parseInstallArgs(["--help"]).help, true);
  const bad = (args: string[], message: RegExp) =>
    assert.throws(() => parseInstallArgs(args), (e: Error) => message.test(e.message));
  bad(["--prefix"], /prefix/);
  bad(["--bogus", "containerd-shim-a-v1=a.ts"], /bogus/);
  bad([], /at least one shim/);
  bad(["main.ts"], /"main\.ts": expected NAME=ENTRY/);
  bad(["mine=main.ts"], /"mine": containerd runs runtime io\.containerd\.<name>\.<version>/);
  bad(["containerd-shim-a-v1=a.ts", "containerd-shim-a-v1=b.ts"], /named twice/);
});

Deno.test("the installer CLI installs an author's shim from their project, and refuses a missing entry", async () => {
  const root = await Deno.realPath(await Deno.makeTempDir({ prefix: "skiff-install-author-" }));
  try {
    await Deno.writeTextFile(`${root}/deno.json`, "{}");
    await Deno.writeTextFile(`${root}/main.ts`, 'console.log("mine", Deno.args.join(" "));\n');
    const cli = (args: string[]) =>
      new Deno.Command(Deno.execPath(), {
        args: ["run", "-A", `${checkoutRoot()}/sdk/install/mod.ts`, ...args],
        cwd: root,
        stdout: "piped",
        stderr: "piped",
      }).output();
    const ok = await cli(["--prefix", `${root}/usr`, "containerd-shim-mine-v1=main.ts"]);
    assert.equal(ok.code, 0, dec.decode(ok.stderr));
    assert.match(
      dec.decode(ok.stdout),
      new RegExp(
        `installed ${root}/usr/bin/containerd-shim-mine-v1 \\(runtime io\\.containerd\\.mine\\.v1\\)`,
      ),
    );
    const run = await new Deno.Command(`${root}/usr/bin/containerd-shim-mine-v1`, {
      args: ["-v"],
      stdout: "piped",
    }).output();
    assert.equal(dec.decode(run.stdout), "mine -v\n", "the launcher runs the author's bundle");
    const missing = await cli(["--prefix", `${root}/usr`, "containerd-shim-x-v1=nope.ts"]);
    assert.equal(missing.code, 2);
    assert.match(
      dec.decode(missing.stderr),
      new RegExp(`containerd-shim-x-v1: its entry ${root}/nope\\.ts is not a file`),
    );
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("deno task install --prefix installs through the CLI", async () => {
  const prefix = await Deno.makeTempDir({ prefix: "skiff-install-cli-" });
  try {
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["task", "-q", "install", "--prefix", prefix],
      cwd: checkoutRoot(),
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.equal(out.code, 0, dec.decode(out.stderr));
    const text = dec.decode(out.stdout);
    assert.match(text, /installed .*\/bin\/containerd-shim-skiff-runc-v2/);
    assert.match(text, /installed .*\/bin\/containerd-shim-skiff-runsc-v2/);
    assert.match(text, /installed .*\/bin\/containerd-shim-skiff-crun-v2/);
    assert.match(text, /installed .*\/bin\/containerd-shim-skiff-vm-v2/);
    // The VM example boots an image an installed bundle cannot build: the install builds it, or
    // says what it lacks (a machine without the guest kernel).
    assert.match(
      text,
      /built the VM example's boot image|note: containerd-shim-skiff-vm-v2 cannot boot a VM until/,
    );
    for (const runtime of ["runc", "crun", "vm"]) {
      const v = await new Deno.Command(`${prefix}/bin/containerd-shim-skiff-${runtime}-v2`, {
        args: ["-v"],
        stdout: "piped",
      }).output();
      assert.match(
        dec.decode(v.stdout),
        new RegExp(
          `^io\\.containerd\\.skiff-${runtime}\\.v2 \\(skiff ${SKIFF_VERSION_RE}\\)\n  Version: ${SKIFF_VERSION_RE}\n`,
        ),
      );
    }
  } finally {
    await Deno.remove(prefix, { recursive: true });
  }
});

Deno.test("a bundled launcher reads a dynamically imported chunk only when the import runs", async () => {
  const prefix = await Deno.makeTempDir({ prefix: "skiff-install-" });
  const root = await Deno.makeTempDir({ prefix: "skiff-install-root-" });
  try {
    await Deno.writeTextFile(`${root}/deno.json`, "{}");
    await Deno.writeTextFile(
      `${root}/probe.ts`,
      `if (Deno.args[0] === "never") await import("./never.ts");\nconsole.log("ran");\n`,
    );
    await Deno.writeTextFile(`${root}/never.ts`, `export const never = 1;\n`);
    const [launcher] = await installExampleShims({
      prefix,
      root,
      shims: { "containerd-shim-probe-v1": "probe.ts" },
    });
    const lib = `${prefix}/lib/skiff/containerd-shim-probe-v1`;
    const [hash] = [...Deno.readDirSync(lib)].map((e) => e.name);
    const chunk = [...Deno.readDirSync(`${lib}/${hash}`)].map((e) => e.name)
      .find((n) => n.startsWith("never"));
    assert.ok(chunk, "the dynamic import is a chunk of its own");
    // The chunk becomes a FIFO: whoever opens it for reading completes our open for writing.
    // Deno's graph, had it pre-loaded the literal import, would block on it.
    const fifo = `${lib}/${hash}/${chunk}`;
    await Deno.remove(fifo);
    const mk = await new Deno.Command("mkfifo", { args: [fifo] }).output();
    assert.ok(mk.success);
    const child = new Deno.Command(launcher!, { args: ["-v"], stdout: "piped" }).spawn();
    const writer = Deno.open(fifo, { write: true });
    const first = await Promise.race([
      writer.then(() => "chunk read" as const),
      child.status.then(() => "exited" as const),
    ]);
    // A launcher that opened the FIFO may block reading it again: it has failed, stop it.
    if (first === "chunk read") child.kill("SIGKILL");
    const out = await child.output();
    // Unblock our own pending open (a no-op when the launcher already did).
    const reader = first === "exited" ? await Deno.open(fifo, { read: true }) : undefined;
    (await writer).close();
    reader?.close();
    assert.equal(first, "exited", "the launcher opened a chunk it never imports");
    assert.equal(out.code, 0);
    assert.equal(dec.decode(out.stdout).trim(), "ran");
  } finally {
    for (const d of [prefix, root]) await Deno.remove(d, { recursive: true });
  }
});

// The launcher's fast path is shell; the protocol it implements is the `delete` action's: in
// every case below, where the shell answers, runDelete on the same bundle and arguments prints
// the same bytes and runs no runtime command (so skipping deno loses nothing), and the cases
// where it must answer (and where it must not) are pinned.
Deno.test("the launchers' delete fast path answers only where the delete action would print the same and run nothing", async () => {
  const dir = await Deno.makeTempDir({ prefix: "skiff-fastpath-" });
  try {
    const script = `${dir}/launcher`;
    // The fast path, then a stand-in for `exec deno …` that says it was reached.
    await Deno.writeTextFile(
      script,
      ["#!/bin/sh", ...deleteFastPath(), "echo FELL-THROUGH"].join("\n"),
    );
    const bundle = `${dir}/bundle`;
    const sock = `${dir}/gone.sock`;
    const answer = new Uint8Array([0x08, 0x2a, 0x10, 0x89, 0x01]);
    const flags = ["-namespace", "n", "-address", "/a", "-publish-binary", "/p", "-id", "c1"];
    type Case = {
      name: string;
      files: { answer?: Uint8Array; address?: string; socket?: boolean; beside?: string };
      args: string[];
      answers: boolean;
    };
    const gone = `unix://${sock}`;
    const cases: Case[] = [
      {
        name: "no answer left",
        files: {},
        args: [...flags, "-bundle", bundle, "delete"],
        answers: false,
      },
      {
        name: "an answer, no address file",
        files: { answer },
        args: [...flags, "-bundle", bundle, "delete"],
        answers: false,
      },
      {
        name: "an answer, the socket gone",
        files: { answer, address: gone },
        args: [...flags, "-bundle", bundle, "delete"],
        answers: true,
      },
      {
        name: "the address with a newline",
        files: { answer, address: `${gone}\n` },
        args: [...flags, "-bundle", bundle, "delete"],
        answers: true,
      },
      {
        name: "--bundle= and -debug",
        files: { answer, address: gone },
        args: [...flags, `--bundle=${bundle}`, "-debug", "delete"],
        answers: true,
      },
      {
        name: "the operations socket left",
        files: { answer, address: gone, beside: OPS_SOCKET_SUFFIX },
        args: [...flags, "-bundle", bundle, "delete"],
        answers: false,
      },
      {
        name: "a half-done upgrade's state left",
        files: { answer, address: gone, beside: UPGRADE_STATE_SUFFIX },
        args: [...flags, "-bundle", bundle, "delete"],
        answers: false,
      },
      {
        name: "a half-done upgrade's new socket left",
        files: { answer, address: gone, beside: ".next" },
        args: [...flags, "-bundle", bundle, "delete"],
        answers: false,
      },
      {
        name: "the socket still there",
        files: { answer, address: gone, socket: true },
        args: [...flags, "-bundle", bundle, "delete"],
        answers: false,
      },
      {
        name: "an empty address file",
        files: { answer, address: "" },
        args: [...flags, "-bundle", bundle, "delete"],
        answers: false,
      },
      {
        name: "an empty answer",
        files: { answer: new Uint8Array(), address: gone },
        args: [...flags, "-bundle", bundle, "delete"],
        answers: false,
      },
      {
        name: "start",
        files: { answer, address: gone },
        args: [...flags, "-bundle", bundle, "start"],
        answers: false,
      },
      { name: "-v", files: { answer, address: gone }, args: ["-v"], answers: false },
    ];
    for (const c of cases) {
      await Deno.remove(bundle, { recursive: true }).catch(() => {});
      await Deno.remove(sock).catch(() => {});
      for (const b of [OPS_SOCKET_SUFFIX, UPGRADE_STATE_SUFFIX, ".next"]) {
        await Deno.remove(`${sock}${b}`).catch(() => {});
      }
      await Deno.mkdir(bundle);
      if (c.files.answer) await Deno.writeFile(`${bundle}/${RUNTIME_DELETED_FILE}`, c.files.answer);
      if (c.files.address !== undefined) {
        await Deno.writeTextFile(`${bundle}/${ADDRESS_FILE}`, c.files.address);
      }
      if (c.files.socket) await Deno.writeTextFile(sock, "");
      if (c.files.beside) await Deno.writeTextFile(`${sock}${c.files.beside}`, "");
      const out = await new Deno.Command("sh", { args: [script, ...c.args], stdout: "piped" })
        .output();
      assert.equal(out.code, 0, c.name);
      const fell = dec.decode(out.stdout).trim() === "FELL-THROUGH";
      assert.equal(
        !fell,
        c.answers,
        `${c.name}: the launcher ${fell ? "fell through" : "answered"}`,
      );
      if (fell) continue;
      assert.deepEqual(out.stdout, answer, c.name);
      const calls: string[] = [];
      const action = await runDelete(recordingShim(calls), parseShimFlags(c.args), quiet);
      assert.deepEqual(action, out.stdout, `${c.name}: the delete action prints the same`);
      assert.deepEqual(calls, [], `${c.name}: the delete action runs no runtime command`);
    }
    // Where the launcher falls through, the delete action removes what it found beside the
    // socket, so the next delete of the group is answered by the shell.
    for (const b of [OPS_SOCKET_SUFFIX, UPGRADE_STATE_SUFFIX, ".next"]) {
      await Deno.writeTextFile(`${sock}${b}`, "");
      const f = [...flags, "-bundle", bundle, "delete"];
      await runDelete(recordingShim([]), parseShimFlags(f), quiet);
      assert.equal(await Deno.stat(`${sock}${b}`).then(() => true, () => false), false, b);
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

/** A Shim whose runtime records the commands the delete action would run. */
function recordingShim(calls: string[]): Shim<object> {
  return {
    options: { defaults: () => ({}) },
    runtime: () => ({
      delete: (id: string) => {
        calls.push(`delete ${id}`);
        return Promise.resolve();
      },
    }),
  } as unknown as Shim<object>;
}
const quiet = new Logger({ sink: () => {} });

Deno.test("a bundle launcher states its code identity: the hash of the rest of its text", () => {
  const spec = { deno: "/usr/bin/deno", denoDir: "/c", entry: "/b/0123/main.js", v8Flags: [] };
  const text = bundleLauncherScript(spec);
  const line = /^SKIFF_SHIM_CODE=([0-9a-f]{64})$/m.exec(text);
  assert.ok(line, text);
  assert.match(text, /^export SKIFF_SHIM_CODE$/m);
  const enc = new TextEncoder();
  // What start reads from its environment is what a spare reads from the launcher's bytes.
  assert.equal(launcherCodeId(enc.encode(text)), line[1]);
  assert.equal(line[1], sha256Hex(enc.encode(text.replace(`${line[0]}\n`, ""))));
  // Other code (another bundle), other flags, other spare settings: another identity.
  for (
    const other of [
      { ...spec, entry: "/b/4567/main.js" },
      { ...spec, v8Flags: ["--lite-mode"] },
      { ...spec, spare: { idleSeconds: 60 } },
    ]
  ) {
    assert.notEqual(launcherCodeId(enc.encode(bundleLauncherScript(other))), line[1]);
  }
  // A launcher that states none (an older install) is known by the hash of its whole text.
  const old = enc.encode("#!/bin/sh\nexec deno run main.js\n");
  assert.equal(launcherCodeId(old), sha256Hex(old));
});

Deno.test("a bundle launcher exports exactly the launcher contract's variables (a door start adds them)", () => {
  for (const spare of [true, false, { idleSeconds: 30 }] as const) {
    const text = bundleLauncherScript({
      deno: "/usr/bin/deno",
      denoDir: "/c",
      entry: "/b/main.js",
      v8Flags: [],
      spare,
    });
    const exported = text.split("\n").filter((l) => l.startsWith("export "))
      .flatMap((l) => l.slice("export ".length).split(" "));
    const allowed = new Set([...LAUNCHER_SETS, ...LAUNCHER_DEFAULTS]);
    for (const name of exported) assert.ok(allowed.has(name), `${name} is in the contract`);
    for (const name of LAUNCHER_SETS) assert.ok(exported.includes(name), `${name} exported`);
    // The door only where a spare may wait.
    assert.equal(text.includes(".door"), spare !== false, JSON.stringify(spare));
  }
});
