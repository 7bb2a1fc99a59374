/**
 * Creating a container: its rootfs mounted, the init's stdio opened, the runtime's create (or,
 * from a checkpoint, nothing until Start restores it), its OOM watch, then listed and announced
 * (`/tasks/create`); each step undone when a later one fails.
 *
 * @module
 */

import type { ContainerRuntime, RuntimeProcess } from "../runtime.ts";
import { Container, type ContainerDeps } from "./container.ts";
import type { RootfsMount } from "./platform.ts";
import { ShimProcess } from "./process.ts";
import type { ProcessStdioPaths } from "./process.ts";

/** A Create request, as far as creating the container reads it. */
export interface ContainerCreateRequest extends ProcessStdioPaths {
  /** Container id (validated by the caller). */
  id: string;
  /** Bundle directory. */
  bundle: string;
  /** Rootfs mounts (none: the bundle's rootfs is used as is). */
  rootfs: RootfsMount[];
  /** Checkpoint image to restore from at Start ("" for none). */
  checkpoint: string;
}

/**
 * Creates a container: its rootfs mounted, the init's stdio opened, the runtime's create
 * (nothing yet for a checkpoint: Start restores it), then its OOM watch; `list` makes it
 * known to the service, and `/tasks/create` is published. Everything done is undone when a
 * step fails.
 *
 * @param r the request
 * @param how the namespace, the runtime, the options, the services and how to list it
 * @returns the created container
 */
export async function createContainer<T>(
  r: ContainerCreateRequest,
  how: {
    namespace: string;
    runtime: ContainerRuntime;
    options: T;
    deps: ContainerDeps;
    list: (c: Container<T>) => void;
  },
): Promise<Container<T>> {
  const init = new ShimProcess(r.id, "", {
    stdin: r.stdin,
    stdout: r.stdout,
    stderr: r.stderr,
    terminal: r.terminal,
  });
  const c = new Container<T>({
    id: r.id,
    namespace: how.namespace,
    bundle: r.bundle,
    runtime: how.runtime,
    process: init,
    options: how.options,
    deps: how.deps,
  });
  const undo: (() => Promise<void>)[] = [];
  try {
    await how.deps.exits.track(c, init, {
      creates: true,
      run: () => prepare(c, r, undo, how.deps),
      // Until the container is listed, the init's exit waits in the router's window, so the
      // OOM watch comes first and /tasks/create always goes out before /tasks/exit.
      prepare: async () => {
        void c.sharesPidNamespace();
        if (c.restoring) return;
        await c.prepareInit();
      },
      announce: () => {
        how.list(c);
        how.deps.events.publish("/tasks/create", "containerd.events.TaskCreate", {
          containerId: r.id,
          bundle: r.bundle,
          rootfs: r.rootfs,
          io: { stdin: r.stdin, stdout: r.stdout, stderr: r.stderr, terminal: r.terminal },
          checkpoint: r.checkpoint,
          pid: init.pid,
        });
      },
    });
  } catch (e) {
    for (const u of undo.reverse()) await u().catch(() => {});
    throw e;
  }
  how.deps.logger.info("created", { pid: init.pid });
  return c;
}

/**
 * Mounts, stdio and the runtime's create; pushes how to undo each step onto `undo`. Resolves
 * with what the runtime created, or nothing for a checkpoint (Start restores it).
 */
async function prepare(
  c: Container,
  r: ContainerCreateRequest,
  undo: (() => Promise<void>)[],
  deps: ContainerDeps,
): Promise<RuntimeProcess | undefined> {
  const { platform } = deps;
  const rootfs = `${c.bundle}/rootfs`;
  if (r.rootfs.length > 0) {
    await Deno.mkdir(rootfs, { recursive: true, mode: 0o711 });
    await platform.mount(r.rootfs, rootfs);
    c.hold({ rootfsMounted: true });
    undo.push(() => platform.unmount(rootfs));
  }
  const io = await platform.openIo(c.init.stdio, {
    containerId: c.id,
    namespace: c.namespace,
  });
  c.init.attachIo(io.handle);
  undo.push(() => io.handle.close());
  // From a checkpoint, Start restores the init (as the Go shim does): nothing runs yet.
  if (r.checkpoint) {
    c.hold({ restoreFrom: { imagePath: r.checkpoint, io } });
    return undefined;
  }
  const created = await c.runtime.create(c.id, { bundle: c.bundle, io: io.io });
  undo.push(() => c.runtime.delete(c.id, { force: true }).catch(() => {}));
  await io.ready();
  return created;
}
