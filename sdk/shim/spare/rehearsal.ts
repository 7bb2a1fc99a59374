/**
 * A warm spare's rehearsal. A shim server serves one container, so every call it answers runs
 * code for the first time: V8 (interpreting, in lite mode) compiles each function on its first
 * call, and a spare adopted cold answered the first container's Create ~12 ms slower than a
 * second container's in the same server. Before it waits, the spare therefore serves one
 * pretend container through the server's own code: ttrpc framing and dispatch over a unix
 * socket, the Task API's messages, the services as the server registers them (`registerServices`,
 * so nothing here mirrors the server), the reaper's exit path, stdio
 * set-up, the OOM watch and event forwarding. Only the runtime is a stand-in (a `sleep` the spare
 * reaps, as runc's init is reaped), so nothing outside the spare's own directory is touched.
 *
 * @module
 */

import { EVENTS_SERVICE, shimCodec, TASK_SERVICE } from "../../../proto/shim_wire.ts";
import type { WireInit } from "../../../proto/wire_table.ts";
import { TtrpcServer } from "../../ttrpc/server.ts";
import { TtrpcWireClient } from "../../ttrpc/wire_client.ts";
import { registerServices, wireMethods } from "../server/services.ts";
import { parseShimFlags } from "../contract/flags.ts";
import type { Reaper } from "../../linux/reaper.ts";
import { EventPublisher } from "../server/events.ts";
import { Logger } from "../logger.ts";
import { linuxPlatform } from "../server/linux_platform.ts";
import type { ContainerRuntime } from "../runtime.ts";
import type { ShimPlatform } from "../server/platform.ts";
import type { Shim } from "../shim.ts";

/** How long a rehearsal may take before the spare gives up on it and waits anyway. */
const REHEARSAL_MS = 5_000;

/**
 * Serves one pretend container (Create, Connect, Start, Wait, State, Delete, Shutdown, as
 * containerd calls them for `ctr run --rm`) in `dir`, then removes everything it made there.
 * Best effort: a failed rehearsal only means a less warm spare, so it never throws.
 *
 * @param shim the shim whose options the pretend Create resolves
 * @param reaper the spare's reaper, which the server will use
 * @param dir a private directory (the spare's)
 * @param signal stops the rehearsal (a start connected)
 * @param timeoutMs how long it may take before it counts as failed (default 5 s)
 * @returns whether the whole rehearsal succeeded
 * @example Usage
 * ```ts ignore
 * await rehearse(shim, reaper, spareDirectory);
 * ```
 */
export async function rehearse<T extends object>(
  shim: Shim<T>,
  reaper: Reaper,
  dir: string,
  signal?: AbortSignal,
  timeoutMs: number = REHEARSAL_MS,
): Promise<boolean> {
  const work = `${dir}/rehearsal-${Deno.pid}`;
  const closers: (() => Promise<unknown> | unknown)[] = [];
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    removeStale(dir);
    await Deno.mkdir(`${work}/bundle`, { recursive: true, mode: 0o700 });
    const rehearsal = run(shim, reaper, work, closers, signal);
    const timeout = new Promise<false>((r) => timer = setTimeout(() => r(false), timeoutMs));
    return await Promise.race([rehearsal.then(() => true), timeout]);
  } catch {
    return false;
  } finally {
    clearTimeout(timer);
    for (const close of closers.reverse()) {
      try {
        await close();
      } catch { /* best effort */ }
    }
    await Deno.remove(work, { recursive: true }).catch(() => {});
  }
}

/** Rehearsal directories of spares that died during theirs (a SIGKILL skips the clean-up). */
function removeStale(dir: string): void {
  for (const entry of Deno.readDirSync(dir)) {
    const pid = /^rehearsal-(\d+)$/.exec(entry.name)?.[1];
    if (pid === undefined || Number(pid) === Deno.pid) continue;
    try {
      Deno.statSync(`/proc/${pid}`);
      continue; // another spare's, rehearsing now
    } catch { /* its spare is gone */ }
    try {
      Deno.removeSync(`${dir}/${entry.name}`, { recursive: true });
    } catch { /* removed meanwhile */ }
  }
}

