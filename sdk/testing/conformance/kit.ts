/**
 * What a scenario's check gets: the private containerd, a client bound to the scenario's own
 * namespace, and the few moves containerd's clients make (containers on a shared busybox
 * rootfs, FIFOs read to EOF, execs, events), each bounded so a hang fails instead of wedging.
 * Everything a scenario creates is removed by {@linkcode ScenarioContext.cleanup}.
 *
 * @module
 */

import type { Any } from "@bufbuild/protobuf/wkt";
import type { PrivateContainerd } from "../private_containerd.ts";
import { type ContainerdClient, containerdClient } from "../containerd_client.ts";
import { createOciSpec, type OciSpecOptions } from "../bundle.ts";
import { createFifoSet, type FifoSet, readFifo } from "../fifo_set.ts";
import { EventRecorder } from "./events.ts";

const SPEC_TYPE = "types.containerd.io/opencontainers/runtime-spec/1/Spec";
const PROCESS_TYPE = "types.containerd.io/opencontainers/runtime-spec/1/Process";
const enc = new TextEncoder();

/** Bound on any single step; only there so that a hang fails the scenario. */
export const STEP_MS = 60_000;

/** Stdio paths as containerd's client hands them to a task (empty: none). */
export interface Stdio extends FifoSet {
  /** A terminal (stdout carries both streams then). */
  terminal?: boolean;
}

/**
 * A neighbour: a long-running container the runner starts in a scenario's namespace before the
 * check, when a shim server may serve several pods (skiff's `SKIFF_SHARED_PODS`), so that the
 * scenario's pods join its server and run beside another pod
 * (`ConformanceOptions.neighbour`).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { Neighbour } from "@skiff/shim/testing";
 * const n: Neighbour = { id: "conf-pids-neighbour", init: 4242, server: 4200 };
 * strictEqual(n.server !== n.init, true);
 * ```
 */
export interface Neighbour {
  /** Its container id (in the scenario's namespace). */
  id: string;
  /** Its init's pid. */
  init: number;
  /** The shim server process serving it (its bundle's `shim.pid`). */
  server: number;
}

/** Everything a {@linkcode ScenarioContext} is built from. */
export interface ScenarioContextInit {
  /** The private containerd of this version. */
  containerd: PrivateContainerd;
  /** Runtime under test, e.g. `io.containerd.runc.v2`. */
  runtime: string;
  /** Directory holding the shim binary. */
  shimDir: string;
  /** The scenario's own namespace. */
  namespace: string;
  /** Absolute path of a busybox rootfs, shared read-only by every container. */
  rootfs: string;
  /** Scratch dir for FIFOs and files, removed afterwards. */
  tmp: string;
  /** Task options sent with every task create (e.g. runc options naming a private root). */
  taskOptions?: Any;
  /** Extra environment of containerd and so of the shims (for a second containerd too). */
  env?: Record<string, string>;
  /** Bound on each step. Default {@linkcode STEP_MS}. */
  stepMs?: number;
  /** The neighbour, when it runs already. */
  neighbour?: Neighbour;
}

/**
 * The toolbox of one scenario run.
 *
 * @example Usage
 * ```ts ignore
 * const id = await ctx.run(["sh", "-c", "exit 3"]);
 * console.log((await ctx.within(ctx.client.tasks.wait({ containerId: id }), "wait")).exitStatus);
 * ```
 */
export class ScenarioContext {
  /** The private containerd. */
  readonly containerd: PrivateContainerd;
  /** gRPC client bound to {@linkcode ScenarioContext.namespace}. */
  readonly client: ContainerdClient;
  /** Runtime under test. */
  readonly runtime: string;
  /** Directory holding the shim binary. */
  readonly shimDir: string;
  /** This scenario's namespace. */
  readonly namespace: string;
  /** Scratch dir. */
  readonly tmp: string;
  /** Task options sent with each task create. */
  readonly taskOptions: Any | undefined;
  /** Extra environment the shims run with. */
  readonly env: Record<string, string>;
  /** Bound on each step. */
  readonly stepMs: number;
  /**
   * The neighbour the scenario's pods share a server with, when the runner keeps one
   * (`ConformanceOptions.neighbour`); set by the runner before the check.
   */
  neighbour: Neighbour | undefined;
  /**
   * The shim server process of each task this context started (its bundle's `shim.pid` right
   * after create), by container id; a task without one (routed to a sandbox) is not listed. A
   * check may add others (the `sandbox-api` scenario adds its sandbox's).
   */
  readonly servers: Map<string, number> = new Map();
  readonly #rootfs: string;
  readonly #cleanups: (() => Promise<unknown>)[] = [];
  #n = 0;

