/**
 * A harness that plays containerd for one shim: it runs the shim binary's `start` the way
 * containerd does (flags, environment, bundle cwd, log FIFO), serves
 * `containerd.services.events.ttrpc.v1.Events/Forward` and records every envelope, and gives
 * typed Task and Sandbox clients over ttrpc. Runtime authors use it to test their shims
 * against the real protocol without a containerd.
 *
 * @module
 */

import { type DescMessage, fromBinary, type MessageShape } from "@bufbuild/protobuf";
import { type Any, timestampDate } from "@bufbuild/protobuf/wkt";
import { type Client, createClient, createServiceImplSpec } from "@connectrpc/connect";
import { Task } from "../../proto/gen/containerd/task/v2/shim_pb.ts";
import { Sandbox } from "../../proto/gen/containerd/runtime/sandbox/v1/sandbox_pb.ts";
import { Events } from "../../proto/gen/containerd/services/events/ttrpc/v1/events_pb.ts";
import type { Envelope } from "../../proto/gen/containerd/types/event_pb.ts";
import * as taskEvents from "../../proto/gen/containerd/events/task_pb.ts";
import { BootstrapResultSchema } from "../../proto/gen/containerd/runtime/bootstrap/v1/bootstrap_pb.ts";
import { DeleteResponseSchema } from "../../proto/gen/containerd/task/v2/shim_pb.ts";
import type { DeleteResponse } from "../../proto/gen/containerd/task/v2/shim_pb.ts";
import { TtrpcServer } from "../ttrpc/server.ts";
import { createTtrpcTransport, type TtrpcTransport } from "../ttrpc/transport.ts";

/** Options for {@link ShimHarness.start}. */
export interface ShimHarnessOptions {
  /** The shim binary (a launcher script or an executable). */
  shim: string;
  /** The bundle directory (`config.json`, `rootfs/`). */
  bundle: string;
  /** Container id; default "skiff-harness". */
  id?: string;
  /** Namespace; default "skiff-test". */
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
 * ```ts ignore
 * const exit = decodeTaskEvent(env.event) as TaskExit;
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
  /** Typed Task API client (the namespace header is set). */
  readonly task: Client<typeof Task>;
  /** Typed Sandbox API client. */
  readonly sandbox: Client<typeof Sandbox>;
  /** Every envelope the shim forwarded, in order. */
  readonly events: RecordedEvent[];
  #opts: ShimHarnessOptions;
  #dir: string;
  #eventsServer: TtrpcServer;
  #transport: TtrpcTransport;
  #log: string[];
  #logFile: Deno.FsFile;
  #logReader: Promise<void>;
  #waiters = new Set<() => void>();

  private constructor(init: {
    opts: ShimHarnessOptions;
    dir: string;
    address: string;
    version: number;
    eventsServer: TtrpcServer;
    transport: TtrpcTransport;
    events: RecordedEvent[];
    log: string[];
    logFile: Deno.FsFile;
    logReader: Promise<void>;
    startMs: number;
  }) {
    this.#opts = init.opts;
    this.startMs = init.startMs;
    this.id = init.opts.id ?? "skiff-harness";
    this.namespace = init.opts.namespace ?? "skiff-test";
    this.bundle = init.opts.bundle;
    this.address = init.address;
    this.version = init.version;
    this.#dir = init.dir;
    this.#eventsServer = init.eventsServer;
    this.#transport = init.transport;
    this.task = createClient(Task, this.#transport);
    this.sandbox = createClient(Sandbox, this.#transport);
    this.events = init.events;
    this.#log = init.log;
    this.#logFile = init.logFile;
    this.#logReader = init.logReader;
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
    return this.#log.join("");
  }

  /** The containerd address passed as `-address`. */
  get containerdAddress(): string {
    return this.#opts.address ?? `${this.#dir}/containerd.sock`;
  }

  /** Starts the events server, runs the shim's `start`, and connects. */
  static async start(opts: ShimHarnessOptions): Promise<ShimHarness> {
    const dir = await Deno.makeTempDir({ prefix: "skiff-harness-" });
    const namespace = opts.namespace ?? "skiff-test";
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
    const logFile = await Deno.open(logPath, { read: true, write: true });
    const logLines: string[] = [];
    const logReader = (async () => {
      const dec = new TextDecoder();
      try {
        for await (const chunk of logFile.readable) logLines.push(dec.decode(chunk));
      } catch { /* closed */ }
    })();

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
      await eventsServer.close();
      logFile.close();
      throw new Error(`shim start exited with ${out.code}: ${text.trim()}\n${logLines.join("")}`);
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
      log: logLines,
      logFile,
      logReader,
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

  /** Runs the shim binary's `delete` action, as containerd does after a connection closes. */
  async runDelete(): Promise<DeleteResponse> {
    const out = await new Deno.Command(this.#opts.shim, {
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
    }).output();
    if (!out.success) {
      throw new Error(
        `shim delete exited with ${out.code}: ${new TextDecoder().decode(out.stderr)}`,
      );
    }
    return fromBinary(DeleteResponseSchema, out.stdout);
  }

  /** Asks the shim to shut down (ignoring errors: it may be gone), then releases everything. */
  async close(): Promise<void> {
    await this.task.shutdown({ id: this.id }, { timeoutMs: 5_000 }).catch(() => {});
    await this.#transport.close().catch(() => {});
    await this.#eventsServer.close({ timeoutMs: 1_000 }).catch(() => {});
    try {
      this.#logFile.close();
    } catch { /* closed */ }
    await this.#logReader;
    await Deno.remove(this.#dir, { recursive: true }).catch(() => {});
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
 * import { parseStartOutput } from "./harness.ts";
 * const r = parseStartOutput(new TextEncoder().encode("unix:///run/x\n"));
 * console.assert(r.address === "unix:///run/x" && r.version === 2);
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