async function run<T extends object>(
  shim: Shim<T>,
  reaper: Reaper,
  work: string,
  closers: (() => Promise<unknown> | unknown)[],
  signal: AbortSignal | undefined,
): Promise<void> {
  // Between steps: a start that connected needs the event loop more than the rehearsal does.
  const step = async (f: () => Promise<unknown>) => {
    signal?.throwIfAborted();
    await f();
  };
  const platform = linuxPlatform(reaper);
  const logger = new Logger(); // no sink: lines go nowhere

  // containerd's side of event forwarding.
  const events = new TtrpcServer();
  events.registerWire(
    EVENTS_SERVICE.typeName,
    wireMethods(EVENTS_SERVICE, { forward: () => ({}) }),
  );
  await events.listen(`${work}/events.sock`);
  closers.push(() => events.close({ timeoutMs: 500 }));
  const publisher = new EventPublisher({ address: `${work}/events.sock`, namespace: "rehearsal" });
  closers.push(() => publisher.close(500));

  let initPid = 0;
  const runtime = stageRuntime(platform, () => initPid, (pid) => initPid = pid);
  // The server's own registration (services.ts), so what the spare warms is what will serve.
  const server = new TtrpcServer({ requireSameUser: true });
  const socket = `${work}/task.sock`;
  const { tasks } = registerServices<T>(server, {
    shim: Object.assign(Object.create(shim) as Shim<T>, { runtime: () => runtime }),
    flags: { ...parseShimFlags([]), namespace: "rehearsal", id: "rehearsal", bundle: work },
    logger,
    bundle: work,
    endpoint: { address: `unix://${socket}`, version: shim.taskApiVersion, protocol: "ttrpc" },
    socket,
    platform,
    events: publisher,
    shutdown: () => {},
  });
  closers.push(() => tasks.close());
  await server.listen(socket);
  closers.push(() => server.close({ timeoutMs: 500 }));
  closers.push(() => {
    if (initPid > 0) platform.kill(initPid, 9);
  });

  const client = new TtrpcWireClient({ path: `${work}/task.sock` });
  closers.push(() => client.close());
  type Methods = typeof TASK_SERVICE.methods;
  const call = <M extends keyof Methods>(m: M, req: WireInit<unknown>) => {
    const { name, input, output } = TASK_SERVICE.methods[m];
    return client.call(TASK_SERVICE.typeName, name, shimCodec(input), shimCodec(output), req);
  };
  const id = "rehearsal";
  const bundle = `${work}/bundle`;
  await step(() =>
    call("create", { id, bundle, stdin: "", stdout: "", stderr: "", terminal: false })
  );
  await step(() => call("connect", { id }));
  await step(() => call("start", { id }));
  await step(() => call("wait", { id }));
  await step(() => call("state", { id }));
  await step(() => call("delete", { id }));
  await step(() => call("shutdown", { id }));
  await step(() => publisher.flush(1_000));
}

/**
 * A stand-in runtime: `create` leaves a `sleep` running that the spare reaps (reparented to it,
 * as runc's init is to a shim), `start` lets it go (SIGKILL), `delete` has nothing left to do.
 */
function stageRuntime(
  platform: Pick<ShimPlatform, "spawn" | "kill">,
  pid: () => number,
  setPid: (pid: number) => void,
): ContainerRuntime {
  const unsupported = () => Promise.reject(new Error("not part of the rehearsal"));
  return {
    async create(_id, opts) {
      const pidFile = `${opts.bundle}/init.pid`;
      const sh = platform.spawn(
        new Deno.Command("/bin/sh", {
          args: ["-c", 'sleep 30 </dev/null >/dev/null 2>&1 & echo $! > "$1"', "sh", pidFile],
          stdin: "null",
          stdout: "null",
          stderr: "null",
        }),
      );
      if (!(await sh.status).success) throw new Error("the rehearsal's init did not start");
      setPid(Number(Deno.readTextFileSync(pidFile).trim()));
      return { pid: pid() };
    },
    start() {
      platform.kill(pid(), 9);
      return Promise.resolve();
    },
    kill(_id, signal) {
      try {
        platform.kill(pid(), signal);
      } catch { /* exited: as runc, nothing left to signal after the init's exit */ }
      return Promise.resolve();
    },
    delete: () => Promise.resolve(),
    exec: unsupported,
    ps: () => Promise.resolve([pid()]),
    pause: unsupported,
    resume: unsupported,
    update: unsupported,
    checkpoint: unsupported,
  };
}
