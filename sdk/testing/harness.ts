/**
 * A harness that plays containerd for one shim: it runs the shim binary's `start` the way
 * containerd does (flags, environment, bundle cwd, log FIFO), serves
 * `containerd.services.events.ttrpc.v1.Events/Forward` and records every envelope, and gives
 * typed Task and Sandbox clients over ttrpc. Runtime authors use it to test their shims
 * against the real protocol without a containerd.
 *
 * @module
 */
// long: over 500 lines with its JSDoc; the code (~350 lines) is the ShimHarness class,
// containerd's side of one shim

import { type DescMessage, fromBinary, type MessageShape } from "@bufbuild/protobuf";
import { type Any, timestampDate } from "@bufbuild/protobuf/wkt";
import { type Client, createClient, createServiceImplSpec } from "@connectrpc/connect";
import { Task } from "../../proto/gen/containerd/task/v2/shim_pb.ts";
import { Task as TaskV3 } from "../../proto/gen/containerd/task/v3/shim_pb.ts";
import { Sandbox } from "../../proto/gen/containerd/runtime/sandbox/v1/sandbox_pb.ts";
import { Events } from "../../proto/gen/containerd/services/events/ttrpc/v1/events_pb.ts";
import type { Envelope } from "../../proto/gen/containerd/types/event_pb.ts";
import * as taskEvents from "../../proto/gen/containerd/events/task_pb.ts";
import { BootstrapResultSchema } from "../../proto/gen/containerd/runtime/bootstrap/v1/bootstrap_pb.ts";
import { DEFAULT_NAMESPACE } from "./ctr_command.ts";
import { DeleteResponseSchema } from "../../proto/gen/containerd/task/v2/shim_pb.ts";
import type { DeleteResponse } from "../../proto/gen/containerd/task/v2/shim_pb.ts";
import { TtrpcServer } from "../ttrpc/server.ts";
import { createTtrpcTransport, type TtrpcTransport } from "../ttrpc/transport.ts";

/**
 * How long {@linkcode ShimHarness.close} waits for the shim to close its end of the log FIFO
 * after Shutdown (its last lines come then); a shim that stays keeps its lines after that.
 */
const LOG_DRAIN_MS = 5_000;

/** Default bound of {@linkcode ShimHarness.runDelete}. */
const DELETE_TIMEOUT_MS = 30_000;

