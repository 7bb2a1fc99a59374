/**
 * A private containerd per test: its own root, state, sockets, config and log in a temp dir,
 * so tests never touch (or depend on) a system-wide containerd.
 *
 * @example Usage
 * ```ts ignore
 * import { containerdVersions, startContainerd } from "@skiff/shim/testing";
 *
 * for (const { version, binDir } of containerdVersions()) {
 *   const c = await startContainerd({ binDir });
 *   try {
 *     const ref = await c.importBusyboxImage("test");
 *     console.log(version, ref);
 *   } finally {
 *     await c.stop();
 *   }
 * }
 * ```
 *
 * @module
 */
// long: one concept: a private containerd's lifecycle (the PrivateContainerd class, ~520 lines,
// with start, import, ctr, stop and sweep); versions and the process table live in
// containerd_versions.ts and processes.ts

import { parse as parseToml, stringify as stringifyToml } from "smol-toml";
import { mountsUnder, removeTree } from "./bundle.ts";
import { buildBusyboxImage, buildPauseImage, BUSYBOX_IMAGE_REF, PAUSE_IMAGE_REF } from "./image.ts";
import { type CriHandler, criPlugins, criRuntimePlugin } from "./cri_config.ts";
import { CRI_NAMESPACE, criClient } from "./cri_client.ts";
import { spareDir } from "../shim/spare/mod.ts";
import { compareVersions, containerdVersionOf, overlaySupported } from "./containerd_versions.ts";
import { descendantsOf, kill, processesWithArg, sleep, waitGone } from "./processes.ts";

export {
  type ContainerdVersion,
  containerdVersionOf,
  containerdVersions,
  overlaySupported,
  skiffCacheDir,
} from "./containerd_versions.ts";

/**
 * A runtime a private containerd should know about.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { RuntimeConfig } from "./containerd.ts";
 * const r: RuntimeConfig = {
 *   runtimeType: "io.containerd.skiff-runc.v2",
 *   binaryDir: "/usr/local/bin", // holds containerd-shim-skiff-runc-v2
 *   options: (c) => ({ Root: c.runcRoot }), // CRI's table may name the instance's dirs
 * };
 * strictEqual(typeof r.options, "function");
 * ```
 */
export interface RuntimeConfig {
  /** Directory holding the `containerd-shim-<name>-<ver>` binary; put on containerd's PATH. */
  binaryDir?: string;
  /** Runtime type, e.g. `io.containerd.skiff-runc.v2`. */
  runtimeType: string;
  /**
   * Options written to the CRI runtime table (used only when CRI is enabled). A function gets
   * the instance, so options can name its private dirs (e.g. `Root: c.runcRoot`).
   */
  options?: Record<string, unknown> | ((c: PrivateContainerd) => Record<string, unknown>);
  /** CRI's `sandboxer` for this handler (2.x; `"shim"`: the Sandbox API). Default `podsandbox`. */
  sandboxer?: string;
}

/**
 * Options of a private containerd's CRI plugin ({@linkcode StartContainerdOptions.cri}). The
 * runtime handlers are the instance's `runtimes` (name → `runtime_type` and `options`).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { CriSetup } from "./containerd.ts";
 * const cri: CriSetup = { defaultHandler: "runc" };
 * strictEqual(cri.sandboxImage, undefined); // the locally built pause image
 * ```
 */
export interface CriSetup {
  /**
   * The sandbox (pause) image, already imported into {@linkcode CRI_NAMESPACE} by the caller.
   * Default: {@linkcode PAUSE_IMAGE_REF}, built locally and imported at start.
   */
  sandboxImage?: string;
  /** Handler of pods that name none. Default: containerd's own default (`runc`). */
  defaultHandler?: string;
  /** `restrict_oom_score_adj`. Default true (needed without CAP_SYS_RESOURCE). */
  restrictOomScoreAdj?: boolean;
}

/**
 * Options of {@linkcode startContainerd}.
 *
 * @example Usage
 * ```ts ignore
 * const c = await startContainerd({ binDir: "/usr/bin", debug: true, snapshotter: "native" });
 * ```
 */
export interface StartContainerdOptions {
  /** Directory with `containerd`, `ctr` and `containerd-shim-runc-v2` of one version. */
  binDir: string;
  /** Named runtimes: their `binaryDir`s go on PATH; `ctrRun` maps names to runtime types. */
  runtimes?: Record<string, RuntimeConfig>;
  /** Directories put first on containerd's PATH (where shim launchers live). */
  extraPath?: string[];
  /** Log at debug level (containerd then also passes `-debug` to shims). */
  debug?: boolean;
  /** TOML merged over the generated config (tables merge, arrays and values replace). */
  configToml?: string;
  /** Snapshotter for images and containers. Default: `overlayfs` when it mounts here, else `native`. */
  snapshotter?: string;
  /** Parent of the private temp dir. Default: the system temp dir. */
  tmpDir?: string;
  /** Extra environment for containerd (and so for the shims it starts). */
  env?: Record<string, string>;
  /**
   * Enable CRI (Kubernetes' runtime API, on the gRPC socket) with `runtimes` as its handlers.
   * CNI stays unconfigured (private, empty dirs): only host-network pods can run.
   */
  cri?: CriSetup;
}

