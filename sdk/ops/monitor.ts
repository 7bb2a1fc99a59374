/**
 * The node monitor: finds the operations sockets of every skiff shim on the node
 * (`<socket dir>/*.ops`), scrapes them in parallel with a per-shim deadline, and serves one
 * merged exposition in which every series carries the shim's `namespace`, `id` and `runtime`,
 * so a single Prometheus scrape covers the node. A shim that has gone (its socket refuses)
 * drops out; one that hangs costs at most the deadline and is counted as an error.
 *
 * @module
 */
// long: over 500 lines with its runnable JSDoc examples; the code (~290 lines) is the node monitor
// and its HTTP API

import { Hono } from "hono";
import { EXPOSITION_CONTENT_TYPE, mountGetRoutes } from "./_routes.ts";
import { OPS_SOCKET_SUFFIX } from "../shim/contract/socket_address.ts";
import {
  type Counter,
  type Gauge,
  type MetricFamily,
  MetricsRegistry,
  parseExposition,
  renderExposition,
} from "./metrics.ts";
import { unixGet } from "./unix_http.ts";

/**
 * containerd's shim socket directory (for root), where shims put their `.ops` sockets.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { DEFAULT_OPS_SOCKET_DIR } from "@skiff/shim/ops";
 * strictEqual(DEFAULT_OPS_SOCKET_DIR, "/run/containerd/s");
 * ```
 */
export const DEFAULT_OPS_SOCKET_DIR = "/run/containerd/s";

/**
 * Shim counters the monitor also keeps node-wide, under `skiff_node_*`: a shim's counters end
 * with the shim (and a shim's first create happens before any scrape can see a zero), while
 * these keep every increase the monitor has seen, by runtime and result.
 */
const ROLLUPS: Readonly<Record<string, string>> = {
  skiff_task_create_requests_total: "skiff_node_task_create_requests_total",
  skiff_sandbox_create_requests_total: "skiff_node_sandbox_create_requests_total",
};

/** The labels the monitor adds to each shim's series, in this order. */
const SHIM_LABELS = ["namespace", "id", "runtime"] as const;

/**
 * Options of {@linkcode NodeMonitor}.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { NodeMonitorOptions } from "@skiff/shim/ops";
 * const o: NodeMonitorOptions = { socketDirs: ["/run/containerd/s"], timeoutMs: 2000 };
 * strictEqual(o.timeoutMs, 2000);
 * ```
 */
export interface NodeMonitorOptions {
  /** Directories to look for `*.ops` sockets in. Default `[DEFAULT_OPS_SOCKET_DIR]`. */
  socketDirs?: string[];
  /** Per-shim deadline for one scrape. Default 2000 ms. */
  timeoutMs?: number;
  /** Keeps only the shims this returns true for (e.g. one namespace). */
  filter?: (shim: ShimIdentityLabels) => boolean;
  /** Most shims scraped at once. Default 32. */
  concurrency?: number;
}

/**
 * The labels that identify a shim.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { ShimIdentityLabels } from "@skiff/shim/ops";
 * const s: ShimIdentityLabels = { namespace: "k8s.io", id: "abc", runtime: "io.containerd.skiff-runc.v2" };
 * strictEqual(s.namespace, "k8s.io");
 * ```
 */
export interface ShimIdentityLabels {
  /** containerd namespace. */
  namespace: string;
  /** Container or sandbox id the shim was started for. */
  id: string;
  /** Runtime name. */
  runtime: string;
}

/**
 * The outcome of scraping one socket.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { NodeMonitor, type ShimScrape } from "@skiff/shim/ops";
 * import { serveUnixHttp } from "@skiff/shim/ops";
 * const dir = Deno.makeTempDirSync();
 * // A shim whose endpoint fails: reported, never thrown.
 * const shim = await serveUnixHttp(`${dir}/ab12.ops`, () => new Response("boom", { status: 500 }));
 * const [s]: ShimScrape[] = (await new NodeMonitor({ socketDirs: [dir] }).scrape()).shims;
 * strictEqual(s.status, "error");
 * strictEqual(s.error, "HTTP 500: boom");
 * await shim.close();
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export interface ShimScrape {
  /** The `.ops` socket. */
  socket: string;
  /** `ok`; `gone` (nothing listens: the shim exited); `error` (timeout, bad answer). */
  status: "ok" | "gone" | "error";
  /** Who the shim is (when it answered). */
  shim?: ShimIdentityLabels;
  /** How its server came to run, `cold` or `spare` (when it answered and says so). */
  origin?: string;
  /** What went wrong (status `error`). */
  error?: string;
  /** Its families, relabelled (status `ok`). */
  families?: MetricFamily[];
}

