/**
 * A tiny metrics registry (counter, gauge, histogram with fixed buckets) that renders the
 * Prometheus text exposition format (version 0.0.4), and a parser for that format so the node
 * monitor can relabel and merge what shims expose. Small on purpose: a shim needs a dozen
 * series, not a client library.
 *
 * @module
 */
// long: over 500 lines with its runnable JSDoc examples; the code (~370 lines) is the Prometheus
// registry and its exposition format

/** Label values of one series, by label name. */
export type Labels = Readonly<Record<string, string>>;

/** What every metric is declared with. */
export interface MetricOptions {
  /** Metric name: `[a-zA-Z_:][a-zA-Z0-9_:]*`; counters end in `_total`, units are base units. */
  name: string;
  /** One line saying what it counts. */
  help: string;
  /** Label names, in the order they are rendered. */
  labelNames?: readonly string[];
}

/** Options of a counter or gauge whose value lives elsewhere and is read at scrape time. */
export interface ReadMetricOptions extends MetricOptions {
  /** Reads the current value (unlabelled metrics only). */
  read?: () => number;
}

/** Options of a histogram. */
export interface HistogramOptions extends MetricOptions {
  /** Upper bounds, strictly increasing; `+Inf` is implied. Default {@linkcode DEFAULT_BUCKETS}. */
  buckets?: readonly number[];
}

/**
 * Default histogram buckets in seconds: from 0.5 ms (a State call) to 60 s (a slow Create
 * with a cold image); a blocking `Wait` lands in `+Inf`.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { DEFAULT_BUCKETS } from "@skiff/shim/ops";
 * strictEqual(DEFAULT_BUCKETS[0], 0.0005);
 * ```
 */
export const DEFAULT_BUCKETS: readonly number[] = [
  0.0005,
  0.001,
  0.0025,
  0.005,
  0.01,
  0.025,
  0.05,
  0.1,
  0.25,
  0.5,
  1,
  2.5,
  5,
  10,
  30,
  60,
];

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

/** The exposition type of a metric family. */
export type MetricType = "counter" | "gauge" | "histogram" | "summary" | "untyped";

/** One sample line of the exposition format. */
export interface Sample {
  /** Sample name (a histogram's samples end in `_bucket`, `_sum` or `_count`). */
  name: string;
  /** Labels in order of appearance. */
  labels: [string, string][];
  /** The value as written (`1`, `0.25`, `+Inf`, `NaN`). */
  value: string;
  /** Optional timestamp in milliseconds, as written. */
  timestamp?: string;
}

/** A metric family: its HELP, TYPE and samples. */
export interface MetricFamily {
  /** Family name (as on the TYPE line). */
  name: string;
  /** HELP text (unescaped). */
  help: string;
  /** TYPE. */
  type: MetricType;
  /** Samples in order. */
  samples: Sample[];
}

/**
 * Formats a number the way Prometheus clients do (`+Inf`, `-Inf`, `NaN`, shortest decimal).
 *
 * @param v the value
 * @returns its text form
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { formatValue } from "@skiff/shim/ops";
 * strictEqual(formatValue(Infinity), "+Inf");
 * strictEqual(formatValue(0.5), "0.5");
 * ```
 */
export function formatValue(v: number): string {
  if (Number.isNaN(v)) return "NaN";
  if (v === Infinity) return "+Inf";
  if (v === -Infinity) return "-Inf";
  return String(v);
}

function escapeLabelValue(v: string): string {
  return v.replaceAll("\\", "\\\\").replaceAll('"', '\\"').replaceAll("\n", "\\n");
}

function escapeHelp(v: string): string {
  return v.replaceAll("\\", "\\\\").replaceAll("\n", "\\n");
}

function checkName(name: string): void {
  if (!METRIC_NAME.test(name)) throw new TypeError(`invalid metric name "${name}"`);
}

function checkLabelNames(metric: string, names: readonly string[]): void {
  for (const n of names) {
    if (!LABEL_NAME.test(n) || n.startsWith("__")) {
      throw new TypeError(`invalid label name "${n}" for metric "${metric}"`);
    }
  }
  if (new Set(names).size !== names.length) {
    throw new TypeError(`duplicate label names for metric "${metric}"`);
  }
}

/**
 * The series of one metric, keyed by label values. Shared by the three kinds through
 * composition, so their state stays in `#private` fields.
 */
class SeriesTable<S> {
  readonly name: string;
  readonly labelNames: readonly string[];
  #series = new Map<string, { values: string[]; state: S }>();

  constructor(opts: MetricOptions) {
    checkName(opts.name);
    this.name = opts.name;
    this.labelNames = opts.labelNames ?? [];
    checkLabelNames(opts.name, this.labelNames);
  }