/**
 * Options of {@linkcode PrivateContainerd.ctr}.
 *
 * @example Usage
 * ```ts ignore
 * await c.ctr(["tasks", "ls"], { namespace: "test", timeoutMs: 10_000 });
 * ```
 */
export interface CtrOptions {
  /** containerd namespace (`ctr -n`). Default: ctr's own default. */
  namespace?: string;
  /** Data written to ctr's stdin (stdin is /dev/null otherwise). */
  stdin?: string | Uint8Array;
  /** Kill ctr after this long. Default 120000. */
  timeoutMs?: number;
  /** Extra environment for ctr. */
  env?: Record<string, string>;
}

/**
 * What a ctr invocation did.
 *
 * @example Usage
 * ```ts ignore
 * const { code, stdout }: CtrResult = await c.ctr(["version"]);
 * ```
 */
export interface CtrResult {
  /** Exit code (for `ctr run --rm`, the container's exit status). */
  code: number;
  /** Standard output. */
  stdout: string;
  /** Standard error. */
  stderr: string;
  /** True when ctr was killed because it exceeded `timeoutMs`. */
  timedOut: boolean;
}

const dec = new TextDecoder();
/** How long a killed shim's processes may take to end on their own (a VM watchdog polls 2 s). */
const ORPHAN_GRACE_MS = 6_000;

async function sha256Hex(text: string): Promise<string> {
  const h = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)));
  return Array.from(h, (b) => b.toString(16).padStart(2, "0")).join("");
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v) && !(v instanceof Date);
}

function deepMerge(base: Record<string, unknown>, over: Record<string, unknown>): void {
  for (const [k, v] of Object.entries(over)) {
    const b = base[k];
    if (isPlainObject(b) && isPlainObject(v)) deepMerge(b, v);
    else base[k] = v;
  }
}

/**
 * A containerd started by {@linkcode startContainerd}. Everything it owns lives under
 * {@linkcode PrivateContainerd.dir}; {@linkcode PrivateContainerd.stop} removes all of it.
 *
 * @example Usage
 * ```ts ignore
 * const c = await startContainerd({ binDir: "/usr/bin" });
 * const { stdout } = await c.ctr(["version"]);
 * await c.stop();
 * ```
 */
export class PrivateContainerd {
  /** The private temp dir holding everything below. */
  readonly dir: string;
  /** gRPC socket path (ctr's `-a`, the shims' `-address`). */
  readonly address: string;
  /** ttrpc socket path (the shims' `TTRPC_ADDRESS`, where events are forwarded). */
  readonly ttrpcAddress: string;
  /** containerd `root`. */
  readonly root: string;
  /** containerd `state` (bundles live in `<state>/io.containerd.runtime.v2.task/<ns>/<id>`). */
  readonly state: string;
  /** containerd version, e.g. `1.6.20`. */
  readonly version: string;
  /** The binary dir this containerd and its ctr come from. */
  readonly binDir: string;
  /** The generated config file. */
  readonly configPath: string;
  /** containerd's log file (stdout and stderr). */
  readonly logPath: string;
  /** Snapshotter used for images and containers. */
  readonly snapshotter: string;
  /** Private runc root for the Go runc shim (`ctr run --runc-root`). */
  readonly runcRoot: string;
  /** Private FIFO dir for ctr (`ctr run --fifo-dir`). */
  readonly fifoDir: string;
  /** The runtimes given to {@linkcode startContainerd}. */
  readonly runtimes: Record<string, RuntimeConfig>;
  /** The environment containerd runs with. */
  readonly env: Record<string, string>;
  #child: Deno.ChildProcess | undefined;
  #stopped = false;
  #finalLog: string | undefined;
  #seen = new Set<string>(); // "ns/id" of every container listed before shutdown

  /**
   * Use {@linkcode startContainerd}; the constructor only records paths.
   *
   * @param init the paths and settings of this instance
   */
  constructor(init: {
    dir: string;
    version: string;
    binDir: string;
    snapshotter: string;
    runtimes: Record<string, RuntimeConfig>;
    env: Record<string, string>;
  }) {
    this.dir = init.dir;
    this.address = `${init.dir}/containerd.sock`;
    this.ttrpcAddress = `${init.dir}/containerd.sock.ttrpc`;
    this.root = `${init.dir}/root`;
    this.state = `${init.dir}/state`;
    this.configPath = `${init.dir}/config.toml`;
    this.logPath = `${init.dir}/containerd.log`;
    this.runcRoot = `${init.dir}/runc`;
    this.fifoDir = `${init.dir}/fifo`;
    this.version = init.version;
    this.binDir = init.binDir;
    this.snapshotter = init.snapshotter;
    this.runtimes = init.runtimes;
    this.env = init.env;
  }