/**
 * One scrape of the node.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { NodeMonitor, type NodeScrape } from "@skiff/shim/ops";
 * const dir = Deno.makeTempDirSync(); // no shims: the monitor's own metrics only
 * const { shims, text }: NodeScrape = await new NodeMonitor({ socketDirs: [dir] }).scrape();
 * strictEqual(shims.length, 0);
 * strictEqual(text.includes("skiff_monitor_"), true);
 * Deno.removeSync(dir);
 * ```
 */
export interface NodeScrape {
  /**
   * Every socket found: first the shims that answered (status `ok`), by namespace, then id,
   * then runtime (plain code-unit order; the socket breaks a tie), then the others by socket
   * path. The merged exposition lists each family's samples in this order too.
   */
  shims: ShimScrape[];
  /** The merged exposition, the monitor's own metrics last. */
  text: string;
}

function identityOf(families: MetricFamily[]): ShimIdentityLabels | undefined {
  const info = families.find((f) => f.name === "skiff_shim_info")?.samples[0];
  if (!info) return undefined;
  const get = (k: string) => info.labels.find(([n]) => n === k)?.[1];
  const namespace = get("namespace");
  const id = get("id");
  const runtime = get("runtime");
  if (namespace === undefined || id === undefined || runtime === undefined) return undefined;
  return { namespace, id, runtime };
}

function originOf(families: MetricFamily[]): string | undefined {
  const sample = families.find((f) => f.name === "skiff_shim_origin")?.samples
    .find((x) => x.value === "1");
  return sample?.labels.find(([n]) => n === "origin")?.[1];
}

function relabel(families: MetricFamily[], shim: ShimIdentityLabels): MetricFamily[] {
  const head: [string, string][] = SHIM_LABELS.map((k) => [k, shim[k]]);
  return families.map((f) => ({
    ...f,
    samples: f.samples.map((s) => ({
      ...s,
      // The shim's own labels keep their place; one it already has (runtime) is not repeated.
      labels: [
        ...head,
        ...s.labels.filter(([k]) => !(SHIM_LABELS as readonly string[]).includes(k)),
      ],
    })),
  }));
}

/**
 * Merges families from several shims: one HELP/TYPE per name (the first seen), samples
 * concatenated. A family whose type disagrees with the first one's is left out rather than
 * producing an exposition Prometheus would reject.
 *
 * @param lists the families of each shim
 * @returns the merged families, in order of first appearance
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { mergeFamilies } from "@skiff/shim/ops";
 * const f = (v: string) => [{ name: "up", help: "Up.", type: "gauge" as const, samples: [{ name: "up", labels: [], value: v }] }];
 * strictEqual(mergeFamilies([f("1"), f("0")])[0].samples.length, 2);
 * ```
 */
export function mergeFamilies(lists: MetricFamily[][]): MetricFamily[] {
  const out = new Map<string, MetricFamily>();
  for (const list of lists) {
    for (const f of list) {
      const have = out.get(f.name);
      if (!have) out.set(f.name, { ...f, samples: [...f.samples] });
      else if (have.type === f.type) have.samples.push(...f.samples);
    }
  }
  return [...out.values()];
}

/** Code-unit order, the same in every locale (unlike `localeCompare`). */
function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * The order of {@linkcode NodeScrape.shims}, a total one: the shims that answered first, by
 * namespace, id and runtime (the socket breaks a tie), then the rest by socket path. It must
 * not compare answered shims by identity and the rest by socket in one pass: that is no
 * order at all (`a < gone < b < a` happens), and the result then depends on discovery order.
 */
