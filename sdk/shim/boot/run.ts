/**
 * `runShim`: the one-line entry point of a shim binary. It parses containerd's flags and runs
 * `start`, `delete`, `-v`, `-info` or the server. `start`, `delete` and `-info` load only what
 * they need; the server's modules are imported when it runs.
 *
 * @module
 */

import { SKIFF_VERSION } from "../version.ts";
import { parseShimFlags, type ShimFlags } from "../contract/flags.ts";
import { LAUNCHER_ENV } from "../contract/launcher_env.ts";
import type { Shim } from "../shim.ts";
import type { ServerExtension } from "../server/extension.ts";

async function writeAll(w: { write(p: Uint8Array): Promise<number> }, data: Uint8Array) {
  for (let off = 0; off < data.length;) off += await w.write(data.subarray(off));
}

/**
 * All of stdin. A plain read loop: `new Response(Deno.stdin.readable)` would make Deno load its
 * fetch and streams code first, 5 to 12 ms of `start`'s and `-info`'s time here.
 */
async function readStdin(): Promise<Uint8Array> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    const buf = new Uint8Array(16 * 1024);
    for (let n; (n = await Deno.stdin.read(buf)) !== null;) {
      chunks.push(buf.slice(0, n));
      size += n;
    }
  } catch { /* no stdin: nothing was sent */ }
  const all = new Uint8Array(size);
  let off = 0;
  for (const c of chunks) all.set(c, (off += c.length) - c.length);
  return all;
}

/** Loads the server's extensions; called only when the server or a spare runs. */
export type ExtensionLoader = () => Promise<ServerExtension[]>;

/**
 * Runs a shim binary with the given server extensions; it exits the process. `runShim` (mod.ts)
 * is this with skiff's own extensions (the warm spare, the operations endpoint): they sit above
 * the boot layer, so the entry point that knows them passes them in.
 *
 * @param shim the runtime definition
 * @param argv the arguments
 * @param serverExtensions loads the extensions the server composes
 */
export async function runShimWith<T extends object>(
  shim: Shim<T>,
  argv: readonly string[],
  serverExtensions: ExtensionLoader,
): Promise<void> {
  if (argv[0] === "upgrade") {
    // The operator's command (./upgrade.ts), not one of containerd's actions.
    const launcher = Deno.env.get(LAUNCHER_ENV.launcher);
    if (!launcher) {
      console.error(`${shim.runtimeName} upgrade: run it as the installed shim binary`);
      Deno.exit(2);
    }
    const { runUpgrade } = await import("./upgrade.ts");
    Deno.exit(await runUpgrade(argv.slice(1), launcher));
  }
  let flags: ShimFlags;
  try {
    flags = parseShimFlags(argv);
  } catch (e) {
    console.error(`${shim.runtimeName}: ${(e as Error).message}`);
    Deno.exit(2);
  }
  const enc = new TextEncoder();
  if (flags.version) {
    console.log(
      `${shim.runtimeName} (skiff ${SKIFF_VERSION})\n  Version: ${
        shim.version || "unset (the shim sets Shim.version)"
      }`,
    );
    Deno.exit(0);
  }
  try {
    if (flags.info) {
      const { runInfo } = await import("./info.ts");
      await writeAll(Deno.stdout, await runInfo(shim, await readStdin()));
      Deno.exit(0);
    }
    if (flags.action === "start") {
      const { runStart } = await import("./start.ts");
      const answer = await runStart(shim, flags, await readStdin());
      await writeAll(Deno.stdout, typeof answer === "string" ? enc.encode(answer) : answer);
      Deno.exit(0);
    }
    if (flags.action === "delete") {
      const { runDelete } = await import("./delete.ts");
      await writeAll(Deno.stdout, await runDelete(shim, flags));
      Deno.exit(0);
    }
    if (flags.upgradeCheck) {
      // A live upgrade asks the installed code whether it loads and takes the old code's state.
      const [{ checkUpgradeFormat }] = await Promise.all([
        import("../contract/upgrade.ts"),
        import("../server/serve.ts"),
        serverExtensions(),
      ]);
      checkUpgradeFormat(flags.upgradeCheck);
      console.log(
        JSON.stringify({ version: SKIFF_VERSION, code: Deno.env.get(LAUNCHER_ENV.code) }),
      );
      Deno.exit(0);
    }
    if (flags.spare) {
      const [{ runSpare }, { runStart }] = await Promise.all([
        import("../spare/spare.ts"),
        import("./start.ts"),
      ]);
      // The launcher's door (sdk/shim/spare/door.ts): `start` answered by the spare itself.
      await runSpare(
        shim,
        flags,
        serverExtensions,
        (f, stdin, ctx) => runStart(shim, f, stdin, ctx),
      );
      Deno.exit(0);
    }
    const [{ serveShim }, { notifyReady }, extensions] = await Promise.all([
      import("../server/serve.ts"),
      import("./ready.ts"),
      serverExtensions(),
    ]);
    // Shared servers (SKIFF_SHARED_PODS): with room, this server takes the next pods too.
    const sharing = Deno.env.get(LAUNCHER_ENV.sharedPods)
      ? await import("../spare/shared.ts").then(async ({ sharingFromEnv }) => {
        const { runStart } = await import("./start.ts");
        return sharingFromEnv(flags, (f, stdin, ctx) => runStart(shim, f, stdin, ctx));
      })
      : undefined;
    // A cold server: the `start` that spawned it waits to hear that it listens.
    await serveShim(shim, flags, {
      extensions,
      onListening: notifyReady,
      ...(sharing ? { sharing } : {}),
    });
    Deno.exit(0);
  } catch (e) {
    // containerd shows start's combined output in its error, so say what failed.
    const action = flags.info
      ? "-info"
      : flags.spare
      ? "-spare"
      : flags.upgradeCheck
      ? "-upgrade-check"
      : flags.action;
    console.error(`${shim.runtimeName} ${action}: ${(e as Error).message}`);
    Deno.exit(1);
  }
}