  /**
   * A cgroup parent unique to this instance (`skiff-<dir name>`); `ctrRun` puts containers in
   * `/<cgroupParent>/<ns>/<id>` so concurrent containerds never share a cgroup, and
   * {@linkcode PrivateContainerd.stop} removes the tree.
   *
   * @example Usage
   * ```ts
   * import { strictEqual } from "node:assert/strict";
   * import { PrivateContainerd } from "./containerd.ts";
   * // An instance that was never started (startContainerd makes and starts one).
   * const c = new PrivateContainerd({
   *   dir: "/tmp/skiff-ctrd-ab12",
   *   version: "2.1.9",
   *   binDir: "/root/.cache/skiff/containerd-v2.1.9/bin",
   *   snapshotter: "native",
   *   runtimes: {},
   *   env: {},
   * });
   * const memory = `/sys/fs/cgroup/memory/${c.cgroupParent}/test/my-id`;
   * strictEqual(memory, "/sys/fs/cgroup/memory/skiff-skiff-ctrd-ab12/test/my-id");
   * ```
   */
  get cgroupParent(): string {
    return `skiff-${this.dir.slice(this.dir.lastIndexOf("/") + 1)}`;
  }

  /**
   * The major version (1 or 2).
   *
   * @example Usage
   * ```ts
   * import { strictEqual } from "node:assert/strict";
   * import { PrivateContainerd } from "./containerd.ts";
   * // An instance that was never started (startContainerd makes and starts one).
   * const c = new PrivateContainerd({
   *   dir: "/tmp/skiff-ctrd-ab12",
   *   version: "2.1.9",
   *   binDir: "/root/.cache/skiff/containerd-v2.1.9/bin",
   *   snapshotter: "native",
   *   runtimes: {},
   *   env: {},
   * });
   * const configVersion = c.major >= 2 ? 3 : 2;
   * strictEqual(configVersion, 3);
   * ```
   */
  get major(): number {
    return Number(this.version.split(".")[0]);
  }

  /**
   * pid of the running containerd, or undefined when it is not running.
   *
   * @example Usage
   * ```ts ignore
   * if (c.pid) Deno.kill(c.pid, "SIGHUP");
   * ```
   */
  get pid(): number | undefined {
    return this.#child?.pid;
  }

  /**
   * Starts the containerd process and waits until its gRPC socket accepts connections.
   * Called by {@linkcode startContainerd} and {@linkcode PrivateContainerd.restart}.
   *
   * @example Usage
   * ```ts ignore
   * await c.start(); // after a manual SIGKILL of c.pid
   * ```
   */
  async start(): Promise<void> {
    if (this.#child) throw new Error("containerd is already running");
    await Deno.writeTextFile(this.logPath, `--- start ${new Date().toISOString()}\n`, {
      append: true,
    });
    // Through sh so the log is a plain file that outlives the test's pipes.
    const child = new Deno.Command("/bin/sh", {
      args: [
        "-c",
        'exec "$0" --config "$1" >>"$2" 2>&1',
        `${this.binDir}/containerd`,
        this.configPath,
        this.logPath,
      ],
      env: this.env,
      clearEnv: true,
      stdin: "null",
      stdout: "null",
      stderr: "null",
    }).spawn();
    // A forgotten stop() must not keep the test runner alive.
    child.unref();
    this.#child = child;
    let exited = false;
    child.status.then(() => {
      exited = true;
      // A containerd that died (or was killed by the test) can be started again.
      if (this.#child === child) this.#child = undefined;
    });
    const until = Date.now() + 60_000;
    for (;;) {
      if (exited) {
        this.#child = undefined;
        throw new Error(`containerd ${this.version} exited at start:\n${await this.#tail()}`);
      }
      try {
        const conn = await Deno.connect({ transport: "unix", path: this.address });
        conn.close();
        return;
      } catch { /* not listening yet */ }
      if (Date.now() > until) {
        await this.#terminate();
        throw new Error(
          `containerd ${this.version} did not listen within 60s:\n${await this.#tail()}`,
        );
      }
      await sleep(25);
    }
  }

  async #tail(): Promise<string> {
    const log = await this.logs();
    return log.split("\n").slice(-30).join("\n");
  }

  /** `signal` (SIGTERM), then SIGKILL after 15 s; waits for the exit. */
  async #terminate(signal: Deno.Signal = "SIGTERM"): Promise<void> {
    const child = this.#child;
    if (!child) return;
    kill(child.pid, signal);
    const timer = setTimeout(() => kill(child.pid, "SIGKILL"), 15_000);
    try {
      await child.status;
    } finally {
      clearTimeout(timer);
      this.#child = undefined;
    }
  }

