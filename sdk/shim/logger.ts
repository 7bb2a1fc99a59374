/**
 * The shim's logger: logrus text format (what containerd's own logs look like), or JSON,
 * written to the bundle's `log` FIFO that containerd copies into its own log.
 *
 * Writes are queued and never block the caller; a full or vanished FIFO drops lines
 * rather than stalling an RPC.
 *
 * @module
 */

/** Log levels, ordered. */
export type LogLevel = "trace" | "debug" | "info" | "warn" | "error" | "fatal";

const rank: Record<LogLevel, number> = { trace: 0, debug: 1, info: 2, warn: 3, error: 4, fatal: 5 };

/** Output format of log lines. */
export type LogFormat = "text" | "json";

/** Structured fields attached to a line. */
export type LogFields = Record<string, string | number | boolean | undefined>;

/** Options for {@link Logger}. */
export interface LoggerOptions {
  /** Minimum level written; default "info". */
  level?: LogLevel;
  /** Line format; default "text" (logrus). */
  format?: LogFormat;
  /** Where lines go; default: nowhere until {@link Logger.setSink} is called. */
  sink?: (line: string) => void;
  /** Fields attached to every line (e.g. runtime, namespace, id). */
  fields?: LogFields;
}

/**
 * A small levelled logger with logrus-compatible output.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { Logger } from "@skiff/shim";
 * const lines: string[] = [];
 * const log = new Logger({ level: "debug", sink: (l) => lines.push(l) });
 * log.info("created", { id: "c1" });
 * strictEqual(lines[0].includes('level=info msg=created id=c1'), true);
 * ```
 */
export class Logger {
  // Children made by with() share this state, so level and sink changes reach them.
  #core: { level: LogLevel; format: LogFormat; sink: ((line: string) => void) | undefined };
  #fields: LogFields;

  /** Creates a logger. */
  constructor(opts: LoggerOptions = {}) {
    this.#core = { level: opts.level ?? "info", format: opts.format ?? "text", sink: opts.sink };
    this.#fields = opts.fields ?? {};
  }

  /** The current minimum level. */
  get level(): LogLevel {
    return this.#core.level;
  }

  /** Changes the minimum level (for this logger and every logger made from it). */
  setLevel(level: LogLevel): void {
    this.#core.level = level;
  }

  /** Changes the line format. */
  setFormat(format: LogFormat): void {
    this.#core.format = format;
  }

  /** Changes where lines go. */
  setSink(sink: (line: string) => void): void {
    this.#core.sink = sink;
  }

  /** True when lines at `level` are written (use it to skip building costly fields). */
  enabled(level: LogLevel): boolean {
    return this.#core.sink !== undefined && rank[level] >= rank[this.#core.level];
  }

  /** A logger that adds `fields` to every line and shares this one's sink and level. */
  with(fields: LogFields): Logger {
    const child = new Logger();
    child.#core = this.#core;
    child.#fields = { ...this.#fields, ...fields };
    return child;
  }

  /** Logs at trace level. */
  trace(msg: string, fields?: LogFields): void {
    this.#log("trace", msg, fields);
  }
  /** Logs at debug level. */
  debug(msg: string, fields?: LogFields): void {
    this.#log("debug", msg, fields);
  }
  /** Logs at info level. */
  info(msg: string, fields?: LogFields): void {
    this.#log("info", msg, fields);
  }
  /** Logs at warn level. */
  warn(msg: string, fields?: LogFields): void {
    this.#log("warn", msg, fields);
  }
  /** Logs at error level. */
  error(msg: string, fields?: LogFields): void {
    this.#log("error", msg, fields);
  }

  #log(level: LogLevel, msg: string, fields?: LogFields): void {
    if (!this.enabled(level)) return;
    const all: LogFields = { ...this.#fields, ...fields };
    this.#core.sink!(formatLogLine(this.#core.format, level, msg, all, new Date()) + "\n");
  }
}

/**
 * Formats one line, logrus text style (`time="…" level=info msg="…" k=v`) or JSON.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { formatLogLine } from "./logger.ts";
 * const l = formatLogLine("text", "warn", "a b", { id: "x" }, new Date(0));
 * strictEqual(l, 'time="1970-01-01T00:00:00.000Z" level=warning msg="a b" id=x');
 * ```
 */
export function formatLogLine(
  format: LogFormat,
  level: LogLevel,
  msg: string,
  fields: LogFields,
  time: Date,
): string {
  // logrus spells warn as "warning"; containerd parses these names.
  const lvl = level === "warn" ? "warning" : level;
  if (format === "json") {
    const obj: Record<string, unknown> = { time: time.toISOString(), level: lvl, msg };
    for (const [k, v] of Object.entries(fields)) if (v !== undefined) obj[k] = v;
    return JSON.stringify(obj);
  }
  let line = `time=${quote(time.toISOString())} level=${lvl} msg=${quote(msg)}`;
  for (const [k, v] of Object.entries(fields)) {
    if (v === undefined) continue;
    line += ` ${k}=${quote(String(v))}`;
  }
  return line;
}

function quote(s: string): string {
  // logrus quotes a value only when it contains characters outside this set.
  return /^[A-Za-z0-9\-._/@^+]+$/.test(s) ? s : JSON.stringify(s);
}