  entry(labels: Labels | undefined, init: () => S): { values: string[]; state: S } {
    const values = this.labelNames.map((n) => {
      const v = labels?.[n];
      if (v === undefined) throw new TypeError(`metric "${this.name}" needs label "${n}"`);
      return v;
    });
    for (const k of Object.keys(labels ?? {})) {
      if (!this.labelNames.includes(k)) {
        throw new TypeError(`metric "${this.name}" has no label "${k}"`);
      }
    }
    // NUL cannot appear in a label value Prometheus accepts, so it separates keys safely.
    const key = values.join("\0");
    let e = this.#series.get(key);
    if (!e) {
      e = { values, state: init() };
      this.#series.set(key, e);
    }
    return e;
  }

  all(): { values: string[]; state: S }[] {
    return [...this.#series.values()];
  }

  pairs(values: string[], extra?: [string, string]): [string, string][] {
    const out: [string, string][] = this.labelNames.map((n, i) => [n, values[i]!]);
    if (extra) out.push(extra);
    return out;
  }
}

/** A counter or gauge: one number per series, or a value read at scrape time. */
class ValueTable extends SeriesTable<{ v: number }> {
  readonly read: (() => number) | undefined;

  constructor(opts: ReadMetricOptions) {
    super(opts);
    if (opts.read && this.labelNames.length > 0) {
      throw new TypeError(`metric "${opts.name}": read() works for unlabelled metrics only`);
    }
    this.read = opts.read;
  }

  get(labels?: Labels): number {
    return this.read ? this.read() : this.entry(labels, () => ({ v: 0 })).state.v;
  }

  samples(): Sample[] {
    if (this.read) return [{ name: this.name, labels: [], value: formatValue(this.read()) }];
    return this.all().map((e) => ({
      name: this.name,
      labels: this.pairs(e.values),
      value: formatValue(e.state.v),
    }));
  }
}

/**
 * A monotonically increasing count.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { MetricsRegistry } from "@skiff/shim/ops";
 * const r = new MetricsRegistry();
 * const c = r.counter({ name: "x_total", help: "Xs.", labelNames: ["result"] });
 * c.inc({ result: "ok" });
 * strictEqual(c.get({ result: "ok" }), 1);
 * ```
 */
export class Counter {
  /** Metric name. */
  readonly name: string;
  /** HELP text. */
  readonly help: string;
  #t: ValueTable;

  /** Declares a counter (use {@linkcode MetricsRegistry.counter}). */
  constructor(opts: ReadMetricOptions) {
    this.#t = new ValueTable(opts);
    this.name = opts.name;
    this.help = opts.help;
  }

  /** Adds `by` (default 1, never negative) to the series with these labels. */
  inc(labels?: Labels, by = 1): void {
    if (!(by >= 0)) throw new RangeError(`counter "${this.name}" cannot change by ${by}`);
    this.#t.entry(labels, () => ({ v: 0 })).state.v += by;
  }

  /** The current value of a series (0 when it was never incremented). */
  get(labels?: Labels): number {
    return this.#t.get(labels);
  }

  /** The family with its samples, for rendering. */
  family(): MetricFamily {
    return { name: this.name, help: this.help, type: "counter", samples: this.#t.samples() };
  }
}

/**
 * A value that goes up and down.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { MetricsRegistry } from "@skiff/shim/ops";
 * const r = new MetricsRegistry();
 * let n = 3;
 * r.gauge({ name: "things", help: "Things.", read: () => n });
 * strictEqual(r.render().includes("things 3\n"), true);
 * ```
 */
export class Gauge {
  /** Metric name. */
  readonly name: string;
  /** HELP text. */
  readonly help: string;
  #t: ValueTable;

  /** Declares a gauge (use {@linkcode MetricsRegistry.gauge}). */
  constructor(opts: ReadMetricOptions) {
    this.#t = new ValueTable(opts);
    this.name = opts.name;
    this.help = opts.help;
  }

  /** Sets a series. */
  set(labels: Labels | undefined, v: number): void {
    this.#t.entry(labels, () => ({ v: 0 })).state.v = v;
  }

  /** The current value of a series. */
  get(labels?: Labels): number {
    return this.#t.get(labels);
  }

  /** The family with its samples, for rendering. */
  family(): MetricFamily {
    return { name: this.name, help: this.help, type: "gauge", samples: this.#t.samples() };
  }
}

/**
 * A histogram with fixed buckets: cumulative `_bucket{le=…}`, `_sum` and `_count`.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { MetricsRegistry } from "@skiff/shim/ops";
 * const r = new MetricsRegistry();
 * const h = r.histogram({ name: "d_seconds", help: "D.", buckets: [0.1, 1] });
 * h.observe(undefined, 0.5);
 * strictEqual(r.render().includes('d_seconds_bucket{le="1"} 1\n'), true);
 * ```
 */
export class Histogram {
  /** Metric name. */
  readonly name: string;
  /** HELP text. */
  readonly help: string;
  /** Upper bounds (without `+Inf`). */
  readonly buckets: readonly number[];
  #t: SeriesTable<{ counts: number[]; sum: number; count: number }>;