function shimOrder(a: ShimScrape, b: ShimScrape): number {
  if ((a.status === "ok") !== (b.status === "ok")) return a.status === "ok" ? -1 : 1;
  if (a.status === "ok") {
    const x = a.shim!;
    const y = b.shim!;
    const by = cmp(x.namespace, y.namespace) || cmp(x.id, y.id) || cmp(x.runtime, y.runtime);
    if (by) return by;
  }
  return cmp(a.socket, b.socket);
}

async function refuses(socket: string): Promise<boolean> {
  try {
    const c = await Deno.connect({ transport: "unix", path: socket });
    c.close();
    return false;
  } catch (e) {
    return e instanceof Deno.errors.ConnectionRefused || e instanceof Deno.errors.NotFound;
  }
}

/**
 * Scrapes every skiff shim on the node.
 *
 * @example Usage
 * ```ts
 * import { deepStrictEqual, strictEqual } from "node:assert/strict";
 * import { NodeMonitor } from "@skiff/shim/ops";
 * import { serveUnixHttp } from "@skiff/shim/ops";
 * const dir = Deno.makeTempDirSync(); // stands in for /run/containerd/s
 * const info = 'skiff_shim_info{namespace="default",id="web",runtime="io.containerd.skiff-runc.v2"} 1';
 * const shim = await serveUnixHttp(`${dir}/ab12.ops`, () =>
 *   new Response(`# TYPE skiff_shim_info gauge\n${info}\n`));
 * const monitor = new NodeMonitor({ socketDirs: [dir] });
 * const { shims } = await monitor.scrape();
 * strictEqual(shims[0].status, "ok");
 * deepStrictEqual(shims[0].shim, {
 *   namespace: "default",
 *   id: "web",
 *   runtime: "io.containerd.skiff-runc.v2",
 * });
 * await shim.close();
 * Deno.removeSync(dir, { recursive: true });
 * ```
 */
export class NodeMonitor {
  #dirs: string[];
  #timeoutMs: number;
  #filter: ((s: ShimIdentityLabels) => boolean) | undefined;
  #concurrency: number;
  #self = new MetricsRegistry();
  #errors: Counter;
  #shims: Gauge;
  #duration: Gauge;
  #rollups = new Map<string, Counter>();
  // Last values seen per socket and series, and the shim's start time (a new one resets them).
  #last = new Map<string, { start: string; values: Map<string, number> }>();