  /**
   * The environment every ctr of this instance runs with: `CONTAINERD_SNAPSHOTTER` =
   * {@linkcode PrivateContainerd.snapshotter}, and `CONTAINERD_SUPPRESS_DEPRECATION_WARNINGS=1`:
   * ctr 2.2+ otherwise asks the daemon for deprecations on every call and prints each as a
   * warning on stderr (on a cgroup v1 host always one, "The support for cgroup v1 is
   * deprecated"), which output assertions would read as the container's.
   *
   * @example Usage
   * ```ts ignore
   * new Deno.Command(`${c.binDir}/ctr`, { args: ["-a", c.address, "events"], env: c.ctrEnv });
   * ```
   */
  get ctrEnv(): Record<string, string> {
    return {
      CONTAINERD_SNAPSHOTTER: this.snapshotter,
      CONTAINERD_SUPPRESS_DEPRECATION_WARNINGS: "1",
    };
  }

  /**
   * Runs this version's ctr against this containerd (`ctr -a <address> [-n ns] ...args`), with
   * {@linkcode PrivateContainerd.ctrEnv} (the snapshotter; no deprecation warnings).
   *
   * @param args ctr arguments after the global flags
   * @param opts namespace, stdin, timeout
   * @returns exit code and output
   *
   * @example Usage
   * ```ts ignore
   * const r = await c.ctr(["images", "ls", "-q"], { namespace: "test" });
   * ```
   */
  async ctr(args: string[], opts: CtrOptions = {}): Promise<CtrResult> {
    const global = ["-a", this.address];
    if (opts.namespace) global.push("-n", opts.namespace);
    let timedOut = false;
    let kill: ReturnType<typeof setTimeout> | undefined;
    const child = new Deno.Command(`${this.binDir}/ctr`, {
      args: [...global, ...args],
      env: { ...this.ctrEnv, ...opts.env },
      stdin: opts.stdin === undefined ? "null" : "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    // `ctr run` forwards SIGTERM to the container instead of exiting: follow up with SIGKILL.
    const timer = setTimeout(() => {
      timedOut = true;
      try {
        child.kill("SIGTERM");
      } catch { /* gone */ }
      kill = setTimeout(() => {
        try {
          child.kill("SIGKILL");
        } catch { /* gone */ }
      }, 5_000);
    }, opts.timeoutMs ?? 120_000);
    try {
      if (opts.stdin !== undefined) {
        const w = child.stdin.getWriter();
        await w.write(
          typeof opts.stdin === "string" ? new TextEncoder().encode(opts.stdin) : opts.stdin,
        ).catch(() => undefined);
        await w.close().catch(() => undefined);
      }
      const out = await child.output();
      return {
        code: out.code,
        stdout: dec.decode(out.stdout),
        stderr: dec.decode(out.stderr),
        timedOut,
      };
    } finally {
      clearTimeout(timer);
      clearTimeout(kill);
    }
  }

  /**
   * Imports the busybox test image (see `buildBusyboxImage`) into a namespace and unpacks it.
   *
   * @param namespace containerd namespace
   * @returns the image reference, `localhost/skiff/busybox:latest` ({@linkcode BUSYBOX_IMAGE_REF})
   *
   * @example Usage
   * ```ts ignore
   * const ref = await c.importBusyboxImage("test");
   * await c.ctr(["run", "--rm", ref, "x", "echo", "hi"], { namespace: "test" });
   * ```
   */
  async importBusyboxImage(namespace: string): Promise<string> {
    const tar = await buildBusyboxImage();
    const r = await this.ctr(["images", "import", tar], { namespace });
    if (r.code !== 0) {
      throw new Error(`ctr images import failed (${r.code}): ${r.stderr}${r.stdout}`);
    }
    return BUSYBOX_IMAGE_REF;
  }

  /**
   * The log so far (after {@linkcode PrivateContainerd.stop}: the log as it was at stop).
   *
   * @returns containerd's stdout and stderr
   *
   * @example Usage
   * ```ts ignore
   * console.log(await c.logs());
   * ```
   */
  async logs(): Promise<string> {
    if (this.#finalLog !== undefined) return this.#finalLog;
    try {
      return await Deno.readTextFile(this.logPath);
    } catch {
      return "";
    }
  }

  /**
   * Shim processes this containerd started (their argv has `-address <this address>`), found
   * even after containerd itself is gone. A skiff warm spare that a `start` adopted is listed
   * with the argv a cold server of that `start` would have had (`-namespace`, `-id`, `-socket`,
   * from the bundle whose `shim.pid` names it); spares still waiting are not shims: see
   * {@linkcode PrivateContainerd.spares}.
   *
   * @returns pids and argv
   *
   * @example Usage
   * ```ts ignore
   * console.log(c.shims().map((s) => s.argv[0]));
   * ```
   */
  shims(): { pid: number; argv: string[] }[] {
    const out: { pid: number; argv: string[] }[] = [];
    let served: Map<number, { ns: string; id: string; socket: string }> | undefined;
    for (const p of this.#launched()) {
      const spare = p.argv.indexOf("-spare");
      if (spare === -1) {
        out.push(p);
        continue;
      }
      served ??= this.#bundlesByShimPid();
      const b = served.get(p.pid);
      if (!b) continue; // still waiting to be adopted
      const publish = p.argv.indexOf("-publish-binary");
      out.push({
        pid: p.pid,
        argv: [
          ...p.argv.slice(0, spare),
          ...["-namespace", b.ns, "-id", b.id, "-address", this.address],
          ...["-publish-binary", publish === -1 ? "" : p.argv[publish + 1], "-socket", b.socket],
        ],
      });
    }
    return out;
  }

  /**
   * skiff warm spare servers of this containerd that wait to be adopted (argv has `-spare`).
   *
   * @example Usage
   * ```ts ignore
   * console.log(c.spares().map((s) => s.pid));
   * ```
   */
  spares(): { pid: number; argv: string[] }[] {
    const adopted = this.#bundlesByShimPid();
    return this.#launched().filter((p) => p.argv.includes("-spare") && !adopted.has(p.pid));
  }

  /** Processes whose argv has `-address <this address>`, containerd itself excluded. */
  #launched(): { pid: number; argv: string[] }[] {
    const self = this.#child?.pid;
    return processesWithArg(this.address).filter((p) => {
      const i = p.argv.indexOf(this.address);
      return p.pid !== self && i > 0 && p.argv[i - 1] === "-address";
    });
  }

  /** Bundles whose `shim.pid` (written by `start`) names a server: pid → what it serves. */
  #bundlesByShimPid(): Map<number, { ns: string; id: string; socket: string }> {
    const out = new Map<number, { ns: string; id: string; socket: string }>();
    const top = `${this.state}/io.containerd.runtime.v2.task`;
    let namespaces: string[] = [];
    try {
      namespaces = [...Deno.readDirSync(top)].filter((e) => e.isDirectory).map((e) => e.name);
    } catch {
      return out;
    }
    for (const ns of namespaces) {
      let ids: string[] = [];
      try {
        ids = [...Deno.readDirSync(`${top}/${ns}`)].map((e) => e.name);
      } catch {
        continue;
      }
      for (const id of ids) {
        try {
          const pid = Number(Deno.readTextFileSync(`${top}/${ns}/${id}/shim.pid`).trim());
          const address = Deno.readTextFileSync(`${top}/${ns}/${id}/address`).trim();
          if (pid > 0) out.set(pid, { ns, id, socket: address.replace(/^unix:\/\//, "") });
        } catch { /* no server started for this bundle, or it is being removed */ }
      }
    }
    return out;
  }

  /**
   * Stops containerd, waits for it, and starts it again with the same dirs and config.
   * Running shims and containers are left alone, as on a real daemon restart.
   *
   * @param opts `signal`: how to stop it, `SIGTERM` (default, a clean shutdown) or `SIGKILL`
   *   (a crash)
   *
   * @example Usage
   * ```ts ignore
   * await c.restart();
   * await c.restart({ signal: "SIGKILL" });
   * ```
   */
  async restart(opts: { signal?: Deno.Signal } = {}): Promise<void> {
    if (this.#stopped) throw new Error("containerd was stopped");
    await this.#terminate(opts.signal);
    await this.start();
  }

  async #rememberContainers(): Promise<void> {
    const ns = await this.ctr(["namespaces", "ls", "-q"], { timeoutMs: 10_000 });
    for (const n of ns.stdout.split("\n").map((s) => s.trim()).filter(Boolean)) {
      const cs = await this.ctr(["containers", "ls", "-q"], { namespace: n, timeoutMs: 10_000 });
      for (const id of cs.stdout.split("\n").map((s) => s.trim()).filter(Boolean)) {
        this.#seen.add(`${n}/${id}`);
      }
    }
  }

  /**
   * Tears everything down: kills and deletes tasks through ctr, stops containerd, kills any
   * shim still serving this address (and its children), force-deletes containers left in the
   * private runc root, unmounts everything under {@linkcode PrivateContainerd.dir}, removes the
   * shims' sockets and the dir. Safe to call twice.
   *
   * @example Usage
   * ```ts ignore
   * await c.stop();
   * ```
   */
  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    if (this.#child) {
      try {
        await this.#rememberContainers();
        for (const key of this.#seen) {
          const [ns, id] = [key.slice(0, key.indexOf("/")), key.slice(key.indexOf("/") + 1)];
          await this.ctr(["tasks", "delete", "--force", id], { namespace: ns, timeoutMs: 15_000 });
          await this.ctr(["containers", "delete", id], { namespace: ns, timeoutMs: 15_000 });
        }
      } catch { /* best effort: the forced steps below still run */ }
      await this.#terminate();
    }
    // A containerd this object has no handle for (a stale instance being swept).
    const orphans = processesWithArg(this.configPath).map((p) => p.pid);
    for (const pid of orphans) kill(pid, "SIGKILL");
    await waitGone(orphans, 10_000);
    const shimProcs = this.shims();
    for (const s of shimProcs) {
      const ns = s.argv[s.argv.indexOf("-namespace") + 1];
      const id = s.argv[s.argv.indexOf("-id") + 1];
      if (ns && id) this.#seen.add(`${ns}/${id}`);
    }
    const shims = [...shimProcs, ...this.spares()].map((s) => s.pid);
    const descendants = descendantsOf(shims);
    // The shims first, their processes after a grace: a shim's watchdog (the VM example's)
    // then ends what the shim left and removes its mounts and state, which a SIGKILL of the
    // whole tree at once would leave behind.
    for (const pid of shims) kill(pid, "SIGKILL");
    await waitGone(shims, 10_000);
    if (!(await waitGone(descendants, ORPHAN_GRACE_MS))) {
      for (const pid of descendants) kill(pid, "SIGKILL");
      await waitGone(descendants, 10_000);
    }
    await this.#deleteRuncContainers();
    // The Go shims listen on /run/containerd/s/<sha256(address/ns/id)>; a killed one leaves it.
    for (const key of this.#seen) {
      const hex = await sha256Hex(`${this.address}/${key}`);
      await Deno.remove(`/run/containerd/s/${hex}`).catch(() => undefined);
      // skiff shims with the operations endpoint on also leave `<socket>.ops`.
      await Deno.remove(`/run/containerd/s/${hex}.ops`).catch(() => undefined);
    }
    // skiff's warm spares of this containerd: their sockets, locks and counters.
    await Deno.remove(spareDir(this.address), { recursive: true }).catch(() => undefined);
    await this.#removeCgroups();
    this.#finalLog = await this.logs();
    await removeTree(this.dir);
  }

  /** Removes the (now empty) cgroup dirs under {@linkcode PrivateContainerd.cgroupParent}. */
  async #removeCgroups(): Promise<void> {
    const info = await Deno.readTextFile("/proc/self/mountinfo");
    for (const line of info.split("\n")) {
      const [pre, post] = line.split(" - ");
      if (!pre || !post || !/^cgroup2? /.test(post)) continue;
      const top = `${pre.split(" ")[4]}/${this.cgroupParent}`;
      const dirs: string[] = [];
      const walk = (d: string) => {
        try {
          for (const e of Deno.readDirSync(d)) if (e.isDirectory) walk(`${d}/${e.name}`);
          dirs.push(d);
        } catch { /* missing in this hierarchy */ }
      };
      walk(top);
      // Children before parents; a cgroup dir is removed with rmdir even though it lists files.
      for (const d of dirs) await Deno.remove(d).catch(() => undefined);
    }
  }

  async #deleteRuncContainers(): Promise<void> {
    let namespaces: string[] = [];
    try {
      namespaces = [...Deno.readDirSync(this.runcRoot)].filter((e) => e.isDirectory)
        .map((e) => e.name);
    } catch {
      return;
    }
    for (const ns of namespaces) {
      const root = `${this.runcRoot}/${ns}`;
      const list = await new Deno.Command("runc", {
        args: ["--root", root, "list", "-q"],
        stdout: "piped",
        stderr: "null",
      }).output().catch(() => undefined);
      for (const id of dec.decode(list?.stdout ?? new Uint8Array()).split("\n").filter(Boolean)) {
        await new Deno.Command("runc", {
          args: ["--root", root, "delete", "--force", id],
          stdout: "null",
          stderr: "null",
        }).output().catch(() => undefined);
      }
    }
  }

  /**
   * Mount points under this containerd's dir (none should remain after a clean teardown).
   *
   * @returns absolute paths, deepest first
   *
   * @example Usage
   * ```ts ignore
   * console.log(await c.mounts());
   * ```
   */
  mounts(): Promise<string[]> {
    return mountsUnder(this.dir);
  }
}

/** Records which test process owns a private containerd dir: `<pid> <start time>`. */
const OWNER_FILE = "owner";

/** A process's start time (clock ticks since boot), which tells a reused pid apart. */
function startTime(pid: number): string | undefined {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19];
  } catch {
    return undefined;
  }
}