  /** Declares a histogram (use {@linkcode MetricsRegistry.histogram}). */
  constructor(opts: HistogramOptions) {
    this.#t = new SeriesTable(opts);
    if (this.#t.labelNames.includes("le")) {
      throw new TypeError(`histogram "${opts.name}" cannot have a label named "le"`);
    }
    const b = opts.buckets ?? DEFAULT_BUCKETS;
    for (let i = 0; i < b.length; i++) {
      if (!Number.isFinite(b[i]!) || (i > 0 && b[i]! <= b[i - 1]!)) {
        throw new RangeError(`histogram "${opts.name}": buckets must be finite and increasing`);
      }
    }
    this.name = opts.name;
    this.help = opts.help;
    this.buckets = [...b];
  }

  #state(labels: Labels | undefined): { counts: number[]; sum: number; count: number } {
    return this.#t.entry(labels, () => ({
      counts: new Array(this.buckets.length).fill(0),
      sum: 0,
      count: 0,
    })).state;
  }

  /** Records one observation. */
  observe(labels: Labels | undefined, v: number): void {
    const s = this.#state(labels);
    // Stored per bucket and made cumulative when rendered.
    const i = this.buckets.findIndex((b) => v <= b);
    if (i >= 0) s.counts[i]!++;
    s.sum += v;
    s.count++;
  }

  /** Observation count of a series. */
  count(labels?: Labels): number {
    return this.#state(labels).count;
  }

  /** The family with its samples, for rendering. */
  family(): MetricFamily {
    const samples: Sample[] = [];
    for (const e of this.#t.all()) {
      let cum = 0;
      this.buckets.forEach((b, i) => {
        cum += e.state.counts[i] ?? 0;
        samples.push({
          name: `${this.name}_bucket`,
          labels: this.#t.pairs(e.values, ["le", formatValue(b)]),
          value: String(cum),
        });
      });
      samples.push({
        name: `${this.name}_bucket`,
        labels: this.#t.pairs(e.values, ["le", "+Inf"]),
        value: String(e.state.count),
      });
      samples.push({
        name: `${this.name}_sum`,
        labels: this.#t.pairs(e.values),
        value: formatValue(e.state.sum),
      });
      samples.push({
        name: `${this.name}_count`,
        labels: this.#t.pairs(e.values),
        value: String(e.state.count),
      });
    }
    return { name: this.name, help: this.help, type: "histogram", samples };
  }
}

/**
 * Holds metrics in registration order and renders them.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { MetricsRegistry } from "@skiff/shim/ops";
 * const r = new MetricsRegistry();
 * r.counter({ name: "jobs_total", help: "Jobs run." }).inc();
 * strictEqual(r.render(), "# HELP jobs_total Jobs run.\n# TYPE jobs_total counter\njobs_total 1\n");
 * ```
 */
export class MetricsRegistry {
  #metrics = new Map<string, Counter | Gauge | Histogram>();

  #add<M extends Counter | Gauge | Histogram>(m: M): M {
    if (this.#metrics.has(m.name)) {
      throw new TypeError(`metric "${m.name}" is already registered`);
    }
    this.#metrics.set(m.name, m);
    return m;
  }

  /** Registers a counter. */
  counter(opts: ReadMetricOptions): Counter {
    return this.#add(new Counter(opts));
  }

  /** Registers a gauge. */
  gauge(opts: ReadMetricOptions): Gauge {
    return this.#add(new Gauge(opts));
  }

  /** Registers a histogram. */
  histogram(opts: HistogramOptions): Histogram {
    return this.#add(new Histogram(opts));
  }

  /** The families, in registration order. */
  families(): MetricFamily[] {
    return [...this.#metrics.values()].map((m) => m.family());
  }

  /** The text exposition of every metric. */
  render(): string {
    return renderExposition(this.families());
  }
}

/**
 * Renders families in the text exposition format (HELP and TYPE lines, then samples). A
 * family without samples still gets its HELP and TYPE, so dashboards see that it exists.
 *
 * @param families what to render
 * @returns the text, ending in a newline (empty for no families)
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { renderExposition } from "@skiff/shim/ops";
 * const t = renderExposition([{ name: "up", help: "Up.", type: "gauge", samples: [
 *   { name: "up", labels: [["job", "a\"b"]], value: "1" }] }]);
 * strictEqual(t.endsWith('up{job="a\\"b"} 1\n'), true);
 * ```
 */
