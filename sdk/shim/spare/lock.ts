/**
 * The spare's lock: one spare waits (or loads) per installed code and containerd. It is held
 * from before the spare loads until it is adopted, and holds the spare's pid for operators.
 *
 * @module
 */

import { launcherCodeId } from "./config.ts";

/** A lock taken, with the launcher text the spare was keyed on. */
export interface SpareLock {
  /** The lock file, locked; closing it lets the next spare load. */
  file: Deno.FsFile;
  /** The launcher's bytes when the lock was taken (the lifetime watch compares them). */
  launcherText: Uint8Array;
  /** The launcher's code identity, from those bytes. */
  codeId: string;
}

/**
 * Takes the lock beside the spare socket `socket`, or returns undefined when another spare
 * holds it or the launcher no longer hashes to the socket's name (it was reinstalled).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { takeSpareLock } from "./lock.ts";
 * // A bundle launcher states its code identity in a SKIFF_SHIM_CODE= line.
 * const dir = Deno.makeTempDirSync();
 * const launcher = `${dir}/containerd-shim-skiff-runc-v2`;
 * Deno.writeTextFileSync(launcher, "#!/bin/sh\nSKIFF_SHIM_CODE=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n");
 * const socket = `${dir}/spare-aaaaaaaaaaaaaaaa.sock`; // named after the launcher's code
 * const lock = await takeSpareLock(socket, launcher);
 * strictEqual(lock?.codeId, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
 * strictEqual(Deno.readTextFileSync(`${dir}/spare-aaaaaaaaaaaaaaaa.lock`), `${Deno.pid}\n`);
 * // A socket named after other code: the launcher was reinstalled, this spare is stale.
 * strictEqual(await takeSpareLock(`${dir}/spare-bbbbbbbbbbbbbbbb.sock`, launcher), undefined);
 * lock!.file.close();
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export async function takeSpareLock(
  socket: string,
  launcher: string,
): Promise<SpareLock | undefined> {
  const path = socket.replace(/\.sock$/, ".lock");
  const file = await Deno.open(path, { read: true, write: true, create: true, mode: 0o600 });
  // Another spare waits or loads, unless a `start` is only peeking at the lock (a moment).
  let locked = false;
  for (let i = 0; i < 5 && !(locked = await file.tryLock(true)); i++) {
    await new Promise((r) => setTimeout(r, 5));
  }
  if (!locked) {
    file.close();
    return undefined;
  }
  // Our pid, for operators (which process is the waiting spare) and the launcher's shell.
  nameHolder(file);
  const launcherText = Deno.readFileSync(launcher);
  const codeId = launcherCodeId(launcherText); // from the bytes the watch compares
  if (!socket.endsWith(`/spare-${codeId.slice(0, 16)}.sock`)) {
    file.close();
    return undefined; // reinstalled
  }
  return { file, launcherText, codeId };
}

/**
 * Writes this process's pid into a lock it has just taken. The launcher's shell reads it to see a
 * live holder without running flock(1) (`held` in sdk/install/install.ts); operators, to see which
 * process holds it. Without it, the shell asks flock.
 *
 * @param lock the lock file, locked by this process
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { nameHolder } from "./lock.ts";
 * const path = Deno.makeTempFileSync();
 * Deno.writeTextFileSync(path, "99999999\nleft over\n");
 * const f = Deno.openSync(path, { read: true, write: true });
 * nameHolder(f);
 * strictEqual(Deno.readTextFileSync(path), `${Deno.pid}\n`);
 * f.close();
 * Deno.removeSync(path);
 * ```
 */
export function nameHolder(lock: Deno.FsFile): void {
  lock.truncateSync(0);
  lock.writeSync(new TextEncoder().encode(`${Deno.pid}\n`));
}