/** Resolves to whether `p` settled within `ms` (it is never rejected). */
async function settlesWithin(p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<false>((r) => timer = setTimeout(() => r(false), ms));
  try {
    return await Promise.race([p.then(() => true, () => true), late]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The bundle's log FIFO as containerd holds it: a read end drained into `lines`, and a write
 * end of its own, so the reader sees no end-of-file while the shim's processes come and go
 * (containerd opens the FIFO read-write for the same reason).
 */
interface LogFifo {
  lines: string[];
  /** The harness's write end (kept open until close). */
  keeper: Deno.FsFile;
  /** The read end. */
  reader: Deno.FsFile;
  /** Ends at end-of-file (every writer closed) or when `reader` is closed. */
  draining: Promise<void>;
}

async function openLogFifo(path: string): Promise<LogFifo> {
  // Read-write first: opening the read end alone would block until a writer appears.
  const keeper = await Deno.open(path, { read: true, write: true });
  let reader: Deno.FsFile;
  try {
    reader = await Deno.open(path, { read: true });
  } catch (e) {
    keeper.close();
    throw e;
  }
  const lines: string[] = [];
  const draining = (async () => {
    const dec = new TextDecoder();
    try {
      for await (const chunk of reader.readable) lines.push(dec.decode(chunk, { stream: true }));
    } catch { /* closed by close() */ }
  })();
  return { lines, keeper, reader, draining };
}

/**
 * Gives up the harness's write end, lets the shim's last lines arrive until every writer has
 * closed (bounded by `drainMs`), then closes the read end.
 */
async function closeLogFifo(log: LogFifo, drainMs: number): Promise<void> {
  try {
    log.keeper.close();
  } catch { /* closed */ }
  if (!(await settlesWithin(log.draining, drainMs))) {
    // Someone still holds a write end (a shim that did not exit): stop reading. Closing the
    // file cancels the pending read.
    try {
      log.reader.close();
    } catch { /* closed */ }
    await settlesWithin(log.draining, 1_000);
  }
  try {
    log.reader.close();
  } catch { /* closed at end-of-file */ }
}

/** Options for {@link ShimHarness.start}. */
export interface ShimHarnessOptions {
  /** The shim binary (a launcher script or an executable). */
  shim: string;
  /** The bundle directory (`config.json`, `rootfs/`). */
  bundle: string;
  /** Container id; default "skiff-harness". */
  id?: string;
  /** Namespace; default {@linkcode DEFAULT_NAMESPACE} ("skiff-test"). */
  namespace?: string;
  /** Pass `-debug`. */
  debug?: boolean;
  /** Bytes for `start`'s stdin (an options `Any` or `BootstrapParams`). */
  stdin?: Uint8Array;
  /** Value of `-publish-binary` (the shim runs `<it> --version` to learn containerd's version). */
  publishBinary?: string;
  /** Extra environment for the shim. */
  env?: Record<string, string>;
  /**
   * containerd's address (`-address`) to pretend to be. Default: a path in the harness's own
   * temp dir. Harnesses that share one (one after another: each serves `<address>.ttrpc` for
   * events while it lives) share one containerd's shim state, e.g. a skiff shim's warm spare;
   * a placeholder file is made there if nothing exists, since a spare leaves once its
   * containerd's socket is gone.
   */
  address?: string;
}

/** A recorded event, decoded by its bare type name when it is a task event. */
export interface RecordedEvent {
  /** Topic, e.g. `/tasks/exit`. */
  topic: string;
  /** Namespace from the envelope. */
  namespace: string;
  /** Envelope timestamp. */
  timestamp: Date;
  /** The raw `Any`. */
  event: Any;
  /** The decoded task event (by bare type name), if known. */
  message?: unknown;
}

const EVENT_TYPES: Record<string, DescMessage> = Object.fromEntries(
  (Object.values(taskEvents) as unknown[])
    .filter((v): v is DescMessage => (v as DescMessage)?.kind === "message")
    .map((d) => [d.typeName, d]),
);

/**
 * Decodes a task event `Any` by its bare type name (`containerd.events.TaskExit`).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { packAny, type TaskExit, TaskExitSchema } from "@skiff/shim/proto";
 * import { decodeTaskEvent } from "@skiff/shim/testing";
 * // An envelope's event as the shim publishes it.
 * const event = packAny(TaskExitSchema, { containerId: "c1", exitStatus: 3 });
 * const exit = decodeTaskEvent(event) as TaskExit;
 * strictEqual(exit.exitStatus, 3);
 * strictEqual(decodeTaskEvent({ ...event, typeUrl: "x.Unknown" }), undefined);
 * ```
 */
export function decodeTaskEvent(any: Any): unknown {
  const desc = EVENT_TYPES[any.typeUrl];
  return desc ? fromBinary(desc, any.value) : undefined;
}

/**
 * Runs a shim under a fake containerd.
 *
 * @example Usage
 * ```ts ignore
 * const h = await ShimHarness.start({ shim: "/usr/local/bin/containerd-shim-skiff-runc-v2", bundle });
 * await h.task.create({ id: h.id, bundle, stdout: `${bundle}/out` });
 * await h.task.start({ id: h.id });
 * const { exitStatus } = await h.task.wait({ id: h.id });
 * await h.task.delete({ id: h.id });
 * await h.close();
 * ```
 */
export class ShimHarness {
  /** Container id. */
  readonly id: string;
  /** Namespace. */
  readonly namespace: string;
  /** Bundle directory. */
  readonly bundle: string;
  /** What `start` printed, as an address (`unix:///…`). */
  readonly address: string;
  /** The Task API version the shim advertised. */
  readonly version: number;
  /**
   * Wall time of the shim's `start` process, from spawn to exit, in milliseconds: what
   * containerd waits for (the harness's own set-up around it is not counted).
   */
  readonly startMs: number;
  /** Typed Task API v2 client (the namespace header is set). */
  readonly task: Client<typeof Task>;
  /** The same over Task API v3, for a shim that advertises `version` 3 (and serves only it). */
  readonly taskV3: Client<typeof TaskV3>;
  /** Typed Sandbox API client. */
  readonly sandbox: Client<typeof Sandbox>;
  /** Every envelope the shim forwarded, in order. */
  readonly events: RecordedEvent[];
  #opts: ShimHarnessOptions;
  #dir: string;
  #eventsServer: TtrpcServer;
  #transport: TtrpcTransport;
  #log: LogFifo;
  #closing: Promise<void> | undefined;
  #waiters = new Set<() => void>();

  private constructor(init: {
    opts: ShimHarnessOptions;
    dir: string;
    address: string;
    version: number;
    eventsServer: TtrpcServer;
    transport: TtrpcTransport;
    events: RecordedEvent[];
    log: LogFifo;
    startMs: number;
  }) {
    this.#opts = init.opts;
    this.startMs = init.startMs;
    this.id = init.opts.id ?? "skiff-harness";
    this.namespace = init.opts.namespace ?? DEFAULT_NAMESPACE;
    this.bundle = init.opts.bundle;
    this.address = init.address;
    this.version = init.version;
    this.#dir = init.dir;
    this.#eventsServer = init.eventsServer;
    this.#transport = init.transport;
    this.task = createClient(Task, this.#transport);
    this.taskV3 = createClient(TaskV3, this.#transport);
    this.sandbox = createClient(Sandbox, this.#transport);
    this.events = init.events;
    this.#log = init.log;
  }

  /** Wakes {@link waitForEvent} callers. */
  #notify(): void {
    for (const wake of this.#waiters) wake();
  }

  /** The fake containerd's directory (sockets live here). */
  get dir(): string {
    return this.#dir;
  }

  /** The shim's log lines so far (from the bundle's `log` FIFO). */
  get log(): string {
    return this.#log.lines.join("");
  }

  /** The containerd address passed as `-address`. */
  get containerdAddress(): string {
    return this.#opts.address ?? `${this.#dir}/containerd.sock`;
  }

  /** Starts the events server, runs the shim's `start`, and connects. */
  static async start(opts: ShimHarnessOptions): Promise<ShimHarness> {
    // long: containerd's side of a shim start in order (events server, log FIFO, start, dial)
    const dir = await Deno.makeTempDir({ prefix: "skiff-harness-" });
    const namespace = opts.namespace ?? DEFAULT_NAMESPACE;
    const events: RecordedEvent[] = [];
    let notify = () => {};
    const eventsServer = new TtrpcServer();
    eventsServer.register(
      createServiceImplSpec<typeof Events>(Events, {
        forward(req) {
          const env = req.envelope as Envelope | undefined;
          if (env?.event) {
            events.push({
              topic: env.topic,
              namespace: env.namespace,
              timestamp: env.timestamp ? timestampDate(env.timestamp) : new Date(0),
              event: env.event,
              message: decodeTaskEvent(env.event),
            });
            notify();
          }
          return {};
        },
      }),
      "containerd.services.events.ttrpc.v1.Events",
    );
    const grpcAddress = opts.address ?? `${dir}/containerd.sock`;
    if (opts.address) {
      await Deno.writeFile(opts.address, new Uint8Array(), { createNew: true }).catch(() => {});
    }
    const ttrpcAddress = `${grpcAddress}.ttrpc`;
    await eventsServer.listen(ttrpcAddress);

    // containerd creates the log FIFO and keeps it open for reading before `start`.
    const logPath = `${opts.bundle}/log`;
    await Deno.remove(logPath).catch(() => {});
    const mk = await new Deno.Command("mkfifo", { args: [logPath] }).output();
    if (!mk.success) throw new Error(`mkfifo "${logPath}" failed`);
    const log = await openLogFifo(logPath);

    const args = [
      "-namespace",
      namespace,
      "-address",
      grpcAddress,
      "-publish-binary",
      opts.publishBinary ?? "/bin/true",
      "-id",
      opts.id ?? "skiff-harness",
      ...(opts.debug ? ["-debug"] : []),
      "start",
    ];
    const t0 = performance.now();
    const child = new Deno.Command(opts.shim, {
      args,
      cwd: opts.bundle,
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
      env: {
        TTRPC_ADDRESS: ttrpcAddress,
        GRPC_ADDRESS: grpcAddress,
        NAMESPACE: namespace,
        MAX_SHIM_VERSION: "2",
        ...opts.env,
      },
    }).spawn();
    const w = child.stdin.getWriter();
    await w.write(opts.stdin ?? new Uint8Array());
    await w.close();
    const out = await child.output();
    const startMs = performance.now() - t0;
    const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
    if (!out.success) {
      await eventsServer.close({ timeoutMs: 1_000 }).catch(() => {});
      await closeLogFifo(log, 1_000);
      await Deno.remove(dir, { recursive: true }).catch(() => {});
      throw new Error(`shim start exited with ${out.code}: ${text.trim()}\n${log.lines.join("")}`);
    }
    const { address, version } = parseStartOutput(out.stdout);
    const transport = createTtrpcTransport({
      path: address.replace(/^unix:\/\//, ""),
      // containerd sends the namespace on every call.
      interceptors: [(next) => (req) => {
        req.header.set("containerd-namespace-ttrpc", namespace);
        return next(req);
      }],
    });
    const h = new ShimHarness({
      opts,
      dir,
      address,
      version,
      eventsServer,
      transport,
      events,
      log,
      startMs,
    });
    notify = () => h.#notify();
    return h;
  }

  /** Waits until an event with `topic` (and matching `pred`) has been recorded. */
  async waitForEvent(
    topic: string,
    pred: (e: RecordedEvent) => boolean = () => true,
    timeoutMs = 10_000,
  ): Promise<RecordedEvent> {
    const deadline = Date.now() + timeoutMs;
    while (true) {
      const hit = this.events.find((e) => e.topic === topic && pred(e));
      if (hit) return hit;
      const left = deadline - Date.now();
      if (left <= 0) {
        throw new Error(
          `no ${topic} event within ${timeoutMs}ms; saw: ${
            this.events.map((e) => e.topic).join(", ")
          }`,
        );
      }
      await new Promise<void>((resolve) => {
        const t = setTimeout(done, Math.min(left, 200));
        function done() {
          clearTimeout(t);
          resolve();
        }
        this.#waiters.add(done);
      });
      this.#waiters.clear();
    }
  }

  /**
   * Runs the shim binary's `delete` action, as containerd does after a connection closes.
   *
   * @param opts `timeoutMs`: how long `delete` may take (default 30 s); past it the process is
   *   killed (SIGKILL) and the call fails
   * @returns what `delete` printed
   * @throws {Error} when `delete` fails or outlives `timeoutMs`
   */
  async runDelete(opts: { timeoutMs?: number } = {}): Promise<DeleteResponse> {
    const timeoutMs = opts.timeoutMs ?? DELETE_TIMEOUT_MS;
    const child = new Deno.Command(this.#opts.shim, {
      args: [
        "-namespace",
        this.namespace,
        "-address",
        this.containerdAddress,
        "-publish-binary",
        this.#opts.publishBinary ?? "/bin/true",
        "-id",
        this.id,
        "-bundle",
        this.bundle,
        "delete",
      ],
      cwd: this.bundle,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const output = child.output();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<undefined>((r) => timer = setTimeout(() => r(undefined), timeoutMs));
    const out = await Promise.race([output, late]).finally(() => clearTimeout(timer));
    if (!out) {
      try {
        child.kill("SIGKILL");
      } catch { /* exited meanwhile; a child of it may hold the pipes */ }
      // Its pipes close when it dies; a descendant holding them must not hang the caller.
      await settlesWithin(output, 1_000);
      throw new Error(
        `shim delete "${this.#opts.shim}" (id "${this.id}") did not finish within ${timeoutMs}ms`,
      );
    }
    if (!out.success) {
      throw new Error(
        `shim delete exited with ${out.code}: ${new TextDecoder().decode(out.stderr)}`,
      );
    }
    return fromBinary(DeleteResponseSchema, out.stdout);
  }

  /**
   * Asks the shim to shut down (ignoring errors: it may be gone), collects its last log lines
   * until it closes the log FIFO, then releases everything. Bounded: Shutdown 5 s, the events
   * server 1 s, the log 5 s (a shim that does not exit keeps its lines after that). Calling it
   * again returns the same promise.
   */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      // In the API the shim advertised: a v3-only shim (rust-extensions') has no v2 Shutdown.
      const task = this.version === 3 ? this.taskV3 : this.task;
      await task.shutdown({ id: this.id }, { timeoutMs: 5_000 }).catch(() => {});
      await this.#transport.close().catch(() => {});
      await this.#eventsServer.close({ timeoutMs: 1_000 }).catch(() => {});
      await closeLogFifo(this.#log, LOG_DRAIN_MS);
      await Deno.remove(this.#dir, { recursive: true }).catch(() => {});
    })();
    return this.#closing;
  }
}

/** Decodes a message from a recorded event, checking its bare type name. */
export function eventAs<Desc extends DescMessage>(
  e: RecordedEvent,
  schema: Desc,
): MessageShape<Desc> {
  if (e.event.typeUrl !== schema.typeName) {
    throw new TypeError(`event ${e.topic} has type "${e.event.typeUrl}", not "${schema.typeName}"`);
  }
  return fromBinary(schema, e.event.value);
}

/**
 * Parses what a shim's `start` printed: a protobuf `BootstrapResult`, JSON, or a plain address.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { parseStartOutput } from "@skiff/shim/testing";
 * const r = parseStartOutput(new TextEncoder().encode("unix:///run/x\n"));
 * strictEqual(r.address, "unix:///run/x");
 * strictEqual(r.version, 2);
 * ```
 */
export function parseStartOutput(
  out: Uint8Array,
): { address: string; version: number; protocol: string } {
  const text = new TextDecoder().decode(out).trim();
  if (text.startsWith("{")) {
    const j = JSON.parse(text);
    return { address: j.address, version: j.version ?? 2, protocol: j.protocol ?? "ttrpc" };
  }
  if (/^[a-z+]+:\/\//.test(text)) return { address: text, version: 2, protocol: "ttrpc" };
  const r = fromBinary(BootstrapResultSchema, out);
  return { address: r.address, version: r.version, protocol: r.protocol };
}