export function renderExposition(families: readonly MetricFamily[]): string {
  let out = "";
  for (const f of families) {
    out += `# HELP ${f.name} ${escapeHelp(f.help)}\n# TYPE ${f.name} ${f.type}\n`;
    for (const s of f.samples) {
      const labels = s.labels.length === 0
        ? ""
        : `{${s.labels.map(([k, v]) => `${k}="${escapeLabelValue(v)}"`).join(",")}}`;
      out += `${s.name}${labels} ${s.value}${s.timestamp ? ` ${s.timestamp}` : ""}\n`;
    }
  }
  return out;
}

const TYPES = new Set<MetricType>(["counter", "gauge", "histogram", "summary", "untyped"]);

function familyOf(sample: string, families: Map<string, MetricFamily>): MetricFamily | undefined {
  const f = families.get(sample);
  if (f) return f;
  for (const suffix of ["_bucket", "_sum", "_count"]) {
    if (!sample.endsWith(suffix)) continue;
    const base = families.get(sample.slice(0, -suffix.length));
    if (base && (base.type === "histogram" || base.type === "summary")) return base;
  }
  return undefined;
}

function parseLabels(
  s: string,
  at: number,
  line: string,
): { labels: [string, string][]; end: number } {
  const labels: [string, string][] = [];
  let i = at + 1;
  const fail = (why: string): never => {
    throw new SyntaxError(`invalid exposition line: ${why}: ${JSON.stringify(line)}`);
  };
  for (;;) {
    while (s[i] === " ") i++;
    if (s[i] === "}") return { labels, end: i + 1 };
    const m = /^[a-zA-Z_][a-zA-Z0-9_]*/.exec(s.slice(i));
    if (!m) fail("bad label name");
    const name = m![0];
    i += name.length;
    if (s[i] !== "=" || s[i + 1] !== '"') fail(`label "${name}" lacks ="value"`);
    i += 2;
    let v = "";
    for (;;) {
      const ch = s[i];
      if (ch === undefined) fail("unterminated label value");
      if (ch === '"') break;
      if (ch === "\\") {
        const n = s[i + 1];
        v += n === "n" ? "\n" : n === '"' ? '"' : n === "\\" ? "\\" : fail("bad escape");
        i += 2;
        continue;
      }
      v += ch;
      i++;
    }
    i++;
    labels.push([name, v]);
    while (s[i] === " ") i++;
    if (s[i] === ",") i++;
    else if (s[i] !== "}") fail("expected , or }");
  }
}

/**
 * Parses the text exposition format into families. Samples are attached to the family their
 * name belongs to (`x_bucket` to histogram `x`); samples with no TYPE line form `untyped`
 * families of their own.
 *
 * @param text an exposition, as served on `/metrics`
 * @returns the families in order of first appearance
 * @throws {SyntaxError} on a malformed line
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { parseExposition } from "@skiff/shim/ops";
 * const [f] = parseExposition('# TYPE up gauge\nup{job="a"} 1\n');
 * strictEqual(f.type, "gauge");
 * strictEqual(f.samples[0].labels[0][1], "a");
 * ```
 */
export function parseExposition(text: string): MetricFamily[] {
  const families = new Map<string, MetricFamily>();
  const get = (name: string): MetricFamily => {
    let f = families.get(name);
    if (!f) {
      f = { name, help: "", type: "untyped", samples: [] };
      families.set(name, f);
    }
    return f;
  };
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line === "") continue;
    if (line.startsWith("#")) {
      const m = /^#\s+(HELP|TYPE)\s+([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\s(.*))?$/.exec(line);
      if (!m) continue; // other comments carry nothing
      const f = get(m[2]!);
      if (m[1] === "HELP") {
        f.help = (m[3] ?? "").replace(/\\(n|\\)/g, (_, c: string) => c === "n" ? "\n" : "\\");
      } else {
        const t = (m[3] ?? "").trim() as MetricType;
        if (!TYPES.has(t)) throw new SyntaxError(`unknown metric type "${t}" for "${m[2]}"`);
        f.type = t;
      }
      continue;
    }
    const nm = /^[a-zA-Z_:][a-zA-Z0-9_:]*/.exec(line);
    if (!nm) throw new SyntaxError(`invalid exposition line: ${JSON.stringify(line)}`);
    const name = nm[0];
    let i = name.length;
    let labels: [string, string][] = [];
    if (line[i] === "{") {
      const p = parseLabels(line, i, line);
      labels = p.labels;
      i = p.end;
    }
    const rest = line.slice(i).trim().split(/\s+/);
    const value = rest[0];
    if (!value || !/^([+-]?Inf|NaN|[+-]?[0-9.eE+-]+)$/.test(value) || rest.length > 2) {
      throw new SyntaxError(`invalid sample value in line: ${JSON.stringify(line)}`);
    }
    const sample: Sample = { name, labels, value };
    if (rest[1]) sample.timestamp = rest[1];
    (familyOf(name, families) ?? get(name)).samples.push(sample);
  }
  return [...families.values()];
}