  /**
   * Binds a context to one scenario run (the runner makes one per scenario and version).
   *
   * @param init the run's containerd, runtime and paths
   */
  constructor(init: ScenarioContextInit) {
    this.containerd = init.containerd;
    this.runtime = init.runtime;
    this.shimDir = init.shimDir;
    this.namespace = init.namespace;
    this.tmp = init.tmp;
    this.taskOptions = init.taskOptions;
    this.env = init.env ?? {};
    this.stepMs = init.stepMs ?? STEP_MS;
    this.#rootfs = init.rootfs;
    this.neighbour = init.neighbour;
    this.client = containerdClient(init.containerd.address, init.namespace);
  }

  /** The shim binary containerd resolves for the runtime (`containerd-shim-<name>-<version>`). */
  get shimBinary(): string {
    return `${this.shimDir}/${shimBinaryName(this.runtime)}`;
  }

  /** The cgroup path a container of this context gets (removed with the containerd). */
  cgroupOf(id: string): string {
    return `/${this.containerd.cgroupParent}/${this.namespace}/${id}`;
  }

  /**
   * Creates a container record (no task yet) on the shared rootfs.
   *
   * @param spec the init process and resources (the rootfs and cgroup are filled in)
   * @param o `id` (default a fresh one), `sandbox` id, `runtimeOptions` of the record
   * @returns the container id
   */
  async container(
    spec: OciSpecOptions,
    o: { id?: string; sandbox?: string } = {},
  ): Promise<string> {
    // Unique across scenarios: runtimes with host-global state (runsc) see every id.
    const id = o.id ?? `${this.namespace}-${++this.#n}`;
    const s = createOciSpec({ cgroupsPath: this.cgroupOf(id), ...spec });
    s.root = { path: this.#rootfs, readonly: true };
    await this.client.containers.create({
      container: {
        id,
        runtime: { name: this.runtime },
        spec: { typeUrl: SPEC_TYPE, value: enc.encode(JSON.stringify(s)) },
        labels: {},
        extensions: {},
        ...(o.sandbox ? { sandbox: o.sandbox } : {}),
      },
    });
    this.#cleanups.push(() => this.#remove(id));
    return id;
  }

  /**
   * Creates and starts a task for a container.
   *
   * @param id the container
   * @param io stdio paths (default none)
   * @param options task options (default {@linkcode ScenarioContext.taskOptions})
   * @returns the init's pid
   */
  async startTask(
    id: string,
    io?: Stdio,
    options: Any | undefined = this.taskOptions,
  ): Promise<number> {
    const t = await this.within(
      this.client.tasks.create({
        containerId: id,
        ...(io ?? {}),
        ...(options ? { options } : {}),
      }),
      `create task ${id}`,
    );
    const server = this.serverOf(id);
    if (server !== undefined) this.servers.set(id, server);
    await this.within(this.client.tasks.start({ containerId: id }), `start task ${id}`);
    return t.pid;
  }

  /** The bundle containerd keeps for a task of this namespace. */
  bundleOf(id: string): string {
    return `${this.containerd.state}/io.containerd.runtime.v2.task/${this.namespace}/${id}`;
  }

  /**
   * The shim server process serving a task, as its bundle's `shim.pid` names it (written by the
   * shim's `start`; a shim serving a group writes it for the group's first task only).
   *
   * @param id the container
   * @returns the pid, or undefined when the bundle names none
   */
  serverOf(id: string): number | undefined {
    try {
      const pid = Number(Deno.readTextFileSync(`${this.bundleOf(id)}/shim.pid`).trim());
      return pid > 0 ? pid : undefined;
    } catch {
      return undefined;
    }
  }

  /**
   * A container with a running task.
   *
   * @param args the init's argv
   * @param spec more spec options
   * @param io stdio paths
   * @returns the container id
   */
  async run(args: string[], spec: Omit<OciSpecOptions, "args"> = {}, io?: Stdio): Promise<string> {
    const id = await this.container({ args, ...spec });
    await this.startTask(id, io);
    return id;
  }

  /**
   * Starts an exec process in a running container.
   *
   * @param id the container
   * @param execId the exec id
   * @param args its argv
   * @param io stdio paths (with `terminal` for a TTY)
   */
  async exec(id: string, execId: string, args: string[], io?: Stdio): Promise<void> {
    const terminal = io?.terminal ?? false;
    const process = {
      args,
      cwd: "/",
      env: ["PATH=/bin:/usr/bin:/sbin:/usr/sbin", ...(terminal ? ["TERM=xterm"] : [])],
      terminal,
      user: { uid: 0, gid: 0 },
    };
    await this.within(
      this.client.tasks.exec({
        containerId: id,
        execId,
        terminal,
        stdin: io?.stdin ?? "",
        stdout: io?.stdout ?? "",
        stderr: io?.stderr ?? "",
        spec: { typeUrl: PROCESS_TYPE, value: enc.encode(JSON.stringify(process)) },
      }),
      `exec ${execId}`,
    );
    await this.within(this.client.tasks.start({ containerId: id, execId }), `start ${execId}`);
  }

  /**
   * Waits for a process's exit through containerd (`Tasks.Wait`).
   *
   * @param id the container
   * @param execId an exec, or the init when absent
   * @returns the exit status
   */
  async wait(id: string, execId = ""): Promise<number> {
    const what = execId ? `exec ${execId}` : id;
    return (await this.within(this.client.tasks.wait({ containerId: id, execId }), `wait ${what}`))
      .exitStatus;
  }

  /**
   * A FIFO set like containerd's `cio.NewFIFOSetInDir`.
   *
   * @param name unique prefix
   * @param streams which FIFOs to make
   * @returns the paths, empty for streams not made
   */
  fifos(name: string, streams: ("stdin" | "stdout" | "stderr")[]): Stdio {
    return createFifoSet(this.tmp, name, streams);
  }

  /**
   * Opens a FIFO for reading and reads it to EOF (the open waits for the shim's writer).
   *
   * @param path the FIFO
   * @returns what was read, as text
   */
  readAll(path: string): Promise<string> {
    const p = readFifo(path, (file) => this.#cleanups.push(() => Promise.resolve(tryClose(file))));
    // A check that fails before awaiting it leaves it pending; the cleanup's close then rejects
    // it, which must not be an unhandled rejection that ends the whole run.
    p.catch(() => {});
    return p;
  }

  /**
   * Subscribes to this namespace's task events (closed at cleanup).
   *
   * @returns a live recorder
   */
  async events(): Promise<EventRecorder> {
    const r = await EventRecorder.open(this.client, this.namespace, this.stepMs);
    this.#cleanups.push(() => Promise.resolve(r.close()));
    return r;
  }

  /**
   * Bounds a promise (a hang fails the step with its name; never a timing assertion).
   *
   * @param p the operation
   * @param what named in the error
   * @param ms bound. Default {@linkcode ScenarioContext.stepMs}
   * @returns p's value
   */
  async within<T>(p: Promise<T>, what: string, ms: number = this.stepMs): Promise<T> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms / 1000}s`)), ms);
    });
    try {
      return await Promise.race([p, timeout]);
    } catch (e) {
      const msg = (e as Error).message;
      throw msg.startsWith(what) ? e : new Error(`${what}: ${msg}`);
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Polls `probe` until it returns something other than undefined (bounded).
   *
   * @param what named in the error
   * @param probe the condition
   * @returns the probe's value
   */
  async eventually<V>(what: string, probe: () => Promise<V | undefined>): Promise<V> {
    const end = Date.now() + this.stepMs;
    for (;;) {
      const v = await probe();
      if (v !== undefined) return v;
      if (Date.now() > end) throw new Error(`gave up waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** Registers a teardown step (run last-in, first-out by cleanup). */
  defer(f: () => Promise<unknown>): void {
    this.#cleanups.push(f);
  }

  /**
   * Removes the socket a shim serving `name` (a container id or group) of this namespace
   * listens on by containerd's convention, `/run/containerd/s/<sha256(address/ns/name)>`.
   * The containerd's own teardown does this for the containers it still lists; a scenario
   * that kills a shim or names a group calls this for what it leaves.
   *
   * @param name the container id or group the socket is named after
   */
  async removeShimSocket(name: string): Promise<void> {
    const key = `${this.containerd.address}/${this.namespace}/${name}`;
    const h = new Uint8Array(await crypto.subtle.digest("SHA-256", enc.encode(key)));
    const hex = Array.from(h, (b) => b.toString(16).padStart(2, "0")).join("");
    for (const p of [hex, `${hex}.ops`]) {
      await Deno.remove(`/run/containerd/s/${p}`).catch(() => {});
    }
  }

  /** Kills and deletes whatever the scenario left, best effort and bounded. */
  async cleanup(): Promise<void> {
    for (const f of this.#cleanups.reverse()) {
      await Promise.race([f().catch(() => {}), new Promise((r) => setTimeout(r, 20_000))]);
    }
    this.#cleanups.length = 0;
  }

  async #remove(id: string): Promise<void> {
    const quick = { timeoutMs: 15_000 };
    await this.client.tasks.kill({ containerId: id, signal: 9, all: true }, quick).catch(() => {});
    await this.client.tasks.wait({ containerId: id }, quick).catch(() => {});
    await this.client.tasks.delete({ containerId: id }, quick).catch(() => {});
    await this.client.containers.delete({ id }, quick).catch(() => {});
  }
}

function tryClose(f: Deno.FsFile): void {
  try {
    f.close();
  } catch { /* closed */ }
}

/**
 * The binary containerd runs for a runtime type: `io.containerd.runc.v2` →
 * `containerd-shim-runc-v2`.
 *
 * @param runtime a runtime type
 * @returns the shim binary's file name
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { shimBinaryName } from "./kit.ts";
 * strictEqual(shimBinaryName("io.containerd.skiff-runc.v2"), "containerd-shim-skiff-runc-v2");
 * ```
 */
export function shimBinaryName(runtime: string): string {
  const parts = runtime.split(".");
  if (parts.length < 3) throw new Error(`runtime type "${runtime}" is not like io.containerd.X.v2`);
  return `containerd-shim-${parts.at(-2)}-${parts.at(-1)}`;
}