/**
 * Tears down private containerds whose test process died without calling `stop()` (a killed
 * test run): their containerd, shims, containers, mounts, cgroups and dirs. Instances of live
 * processes, and dirs without an owner record, are left alone. `startContainerd` calls this.
 *
 * @param tmpDir where the private dirs live. Default: the system temp dir
 * @returns the dirs that were swept
 *
 * @example Usage
 * ```ts
 * import { deepStrictEqual } from "node:assert/strict";
 * import { sweepStaleContainerds } from "./containerd.ts";
 * const tmp = await Deno.makeTempDir(); // the default is the system temp dir
 * await Deno.mkdir(`${tmp}/skiff-ctrd-x`); // no owner record: not ours to sweep
 * deepStrictEqual(await sweepStaleContainerds(tmp), []);
 * await Deno.remove(tmp, { recursive: true });
 * ```
 */
export async function sweepStaleContainerds(tmpDir?: string): Promise<string[]> {
  const base = tmpDir ?? Deno.env.get("TMPDIR") ?? "/tmp";
  const swept: string[] = [];
  for await (const e of Deno.readDir(base)) {
    if (!e.isDirectory || !e.name.startsWith("skiff-ctrd-")) continue;
    const dir = `${base}/${e.name}`;
    let owner: string;
    try {
      owner = await Deno.readTextFile(`${dir}/${OWNER_FILE}`);
    } catch {
      continue;
    }
    const [pid, started] = owner.trim().split(" ");
    if (pid && started && startTime(Number(pid)) === started) continue;
    const stale = new PrivateContainerd({
      dir,
      version: "0.0.0",
      binDir: "",
      snapshotter: "",
      runtimes: {},
      env: {},
    });
    await stale.stop();
    swept.push(dir);
  }
  return swept;
}

