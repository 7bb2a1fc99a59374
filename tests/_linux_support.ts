/**
 * Helpers shared by the tests/integration/linux/*_test.ts files: a busybox OCI bundle for runc, a hang
 * guard. It declares no tests of its own.
 */

/** Rejects with a message naming `what` if `p` is not settled within `ms` (a hang guard). */
export async function deadline<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const guard = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
  });
  try {
    return await Promise.race([p, guard]);
  } finally {
    clearTimeout(timer);
  }
}

/** A runc bundle whose rootfs holds only busybox, with its own runc state directory. */
export interface BusyboxBundle {
  /** Container id. */
  id: string;
  /** Bundle directory (config.json, rootfs/). */
  dir: string;
  /** Runs `runc --root <private root> ...args`. */
  runc(args: string[], options?: Deno.CommandOptions): Deno.Command;
  /** `runc delete --force`, then removes the bundle. */
  cleanup(): Promise<void>;
}

/** Options for {@linkcode busyboxBundle}. */
export interface BusyboxBundleOptions {
  /** process.args */
  args: string[];
  /** process.terminal; default false. */
  terminal?: boolean;
  /** linux.resources.memory limit (and swap) in bytes. */
  memoryLimit?: number;
}

const APPLETS = ["sh", "echo", "stty", "cat", "sleep", "true", "head", "yes", "tr", "dd"];

/** Builds a busybox bundle from `runc spec`. */
export async function busyboxBundle(options: BusyboxBundleOptions): Promise<BusyboxBundle> {
  const dir = await Deno.makeTempDir({ prefix: "skiff-bundle-" });
  const root = `${dir}/runc-state`;
  const id = `skiff-test-${crypto.randomUUID().slice(0, 8)}`;
  const runc = (args: string[], opts: Deno.CommandOptions = {}): Deno.Command =>
    new Deno.Command("runc", { ...opts, args: ["--root", root, ...args] });
  try {
    await Deno.mkdir(`${dir}/rootfs/bin`, { recursive: true });
    await Deno.copyFile("/bin/busybox", `${dir}/rootfs/bin/busybox`);
    for (const applet of APPLETS) await Deno.symlink("busybox", `${dir}/rootfs/bin/${applet}`);
    const spec = await new Deno.Command("runc", { args: ["spec", "--bundle", dir] }).output();
    if (!spec.success) throw new Error(`runc spec: ${new TextDecoder().decode(spec.stderr)}`);
    const config = JSON.parse(await Deno.readTextFile(`${dir}/config.json`));
    config.process.args = options.args;
    config.process.terminal = options.terminal ?? false;
    config.root = { path: "rootfs", readonly: false };
    if (options.memoryLimit !== undefined) {
      config.linux.resources.memory = { limit: options.memoryLimit, swap: options.memoryLimit };
    }
    await Deno.writeTextFile(`${dir}/config.json`, JSON.stringify(config, null, 2));
  } catch (e) {
    await Deno.remove(dir, { recursive: true });
    throw e;
  }
  return {
    id,
    dir,
    runc,
    async cleanup() {
      await runc(["delete", "--force", id], { stdout: "null", stderr: "null" }).output();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

/** Runs a command to completion and throws with its stderr when it fails. */
export async function run(cmd: Deno.Command | Deno.ChildProcess, what: string): Promise<string> {
  const out = await cmd.output();
  const text = (get: () => Uint8Array): string => {
    try {
      return new TextDecoder().decode(get());
    } catch {
      return ""; // not piped
    }
  };
  if (!out.success) throw new Error(`${what} exited with ${out.code}: ${text(() => out.stderr)}`);
  return text(() => out.stdout);
}