  /** Creates a monitor; nothing is read until {@linkcode scrape}. */
  constructor(opts: NodeMonitorOptions = {}) {
    this.#dirs = opts.socketDirs ?? [DEFAULT_OPS_SOCKET_DIR];
    this.#timeoutMs = opts.timeoutMs ?? 2_000;
    this.#filter = opts.filter;
    this.#concurrency = Math.max(1, opts.concurrency ?? 32);
    this.#shims = this.#self.gauge({
      name: "skiff_monitor_shims",
      help: "Shim operations sockets found by the last scrape, by status (ok, gone, error).",
      labelNames: ["status"],
    });
    for (const status of ["ok", "gone", "error"]) this.#shims.set({ status }, 0);
    this.#errors = this.#self.counter({
      name: "skiff_monitor_shim_scrape_errors_total",
      help: "Shim scrapes that failed (timeout, refused answer, malformed exposition).",
    });
    this.#duration = this.#self.gauge({
      name: "skiff_monitor_scrape_duration_seconds",
      help: "How long the last node scrape took.",
    });
    for (const [from, to] of Object.entries(ROLLUPS)) {
      this.#rollups.set(
        from,
        this.#self.counter({
          name: to,
          help: `Increases of ${from} over every shim this monitor has scraped, ` +
            "including shims that have since exited, by runtime and result.",
          labelNames: ["runtime", "result"],
        }),
      );
    }
  }

  /** The `.ops` sockets present now, sorted. Missing directories are skipped. */
  async discover(): Promise<string[]> {
    const found: string[] = [];
    for (const dir of this.#dirs) {
      try {
        for await (const e of Deno.readDir(dir)) {
          if (!e.isDirectory && e.name.endsWith(OPS_SOCKET_SUFFIX)) found.push(`${dir}/${e.name}`);
        }
      } catch (e) {
        if (!(e instanceof Deno.errors.NotFound)) throw e;
      }
    }
    return found.sort();
  }

  async #scrapeOne(socket: string): Promise<ShimScrape> {
    try {
      const r = await unixGet(socket, "/metrics", { timeoutMs: this.#timeoutMs });
      if (r.status !== 200) {
        return { socket, status: "error", error: `HTTP ${r.status}: ${r.body.trim()}` };
      }
      const families = parseExposition(r.body);
      const shim = identityOf(families);
      if (!shim) return { socket, status: "error", error: "no skiff_shim_info in the exposition" };
      const origin = originOf(families);
      return {
        socket,
        status: "ok",
        shim,
        ...(origin ? { origin } : {}),
        families: relabel(families, shim),
      };
    } catch (e) {
      if (e instanceof TypeError && await refuses(socket)) return { socket, status: "gone" };
      const err = e as Error;
      return {
        socket,
        status: "error",
        error: err.name === "TimeoutError" ? `no answer within ${this.#timeoutMs}ms` : err.message,
      };
    }
  }

  /** Adds what each shim's create counters gained since it was last scraped to the node's. */
  #rollUp(shims: ShimScrape[]): void {
    const present = new Set<string>();
    for (const s of shims) {
      // A shim that failed to answer this time keeps its baseline, or its next answer would
      // be counted again in full.
      if (s.status !== "gone") present.add(s.socket);
      if (s.status !== "ok") continue;
      const start = s.families!.find((f) => f.name === "process_start_time_seconds")
        ?.samples[0]?.value ?? "";
      let last = this.#last.get(s.socket);
      if (!last || last.start !== start) {
        last = { start, values: new Map() };
        this.#last.set(s.socket, last);
      }
      for (const f of s.families!) {
        const rollup = this.#rollups.get(f.name);
        if (!rollup) continue;
        for (const sample of f.samples) {
          const l = Object.fromEntries(sample.labels);
          const key = `${f.name}\0${l.runtime}\0${l.result}`;
          const v = Number(sample.value);
          const before = last.values.get(key) ?? 0;
          // A counter that went down belongs to a restarted shim: all of it is new.
          const gained = v >= before ? v - before : v;
          last.values.set(key, v);
          if (gained > 0 && l.runtime !== undefined && l.result !== undefined) {
            rollup.inc({ runtime: l.runtime, result: l.result }, gained);
          }
        }
      }
    }
    // A vanished shim's counts stay in the totals; only its baseline goes.
    for (const socket of this.#last.keys()) if (!present.has(socket)) this.#last.delete(socket);
  }

  /** Discovers and scrapes every shim; never throws for a shim's failure. */
  async scrape(): Promise<NodeScrape> {
    const started = performance.now();
    const sockets = await this.discover();
    const results: ShimScrape[] = new Array(sockets.length);
    let next = 0;
    const worker = async () => {
      while (next < sockets.length) {
        const i = next++;
        results[i] = await this.#scrapeOne(sockets[i]!);
      }
    };
    await Promise.all(Array.from({ length: Math.min(this.#concurrency, sockets.length) }, worker));
    const shims = results.filter((r) =>
      r.status !== "ok" || !this.#filter || this.#filter(r.shim!)
    );
    shims.sort(shimOrder);
    const count = { ok: 0, gone: 0, error: 0 };
    for (const s of shims) count[s.status]++;
    for (const [status, n] of Object.entries(count)) this.#shims.set({ status }, n);
    this.#errors.inc(undefined, count.error);
    // Microseconds are as fine as this measurement gets.
    this.#duration.set(undefined, Math.round((performance.now() - started) * 1e3) / 1e6);
    this.#rollUp(shims);
    const merged = mergeFamilies(shims.flatMap((s) => s.families ? [s.families] : []));
    return { shims, text: renderExposition([...merged, ...this.#self.families()]) };
  }
}

/**
 * The monitor's HTTP API: `/metrics` (the merged exposition), `/shims` (what was found, as
 * JSON), `/healthz`. GET only.
 *
 * @param monitor the monitor to serve
 * @returns a Hono app
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { createMonitorApp, NodeMonitor } from "@skiff/shim/ops";
 * const app = createMonitorApp(new NodeMonitor({ socketDirs: [] }));
 * strictEqual(await (await app.request("/healthz")).text(), "ok\n");
 * strictEqual((await app.request("/metrics", { method: "POST" })).status, 405); // GET only
 * ```
 */
export function createMonitorApp(monitor: NodeMonitor): Hono {
  return mountGetRoutes(new Hono(), {
    "/metrics": async () =>
      new Response((await monitor.scrape()).text, {
        headers: { "content-type": EXPOSITION_CONTENT_TYPE },
      }),
    "/shims": async (c) => {
      const { shims } = await monitor.scrape();
      return c.json(shims.map(({ families: _, ...s }) => s));
    },
    "/healthz": (c) => c.text("ok\n"),
  });
}

/**
 * Options of {@linkcode serveMonitor}.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { ServeMonitorOptions } from "@skiff/shim/ops";
 * const o: ServeMonitorOptions = { hostname: "127.0.0.1", port: 9464 };
 * strictEqual(o.port, 9464);
 * ```
 */
export interface ServeMonitorOptions extends NodeMonitorOptions {
  /** Address to listen on. Default `127.0.0.1`. */
  hostname?: string;
  /** Port. Default 9464; 0 picks a free one. */
  port?: number;
  /** Allow a non-loopback address (the metrics name every container on the node). */
  allowRemote?: boolean;
}

/**
 * A running monitor.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { type MonitorServer, serveMonitor } from "@skiff/shim/ops";
 * const m: MonitorServer = await serveMonitor({ port: 0, socketDirs: [] }); // a free port
 * strictEqual(m.url.startsWith("http://127.0.0.1:"), true);
 * strictEqual(await (await fetch(`${m.url}/healthz`)).text(), "ok\n");
 * await m.close();
 * ```
 */
export interface MonitorServer {
  /** Base URL, e.g. `http://127.0.0.1:9464`. */
  readonly url: string;
  /** The monitor behind it. */
  readonly monitor: NodeMonitor;
  /** Stops serving. */
  close(): Promise<void>;
}

/**
 * True for loopback addresses (`127.0.0.0/8`, `::1`, `localhost`).
 *
 * @param hostname a host name or IP literal
 * @returns whether only this machine can reach it
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { isLoopback } from "@skiff/shim/ops";
 * strictEqual(isLoopback("127.0.0.1"), true);
 * strictEqual(isLoopback("::1"), true);
 * strictEqual(isLoopback("0.0.0.0"), false);
 * ```
 */
export function isLoopback(hostname: string): boolean {
  const h = hostname.replace(/^\[|\]$/g, "");
  return h === "localhost" || h === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

/**
 * Serves the monitor over HTTP (loopback only unless `allowRemote`).
 *
 * @param opts address and monitor options
 * @returns the running server
 * @throws {RangeError} for a non-loopback address without `allowRemote`
 *
 * @example Usage
 * ```ts
 * import { rejects, strictEqual } from "node:assert/strict";
 * import { serveMonitor } from "@skiff/shim/ops";
 * // The metrics name every container on the node: a public address needs allowRemote.
 * await rejects(serveMonitor({ hostname: "0.0.0.0", port: 0 }), RangeError);
 * const m = await serveMonitor({ hostname: "127.0.0.1", port: 0, socketDirs: [] });
 * strictEqual((await fetch(`${m.url}/shims`)).status, 200);
 * await m.close();
 * ```
 */
export function serveMonitor(opts: ServeMonitorOptions = {}): Promise<MonitorServer> {
  // A failure to bind becomes a rejection, like every other failure here.
  try {
    const hostname = (opts.hostname ?? "127.0.0.1").replace(/^\[|\]$/g, "");
    if (!isLoopback(hostname) && !opts.allowRemote) {
      throw new RangeError(
        `refusing to listen on "${hostname}": it is not a loopback address (set allowRemote, or --allow-remote, to permit it)`,
      );
    }
    const monitor = new NodeMonitor(opts);
    const server = Deno.serve(
      { hostname, port: opts.port ?? 9464, onListen() {} },
      createMonitorApp(monitor).fetch,
    );
    const addr = server.addr as Deno.NetAddr;
    const host = addr.hostname.includes(":") ? `[${addr.hostname}]` : addr.hostname;
    return Promise.resolve({
      url: `http://${host}:${addr.port}`,
      monitor,
      close: () => server.shutdown(),
    });
  } catch (e) {
    return Promise.reject(e);
  }
}