/** Plugins that reach outside the private dirs (CRI's CNI setup, NRI's socket, /opt). */
const DISABLED_PLUGINS: readonly string[] = [
  "io.containerd.grpc.v1.cri",
  "io.containerd.nri.v1.nri",
  "io.containerd.internal.v1.opt",
];

function platform(): string {
  const arch = Deno.build.arch === "x86_64"
    ? "amd64"
    : Deno.build.arch === "aarch64"
    ? "arm64"
    : Deno.build.arch;
  return `linux/${arch}`;
}

/**
 * Generates the config.toml object for a private containerd (before `configToml` is merged).
 * Version 2 format for containerd 1.x, version 3 for 2.x.
 *
 * @param c the instance whose paths go into the config
 * @param opts debug level and runtimes
 * @returns a TOML-ready object
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { containerdConfig, PrivateContainerd } from "./containerd.ts";
 * // An instance that was never started (startContainerd makes and starts one).
 * const c = new PrivateContainerd({
 *   dir: "/tmp/skiff-ctrd-ab12",
 *   version: "2.1.9",
 *   binDir: "/root/.cache/skiff/containerd-v2.1.9/bin",
 *   snapshotter: "native",
 *   runtimes: {},
 *   env: {},
 * });
 * const cfg = containerdConfig(c, { debug: true });
 * strictEqual(cfg.version, 3); // 2.x's config format
 * strictEqual(cfg.root, "/tmp/skiff-ctrd-ab12/root"); // everything inside the private dir
 * ```
 */
