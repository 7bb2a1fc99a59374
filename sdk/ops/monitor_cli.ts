/**
 * `deno task monitor`: the node monitor as a command.
 *
 * ```sh
 * deno run -A sdk/ops/monitor_cli.ts --listen 127.0.0.1:9464 --socket-dir /run/containerd/s
 * ```
 *
 * Flags: `--listen host:port` (default `127.0.0.1:9464`), `--socket-dir dir` (repeatable,
 * default `/run/containerd/s`), `--timeout ms` per shim (default 2000), `--namespace ns`
 * (repeatable: only these namespaces), `--allow-remote` (permit a non-loopback address).
 *
 * @module
 */

import { parseArgs } from "node:util";
import { DEFAULT_OPS_SOCKET_DIR, serveMonitor, type ServeMonitorOptions } from "./monitor.ts";

const USAGE = `usage: monitor [--listen 127.0.0.1:9464] [--socket-dir /run/containerd/s]...
               [--timeout 2000] [--namespace ns]... [--allow-remote]`;

/**
 * Parses the monitor's command line.
 *
 * @param argv the arguments
 * @returns options for `serveMonitor`
 * @throws {TypeError} naming the bad flag or value
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { parseMonitorArgs } from "@skiff/shim/ops";
 * const o = parseMonitorArgs(["--listen", "127.0.0.1:9000", "--namespace", "k8s.io"]);
 * strictEqual(o.port, 9000);
 * strictEqual(o.hostname, "127.0.0.1");
 * ```
 */
export function parseMonitorArgs(argv: string[]): ServeMonitorOptions {
  const { values } = parseArgs({
    args: argv,
    options: {
      listen: { type: "string", default: "127.0.0.1:9464" },
      "socket-dir": { type: "string", multiple: true },
      timeout: { type: "string", default: "2000" },
      namespace: { type: "string", multiple: true },
      "allow-remote": { type: "boolean", default: false },
    },
    strict: true,
    allowPositionals: false,
  });
  const m = /^(\[[^\]]+\]|[^:]+):(\d{1,5})$/.exec(values.listen);
  if (!m || Number(m[2]) > 65535) {
    throw new TypeError(`invalid --listen "${values.listen}": expected host:port`);
  }
  const timeoutMs = Number(values.timeout);
  if (!Number.isInteger(timeoutMs) || timeoutMs <= 0) {
    throw new TypeError(`invalid --timeout "${values.timeout}": expected milliseconds`);
  }
  const namespaces = values.namespace;
  return {
    hostname: m[1]!,
    port: Number(m[2]),
    socketDirs: values["socket-dir"] ?? [DEFAULT_OPS_SOCKET_DIR],
    timeoutMs,
    allowRemote: values["allow-remote"],
    ...(namespaces ? { filter: (s) => namespaces.includes(s.namespace) } : {}),
  };
}

if (import.meta.main) {
  let opts: ServeMonitorOptions;
  try {
    opts = parseMonitorArgs(Deno.args);
  } catch (e) {
    console.error(`monitor: ${(e as Error).message}\n${USAGE}`);
    Deno.exit(2);
  }
  try {
    const m = await serveMonitor(opts);
    console.log(`skiff monitor: ${m.url}/metrics (shims in ${opts.socketDirs!.join(", ")})`);
    Deno.addSignalListener("SIGTERM", () => void m.close().then(() => Deno.exit(0)));
    Deno.addSignalListener("SIGINT", () => void m.close().then(() => Deno.exit(0)));
  } catch (e) {
    console.error(`monitor: ${(e as Error).message}`);
    Deno.exit(1);
  }
}
