/**
 * A private containerd: its own root, state, sockets, config and log in a temp dir, so tests
 * never touch (or depend on) a system-wide containerd. {@linkcode startContainerd}
 * (containerd.ts) makes and starts one; this class runs the process, its ctr, and tears
 * everything it owns down. The pieces it uses: ctr_command.ts (running ctr), containerd_shims.ts
 * (finding its shims), containerd_teardown.ts (what lives outside its dir).
 *
 * @module
 */

import { mountsUnder, removeTree } from "./bundle.ts";
import { buildBusyboxImage, BUSYBOX_IMAGE_REF } from "./image.ts";
import {
  ctrEnv,
  type CtrOptions,
  type CtrResult,
  DEFAULT_NAMESPACE,
  runCtr,
} from "./ctr_command.ts";
import { launchedBy, shimsAmong, sparesAmong } from "./containerd_shims.ts";
import {
  deleteRuncContainers,
  removeCgroupTree,
  removeShimSockets,
} from "./containerd_teardown.ts";
import { descendantsOf, kill, processesWithArg, sleep, waitGone } from "./processes.ts";

/** How long a killed shim's processes may take to end on their own (a VM watchdog polls 2 s). */
const ORPHAN_GRACE_MS = 6_000;

/**
 * A runtime a private containerd should know about.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { RuntimeConfig } from "@skiff/shim/testing";
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
   * import { PrivateContainerd } from "@skiff/shim/testing";
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
   * import { PrivateContainerd } from "@skiff/shim/testing";
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
    return ctrEnv(this.snapshotter);
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
   * const r = await c.ctr(["images", "ls", "-q"], { namespace: DEFAULT_NAMESPACE });
   * ```
   */
  ctr(args: string[], opts: CtrOptions = {}): Promise<CtrResult> {
    return runCtr(`${this.binDir}/ctr`, this.address, this.ctrEnv, args, opts);
  }

  /**
   * Imports the busybox test image (see `buildBusyboxImage`) into a namespace and unpacks it.
   *
   * @param namespace containerd namespace; default `skiff-test` ({@linkcode DEFAULT_NAMESPACE},
   *   where `ctrRun` and `ShimHarness` run too)
   * @returns the image reference, `localhost/skiff/busybox:latest` ({@linkcode BUSYBOX_IMAGE_REF})
   *
   * @example Usage
   * ```ts ignore
   * const image = await c.importBusyboxImage();
   * const r = await ctrRun(c, { image, id: "x", args: ["echo", "hi"] }); // the same namespace
   * ```
   */
  async importBusyboxImage(namespace: string = DEFAULT_NAMESPACE): Promise<string> {
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
    return shimsAmong(this.address, this.state, this.#launched());
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
    return sparesAmong(this.state, this.#launched());
  }

  /** Processes whose argv has `-address <this address>`, containerd itself excluded. */
  #launched(): { pid: number; argv: string[] }[] {
    return launchedBy(this.address, this.#child?.pid);
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
    await deleteRuncContainers(this.runcRoot);
    await removeShimSockets(this.address, this.#seen);
    await removeCgroupTree(this.cgroupParent);
    this.#finalLog = await this.logs();
    await removeTree(this.dir);
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