export function containerdConfig(
  c: PrivateContainerd,
  opts: { debug?: boolean; runtimes?: Record<string, RuntimeConfig>; cri?: CriSetup } = {},
): Record<string, unknown> {
  const v3 = c.major >= 2;
  const plugins: Record<string, unknown> = {};
  if (compareVersions(c.version, "1.7.0") >= 0) {
    // The transfer service (ctr import in 2.x) unpacks for this snapshotter.
    plugins["io.containerd.transfer.v1.local"] = {
      unpack_config: [{ platform: platform(), snapshotter: c.snapshotter }],
    };
  }
  const runtimes = Object.entries(opts.runtimes ?? {});
  if (opts.cri) {
    const handlers: Record<string, CriHandler> = {};
    for (const [name, r] of runtimes) {
      const options = typeof r.options === "function" ? r.options(c) : r.options;
      handlers[name] = {
        runtimeType: r.runtimeType,
        ...(r.sandboxer ? { sandboxer: r.sandboxer } : {}),
        ...(options ? { options } : {}),
      };
    }
    Object.assign(
      plugins,
      criPlugins(c.version, {
        sandboxImage: opts.cri.sandboxImage ?? PAUSE_IMAGE_REF,
        handlers,
        ...(opts.cri.defaultHandler ? { defaultHandler: opts.cri.defaultHandler } : {}),
        ...(opts.cri.restrictOomScoreAdj !== undefined
          ? { restrictOomScoreAdj: opts.cri.restrictOomScoreAdj }
          : {}),
      }),
    );
    // Private settings on top: this instance's snapshotter, and CNI dirs inside its own dir
    // (CRI watches the conf dir, creating it if missing; without a CNI config only
    // host-network pods run, which is all the tests need).
    const runtimePlugin = plugins[criRuntimePlugin(c.version)] as Record<string, unknown>;
    const cni = { conf_dir: `${c.dir}/cni/net.d` };
    if (v3) {
      (plugins["io.containerd.cri.v1.images"] as Record<string, unknown>).snapshotter =
        c.snapshotter;
      runtimePlugin.cni = { ...cni, bin_dirs: [`${c.dir}/cni/bin`] };
    } else {
      (runtimePlugin.containerd as Record<string, unknown>).snapshotter = c.snapshotter;
      runtimePlugin.cni = { ...cni, bin_dir: `${c.dir}/cni/bin` };
    }
  } else if (runtimes.length > 0) {
    const table: Record<string, unknown> = {};
    for (const [name, r] of runtimes) {
      const options = typeof r.options === "function" ? r.options(c) : r.options;
      table[name] = { runtime_type: r.runtimeType, ...(options ? { options } : {}) };
    }
    // Only CRI reads runtime tables; they matter once configToml re-enables CRI.
    plugins[v3 ? "io.containerd.cri.v1.runtime" : "io.containerd.grpc.v1.cri"] = {
      containerd: { runtimes: table },
    };
  }
  const cfg: Record<string, unknown> = {
    version: v3 ? 3 : 2,
    root: c.root,
    state: c.state,
    disabled_plugins: DISABLED_PLUGINS.filter((p) =>
      !(opts.cri && p === "io.containerd.grpc.v1.cri")
    ),
    grpc: { address: c.address },
    ttrpc: { address: c.ttrpcAddress },
    debug: { level: opts.debug ? "debug" : "info" },
  };
  if (Object.keys(plugins).length > 0) cfg.plugins = plugins;
  return cfg;
}

