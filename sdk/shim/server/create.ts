/**
 * Creating a container: its rootfs mounted, the init's stdio opened, the runtime's create (or,
 * from a checkpoint, nothing until Start restores it), its OOM watch, then listed and announced
 * (`/tasks/create`); each step undone when a later one fails.
 *
 * @module
 */

import type { ContainerRuntime } from "../runtime.ts";
import { sharesPidNamespace } from "./bundle_spec.ts";
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
  const { exits } = how.deps;
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
    rootfsMounted: false,
    deps: how.deps,
  });
  const undo: (() => Promise<void>)[] = [];
  // Open before the runtime starts the init: it may exit before its pid is known.
  const window = exits.openWindow();
  try {
    await prepare(c, r, undo, how.deps);
    // The OOM watch comes first: until the container is listed, the init's exit waits in the
    // window, so /tasks/create is always published before /tasks/exit.
    if (!c.restoreFrom) await c.watchOom();
    c.sharesPidNamespace = sharesPidNamespace(c.bundle);
  } catch (e) {
    exits.closeWindow(window);
    for (const u of undo.reverse()) await u().catch(() => {});
    throw e;
  }
  try {
    how.list(c);
    how.deps.events.publish("/tasks/create", "containerd.events.TaskCreate", {
      containerId: r.id,
      bundle: r.bundle,
      rootfs: r.rootfs,
      io: { stdin: r.stdin, stdout: r.stdout, stderr: r.stderr, terminal: r.terminal },
      checkpoint: r.checkpoint,
      pid: init.pid,
    });
    // The init may already have died (reaped before its pid was known): only an exit from
    // inside the window can be its own.
    if (!c.restoreFrom) exits.takeEarlyExit(c, init, window);
  } finally {
    exits.closeWindow(window);
  }
  how.deps.logger.info("created", { pid: init.pid });
  return c;
}

/** Mounts, stdio and the runtime's create; pushes how to undo each step onto `undo`. */
async function prepare(
  c: Container,
  r: ContainerCreateRequest,
  undo: (() => Promise<void>)[],
  deps: ContainerDeps,
): Promise<void> {
  const { platform, exits } = deps;
  const rootfs = `${c.bundle}/rootfs`;
  if (r.rootfs.length > 0) {
    await Deno.mkdir(rootfs, { recursive: true, mode: 0o711 });
    await platform.mount(r.rootfs, rootfs);
    c.rootfsMounted = true;
    undo.push(() => platform.unmount(rootfs));
  }
  const io = await platform.openIo(c.init.stdio, {
    containerId: c.id,
    namespace: c.namespace,
  });
  c.init.io = io.handle;
  undo.push(() => io.handle.close());
  // From a checkpoint, Start restores the init (as the Go shim does): nothing runs yet.
  if (r.checkpoint) {
    c.restoreFrom = { imagePath: r.checkpoint, io };
    return;
  }
  const created = await c.runtime.create(c.id, { bundle: c.bundle, io: io.io });
  undo.push(() => c.runtime.delete(c.id, { force: true }).catch(() => {}));
  await io.ready();
  exits.started(c.init, created);
  c.keepInitCgroup();
}