/**
 * Imports the locally built pause image into CRI's namespace and waits until CRI itself lists
 * it (CRI learns of images from containerd's events; a pod run before that would try to pull).
 */
async function importPauseImage(c: PrivateContainerd): Promise<void> {
  const tar = await buildPauseImage();
  const r = await c.ctr(["images", "import", tar], { namespace: CRI_NAMESPACE, timeoutMs: 60_000 });
  if (r.code !== 0) {
    throw new Error(`ctr -n ${CRI_NAMESPACE} images import ${tar} failed (${r.code}): ${r.stderr}`);
  }
  const cri = criClient(c.address);
  const until = Date.now() + 30_000;
  let last = "";
  for (;;) {
    try {
      const s = await cri.images.imageStatus({ image: { image: PAUSE_IMAGE_REF } }, {
        timeoutMs: 10_000,
      });
      if (s.image) return;
      last = "not listed";
    } catch (e) {
      last = (e as Error).message;
    }
    if (Date.now() > until) {
      throw new Error(`CRI of containerd ${c.version} never saw ${PAUSE_IMAGE_REF}: ${last}`);
    }
    await sleep(100);
  }
}

/**
 * Starts a private containerd of the version in `opts.binDir`, in a new temp dir with its own
 * root, state, gRPC and ttrpc sockets, config and log. NRI is disabled, and CRI unless
 * `opts.cri` is given (then the pause image is imported into `k8s.io` before this returns). Shim
 * binaries resolve from `extraPath`, the runtimes' `binaryDir`s, then `binDir`, then PATH.
 *
 * @param opts which containerd, extra PATH entries, runtimes, config overrides
 * @returns the running instance; call `stop()` in a `finally`
 *
 * @example Usage
 * ```ts ignore
 * const c = await startContainerd({ binDir: "/usr/bin", extraPath: ["/tmp/prefix/bin"] });
 * try {
 *   const ref = await c.importBusyboxImage("test");
 *   const r = await c.ctr(["run", "--rm", ref, "hello", "echo", "hello"], { namespace: "test" });
 *   console.log(r.stdout); // "hello\n"
 * } finally {
 *   await c.stop();
 * }
 * ```
 */
export async function startContainerd(opts: StartContainerdOptions): Promise<PrivateContainerd> {
  await sweepStaleContainerds(opts.tmpDir).catch(() => undefined);
  const binDir = await Deno.realPath(opts.binDir);
  const version = containerdVersionOf(binDir);
  if (!version) throw new Error(`no working containerd in "${binDir}"`);
  const dir = await Deno.realPath(
    await Deno.makeTempDir({ prefix: "skiff-ctrd-", ...(opts.tmpDir ? { dir: opts.tmpDir } : {}) }),
  );
  try {
    const snapshotter = opts.snapshotter ??
      (await overlaySupported(dir) ? "overlayfs" : "native");
    const runtimes = opts.runtimes ?? {};
    const path = [
      ...(opts.extraPath ?? []),
      ...Object.values(runtimes).flatMap((r) => r.binaryDir ? [r.binaryDir] : []),
      binDir,
      Deno.env.get("PATH") ?? "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    ].join(":");
    const env = { ...Deno.env.toObject(), ...opts.env, PATH: path };
    const c = new PrivateContainerd({ dir, version, binDir, snapshotter, runtimes, env });
    for (const d of [c.root, c.state, c.runcRoot, c.fifoDir]) await Deno.mkdir(d);
    await Deno.writeTextFile(`${dir}/${OWNER_FILE}`, `${Deno.pid} ${startTime(Deno.pid)}\n`);
    const cfg = containerdConfig(c, {
      ...(opts.debug !== undefined ? { debug: opts.debug } : {}),
      runtimes,
      ...(opts.cri ? { cri: opts.cri } : {}),
    });
    if (opts.configToml) deepMerge(cfg, parseToml(opts.configToml) as Record<string, unknown>);
    await Deno.writeTextFile(c.configPath, stringifyToml(cfg));
    await c.start();
    if (opts.cri && opts.cri.sandboxImage === undefined) {
      try {
        await importPauseImage(c);
      } catch (e) {
        await c.stop();
        throw e;
      }
    }
    return c;
  } catch (e) {
    await removeTree(dir);
    throw e;
  }
}
