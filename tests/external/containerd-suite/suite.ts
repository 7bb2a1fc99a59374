/**
 * Runs containerd's own integration suite (package `integration/client` of the containerd
 * module, built by `tests/setup/build_containerd_suite.sh` at the version under test) against
 * one runtime: containerd's Go runc shim, or skiff's runc example. The tests that drive a
 * runtime are selected (see {@linkcode SUITE_FILES}); `go test -v` output is parsed into
 * per-test results.
 *
 * The suite starts its own containerd (its TestMain, without `-no-daemon`) from PATH, so the
 * tests that restart the daemon can run; that daemon is private (root
 * `/var/lib/containerd-test`, state and socket under `/run/containerd-test`) but those paths
 * are fixed, so runs are serialised with a lock file. Its images are the kit's busybox image,
 * pushed under every name the suite uses to a private registry on 127.0.0.1 (containerd's
 * resolver speaks plain HTTP to loopback hosts) and named in the suite's `-image-list` file:
 * nothing is pulled from outside the machine.
 *
 * @module
 */

import { containerdVersions, skiffCacheDir } from "../../../sdk/testing/containerd.ts";
import { installExampleShims } from "../../../sdk/install/examples.ts";
import { registryBinary, startRegistry } from "../../../sdk/testing/registry.ts";
import { buildSuiteImage, buildWhiteoutImage } from "./image.ts";
import type { LocalRegistry } from "../../../sdk/testing/registry.ts";

/** Which shim a run uses. */
export type SuiteShim = "go" | "skiff";

/** The runtime type of skiff's runc example. */
export const SKIFF_RUNTIME = "io.containerd.skiff-runc.v2";
/** The launcher name of skiff's runc example. */
export const SKIFF_LAUNCHER = "containerd-shim-skiff-runc-v2";

/**
 * The suite's source files whose tests are selected: the ones that create tasks and drive
 * them through a shim (run, exec, IO, kill, pause, update, checkpoint, OOM score, daemon
 * restart and reconnect, the restart monitor). Plus {@linkcode EXTRA_TESTS} from other files.
 */
export const SUITE_FILES: readonly string[] = [
  "container_test.go",
  "container_linux_test.go",
  "container_checkpoint_test.go",
  "restart_monitor_test.go",
];
/** Runtime tests outside {@linkcode SUITE_FILES}: the shim's `-info` action. */
export const EXTRA_TESTS: readonly string[] = ["TestRuntimeInfo"];

/** Outcome of one top-level test. */
export type Outcome = "pass" | "fail" | "skip";

/** One run of the suite against one runtime on one containerd version. */
export interface SuiteRun {
  /** containerd version, e.g. `2.4.2`. */
  version: string;
  /** The shim used. */
  shim: SuiteShim;
  /** Outcome per selected test that reported one (tests that never ran are absent). */
  results: Map<string, Outcome>;
  /** The selected tests. */
  selected: string[];
  /** Exit code of the test binary (null: killed at the time bound). */
  code: number | null;
  /** True when the run hit its time bound. */
  timedOut: boolean;
  /** Wall time of the run, ms. */
  ms: number;
  /** Path of the full `go test -v` output. */
  logPath: string;
  /** For each failed test, the last lines of its output. */
  failures: Map<string, string>;
}

/** Counts of a run. */
export interface SuiteCounts {
  passed: number;
  failed: number;
  skipped: number;
}

/**
 * Counts a run's outcomes; a selected test without an outcome (the binary died or hit its
 * bound first) counts as failed.
 */
export function countRun(run: SuiteRun): SuiteCounts {
  const c = { passed: 0, failed: 0, skipped: 0 };
  for (const name of run.selected) {
    const o = run.results.get(name);
    if (o === "pass") c.passed++;
    else if (o === "skip") c.skipped++;
    else c.failed++;
  }
  return c;
}

/** Where the build script puts a version's suite binaries. */
export function suiteDir(version: string): string {
  return `${skiffCacheDir()}/containerd-suite-v${version}`;
}

/** The containerd module's sources for a version (in Go's module cache after the build). */
export function suiteSources(version: string): string {
  const gomod = Deno.env.get("GOMODCACHE") ?? `${Deno.env.get("HOME") ?? "/root"}/go/pkg/mod`;
  return `${gomod}/github.com/containerd/containerd/v2@v${version}/integration/client`;
}

/**
 * Builds (or finds cached) the suite binaries of a version.
 *
 * @returns the dir holding `client.test` and `runc-fp`
 */
export async function buildSuite(version: string, timeoutMs = 20 * 60_000): Promise<string> {
  const script = new URL("../../setup/build_containerd_suite.sh", import.meta.url).pathname;
  const out = await new Deno.Command("timeout", {
    args: ["-k", "10s", `${Math.ceil(timeoutMs / 1000)}s`, "bash", script, version],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const dec = new TextDecoder();
  if (!out.success) {
    throw new Error(
      `build_containerd_suite.sh ${version} failed (${out.code}):\n` +
        dec.decode(out.stderr).split("\n").slice(-30).join("\n"),
    );
  }
  return suiteDir(version);
}

/**
 * The selected test names of a version: every `func TestX(t *testing.T)` in
 * {@linkcode SUITE_FILES} of that version's sources, plus {@linkcode EXTRA_TESTS}.
 */
export async function selectTests(version: string): Promise<string[]> {
  const dir = suiteSources(version);
  const names = new Set<string>();
  for (const f of SUITE_FILES) {
    let text: string;
    try {
      text = await Deno.readTextFile(`${dir}/${f}`);
    } catch {
      continue; // a file an older release does not have
    }
    for (const m of text.matchAll(/^func (Test\w+)\(t \*testing\.T\)/gm)) names.add(m[1]!);
  }
  if (names.size === 0) throw new Error(`no suite tests found in ${dir} (${SUITE_FILES})`);
  const all = await Deno.readTextFile(`${dir}/client_test.go`).catch(() => "");
  for (const t of EXTRA_TESTS) if (all.includes(`func ${t}(`)) names.add(t);
  return [...names].sort();
}

/**
 * The images the selected tests pull (`integration/images` defaults; the suite fixes them at
 * package init, so its `-image-list` flag cannot rename them), as registry host → repository
 * names. Each is served as the suite image of ./image.ts (`whiteout-test` with its two
 * whiteout layers on top). (`BusyBoxByDigest` names a digest of
 * the real image, which no local build can have; no selected test uses it.)
 */
export const SUITE_IMAGES: Record<string, readonly string[]> = {
  "ghcr.io": [
    "containerd/busybox:1.36",
    "containerd/alpine:3.14.0",
    "containerd/volume-copy-up:2.2",
    "containerd/volume-ownership:2.1",
    "containerd/nginx:1.27.0",
    "containerd/whiteout-test:1.0",
  ],
  "registry.k8s.io": [
    "pause:3.10.1",
    "pause:3.10.2",
    "e2e-test-images/resource-consumer:1.10",
  ],
  "cplatpublic.azurecr.io": ["args-escaped-test-image-ns:1.0"],
};

/** What {@linkcode prepareOffline} sets up for {@linkcode runSuite}. */
export interface OfflineSetup {
  /** The docker-registry binary. */
  registryBinary: string;
  /** Its config: TLS on 127.0.0.1:443, the pushed storage. */
  registryConfig: string;
  /** The /etc/hosts of the suite's namespace. */
  hosts: string;
  /** The throwaway CA's certificate (SSL_CERT_FILE of the suite). */
  caFile: string;
}

async function run(cmd: string, args: string[], cwd?: string): Promise<void> {
  const out = await new Deno.Command(cmd, {
    args,
    ...(cwd ? { cwd } : {}),
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!out.success) {
    throw new Error(
      `${cmd} ${args.join(" ")} failed (${out.code}): ${new TextDecoder().decode(out.stderr)}`,
    );
  }
}

/**
 * Pushes the suite's images to `reg` (on the host's loopback), copies the registry's storage
 * into `dir`, and writes what the suite's private namespace needs to serve it under the real
 * registry names: a TLS certificate for those names from a throwaway CA, a registry config and
 * an /etc/hosts mapping them to 127.0.0.1.
 *
 * @param reg a running private registry (it may be stopped afterwards)
 * @param dir an empty private dir
 */
export async function prepareOffline(
  reg: LocalRegistry,
  registryBinary: string,
  dir: string,
): Promise<OfflineSetup> {
  const image = await buildSuiteImage(dir);
  const whiteout = await buildWhiteoutImage(image, dir);
  for (const names of Object.values(SUITE_IMAGES)) {
    for (const name of names) {
      await reg.push(name, name.startsWith("containerd/whiteout-test:") ? whiteout : image);
    }
  }
  await Deno.remove(image, { recursive: true });
  await Deno.remove(whiteout, { recursive: true });
  await run("cp", ["-a", `${reg.dir}/storage`, `${dir}/storage`]);
  const hostsList = Object.keys(SUITE_IMAGES);
  const san = hostsList.map((h) => `DNS:${h}`).join(",");
  await run("openssl", [
    "req",
    "-x509",
    "-newkey",
    "rsa:2048",
    "-nodes",
    "-days",
    "2",
    "-subj",
    "/CN=skiff suite CA",
    "-keyout",
    "ca.key",
    "-out",
    "ca.crt",
  ], dir);
  await run("openssl", [
    "req",
    "-newkey",
    "rsa:2048",
    "-nodes",
    "-subj",
    `/CN=${hostsList[0]}`,
    "-keyout",
    "registry.key",
    "-out",
    "registry.csr",
  ], dir);
  await Deno.writeTextFile(`${dir}/san.ext`, `subjectAltName=${san}\n`);
  await run("openssl", [
    "x509",
    "-req",
    "-in",
    "registry.csr",
    "-CA",
    "ca.crt",
    "-CAkey",
    "ca.key",
    "-CAcreateserial",
    "-days",
    "2",
    "-extfile",
    "san.ext",
    "-out",
    "registry.crt",
  ], dir);
  const config = `${dir}/registry.yml`;
  await Deno.writeTextFile(
    config,
    [
      "version: 0.1",
      "log:",
      "  level: warn",
      "  accesslog:",
      "    disabled: true",
      "storage:",
      "  filesystem:",
      `    rootdirectory: ${dir}/storage`,
      "http:",
      "  addr: 127.0.0.1:443",
      `  secret: ${crypto.randomUUID()}`,
      "  tls:",
      `    certificate: ${dir}/registry.crt`,
      `    key: ${dir}/registry.key`,
      "",
    ].join("\n"),
  );
  const hosts = `${dir}/hosts`;
  await Deno.writeTextFile(
    hosts,
    `127.0.0.1 localhost ${hostsList.join(" ")}\n::1 localhost ip6-localhost\n`,
  );
  return { registryBinary, registryConfig: config, hosts, caFile: `${dir}/ca.crt` };
}

/** `go test -v` lines of top-level results: `--- PASS: TestX (1.23s)`. */
const RESULT = /^--- (PASS|FAIL|SKIP): (Test\w+) \(/;

/**
 * Parses `go test -v` output into top-level test outcomes (subtests are indented and ignored)
 * and, per failed test, its last output lines.
 */
export function parseGoTest(
  output: string,
): { results: Map<string, Outcome>; failures: Map<string, string> } {
  const results = new Map<string, Outcome>();
  const notes = new Map<string, string[]>();
  let current = "";
  for (const line of output.split("\n")) {
    const head = line.match(/^=== (?:RUN|CONT|NAME)\s+(Test\w+)/);
    if (head) {
      current = head[1]!;
      continue;
    }
    const m = line.match(RESULT);
    if (m) {
      results.set(m[2]!, m[1] === "PASS" ? "pass" : m[1] === "FAIL" ? "fail" : "skip");
      current = m[2]!;
      continue;
    }
    // A test's own messages ("    file_test.go:123: ..."), not the daemon's log lines.
    if (current && /^\s+\w+_test\.go:\d+:/.test(line)) {
      const list = notes.get(current) ?? [];
      list.push(line.length > 400 ? `${line.slice(0, 400)}...` : line);
      notes.set(current, list);
    }
  }
  const failures = new Map<string, string>();
  for (const [name, o] of results) {
    if (o === "fail") failures.set(name, (notes.get(name) ?? []).slice(-10).join("\n"));
  }
  return { results, failures };
}

/** The suite daemon's fixed paths (integration/client/client_unix.go). */
const SUITE_ROOT = "/var/lib/containerd-test";
const SUITE_STATE = "/run/containerd-test";
const SUITE_ADDRESS = `${SUITE_STATE}/containerd.sock`;

function cmdlines(): { pid: number; argv: string[] }[] {
  const out: { pid: number; argv: string[] }[] = [];
  for (const e of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(e.name)) continue;
    try {
      const argv = Deno.readTextFileSync(`/proc/${e.name}/cmdline`).split("\0").filter(Boolean);
      out.push({ pid: Number(e.name), argv });
    } catch { /* gone */ }
  }
  return out;
}

/**
 * Kills what a run left behind: the suite's containerd, shims serving its address (and their
 * containers), and removes the suite daemon's root and state.
 */
export async function cleanupSuite(): Promise<void> {
  const victims = cmdlines().filter(({ argv }) =>
    argv.includes(SUITE_ADDRESS) || argv.some((a) => a.startsWith(`${SUITE_STATE}/`))
  ).map((p) => p.pid);
  // The shims' children (container processes) go too.
  const children = cmdlines().filter(({ pid }) => {
    try {
      const st = Deno.readTextFileSync(`/proc/${pid}/stat`);
      const ppid = Number(st.slice(st.lastIndexOf(")") + 2).split(" ")[1]);
      return victims.includes(ppid);
    } catch {
      return false;
    }
  }).map((p) => p.pid);
  for (const pid of [...children, ...victims]) {
    try {
      Deno.kill(pid, "SIGKILL");
    } catch { /* gone */ }
  }
  await new Promise((r) => setTimeout(r, 200));
  // runc containers of the suite's namespace (the Go shim uses runc's default root).
  for (const root of ["/run/containerd/runc/testing"]) {
    try {
      const out = await new Deno.Command("runc", {
        args: ["--root", root, "list", "-q"],
        stdout: "piped",
        stderr: "null",
      }).output();
      for (const id of new TextDecoder().decode(out.stdout).split("\n").filter(Boolean)) {
        await new Deno.Command("runc", {
          args: ["--root", root, "delete", "-f", id],
          stdout: "null",
          stderr: "null",
        }).output();
      }
    } catch { /* no runc state */ }
  }
  // Unmount what is still mounted below the suite's dirs, deepest first, then remove them.
  const mounts = (await Deno.readTextFile("/proc/self/mountinfo")).split("\n")
    .map((l) => l.split(" ")[4] ?? "")
    .filter((m) => m.startsWith(`${SUITE_ROOT}/`) || m.startsWith(`${SUITE_STATE}/`))
    .sort((a, b) => b.length - a.length);
  for (const m of mounts) {
    await new Deno.Command("umount", { args: ["-l", m], stdout: "null", stderr: "null" })
      .output();
  }
  for (const d of [SUITE_ROOT, SUITE_STATE]) {
    await Deno.remove(d, { recursive: true }).catch(() => undefined);
  }
}

function netnsOf(pid: number | "self"): string | undefined {
  try {
    return Deno.readLinkSync(`/proc/${pid}/ns/net`);
  } catch {
    return undefined;
  }
}

/** The network namespace `unshare` moved `pid` into (polls until it differs from ours). */
async function netnsOfChild(pid: number): Promise<string | undefined> {
  const own = netnsOf("self");
  for (let i = 0; i < 200; i++) {
    const ns = netnsOf(pid);
    if (ns === undefined) return undefined; // already gone
    if (ns !== own) return ns;
    await new Promise((r) => setTimeout(r, 25));
  }
  return undefined;
}

/** SIGKILLs every process in network namespace `ns` (and `extra`). */
function killNetns(ns: string | undefined, extra?: number): void {
  const pids = ns ? cmdlines().map((p) => p.pid).filter((pid) => netnsOf(pid) === ns) : [];
  for (const pid of [...pids, ...(extra ? [extra] : [])]) {
    try {
      Deno.kill(pid, "SIGKILL");
    } catch { /* gone */ }
  }
}

/**
 * Whether criu can checkpoint on this machine (`criu check`). Where it cannot (here: it fails
 * to read the vdso), the suite's `-no-criu` skips the checkpoint tests for both shims.
 */
export async function criuWorks(): Promise<boolean> {
  try {
    const out = await new Deno.Command("criu", { args: ["check"], stdout: "null", stderr: "null" })
      .output();
    return out.success;
  } catch {
    return false;
  }
}

/** Options of {@linkcode runSuite}. */
export interface RunSuiteOptions {
  /** containerd version (its suite must be built). */
  version: string;
  /** That containerd's bin dir (containerd, ctr, containerd-shim-runc-v2). */
  binDir: string;
  /** Which shim. */
  shim: SuiteShim;
  /** For `skiff`: the dir holding the skiff launcher. */
  skiffBin?: string;
  /** The offline registry and names ({@linkcode prepareOffline}). */
  offline: OfflineSetup;
  /** Where to write the `go test -v` output. */
  logPath: string;
  /** Only these tests (default: {@linkcode selectTests}). */
  tests?: string[];
  /** Bound of the whole run. Default 15 minutes. */
  timeoutMs?: number;
  /** Snapshotter for the suite (TEST_SNAPSHOTTER). Default: containerd's own (overlayfs). */
  snapshotter?: string;
}

/**
 * Runs the selected tests of one version against one shim, serialised with any other run on
 * this machine (the suite daemon's paths are fixed).
 */
export async function runSuite(opts: RunSuiteOptions): Promise<SuiteRun> {
  const dir = suiteDir(opts.version);
  const selected = opts.tests ?? await selectTests(opts.version);
  await Deno.mkdir("/run", { recursive: true });
  const lock = await Deno.open("/run/skiff-containerd-suite.lock", {
    create: true,
    write: true,
  });
  await lock.lock(true);
  const started = Date.now();
  try {
    await cleanupSuite();
    const path = [
      ...(opts.shim === "skiff" && opts.skiffBin ? [opts.skiffBin] : []),
      dir, // runc-fp
      opts.binDir,
      "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    ].join(":");
    const env: Record<string, string> = {
      PATH: path,
      HOME: Deno.env.get("HOME") ?? "/root",
      TMPDIR: Deno.env.get("TMPDIR") ?? "/tmp",
    };
    if (opts.shim === "skiff") env.TEST_RUNTIME = SKIFF_RUNTIME;
    if (opts.snapshotter) env.TEST_SNAPSHOTTER = opts.snapshotter;
    const timeoutMs = opts.timeoutMs ?? 15 * 60_000;
    const log = await Deno.open(opts.logPath, { create: true, write: true, truncate: true });
    env.SSL_CERT_FILE = opts.offline.caFile;
    const netns = new URL("./netns.sh", import.meta.url).pathname;
    const child = new Deno.Command("unshare", {
      args: [
        // Own network (loopback only), mounts (/etc/hosts) and pids: `ps ax` in the tests
        // sees only the suite's processes, and the namespace's end kills all that is left.
        "--net",
        "--mount",
        "--pid",
        "--fork",
        "--kill-child",
        "--mount-proc",
        "--propagation",
        "private",
        "bash",
        netns,
        opts.offline.registryBinary,
        opts.offline.registryConfig,
        opts.offline.hosts,
        `${dir}/client.test`,
        "-test.v",
        "-test.root",
        "-test.run",
        `^(${selected.join("|")})$`,
        // Go's own bound panics with every goroutine's stack: a hang shows where it hung.
        `-test.timeout=${Math.floor(timeoutMs / 1000) - 30}s`,
        ...(await criuWorks() ? [] : ["-no-criu"]),
      ],
      cwd: dir,
      env,
      clearEnv: true,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const ns = await netnsOfChild(child.pid);
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      killNetns(ns, child.pid);
    }, timeoutMs);
    const chunks: string[] = [];
    const pump = async (s: ReadableStream<Uint8Array>) => {
      for await (const part of s.pipeThrough(new TextDecoderStream())) {
        chunks.push(part);
        await log.write(new TextEncoder().encode(part));
      }
    };
    const pumps = Promise.all([pump(child.stdout), pump(child.stderr)]);
    let status: Deno.CommandStatus;
    try {
      status = await child.status;
      // What the suite left running in its namespace (its registry, a containerd, shims)
      // would hold the pipes open.
      killNetns(ns);
      await Promise.race([pumps, new Promise((r) => setTimeout(r, 30_000))]);
    } finally {
      clearTimeout(timer);
      log.close();
    }
    const { results, failures } = parseGoTest(chunks.join(""));
    return {
      version: opts.version,
      shim: opts.shim,
      results,
      selected,
      code: timedOut ? null : status.code,
      timedOut,
      ms: Date.now() - started,
      logPath: opts.logPath,
      failures,
    };
  } finally {
    await cleanupSuite().catch(() => undefined);
    await lock.unlock().catch(() => undefined);
    lock.close();
  }
}

/**
 * The Go-vs-skiff table (markdown): one row per version and shim with passed/failed/skipped,
 * then each test whose outcome differs between the two shims on a version.
 */
export function matrix(runs: SuiteRun[]): string {
  const rows = [
    "| containerd | shim | passed | failed | skipped | time |",
    "| --- | --- | ---: | ---: | ---: | ---: |",
  ];
  for (const r of runs) {
    const c = countRun(r);
    const shim = r.shim === "go" ? "Go runc shim (containerd-shim-runc-v2)" : "skiff runc example";
    rows.push(
      `| ${r.version} | ${shim} | ${c.passed} | ${c.failed} | ${c.skipped} | ${
        Math.round(r.ms / 1000)
      } s${r.timedOut ? " (timed out)" : ""} |`,
    );
  }
  const diffs: string[] = [];
  const versions = [...new Set(runs.map((r) => r.version))];
  for (const v of versions) {
    const go = runs.find((r) => r.version === v && r.shim === "go");
    const sk = runs.find((r) => r.version === v && r.shim === "skiff");
    if (!go || !sk) continue;
    for (const name of sk.selected) {
      const a = go.results.get(name) ?? "none";
      const b = sk.results.get(name) ?? "none";
      if (a !== b) diffs.push(`- ${v}: \`${name}\`: Go shim ${a}, skiff ${b}`);
    }
  }
  return [
    ...rows,
    "",
    diffs.length > 0 ? "Differences:" : "No test differs between the two shims.",
    ...diffs,
  ].join("\n");
}

/** Options of {@linkcode runMatrix}. */
export interface RunMatrixOptions {
  /** containerd versions (each must be a build `containerdVersions()` lists). */
  versions: readonly string[];
  /** Shims to run, in order. */
  shims: readonly SuiteShim[];
  /** Only the selected tests matching this. */
  filter?: RegExp;
  /** Dir for the `go test -v` logs. */
  logs: string;
  /** Bound of each run. Default 15 minutes. */
  timeoutMs?: number;
  /** Called after each run. */
  onRun?: (run: SuiteRun) => void;
}

/**
 * Builds the suites, serves their images, installs skiff's runc example, and runs every
 * version × shim.
 */
export async function runMatrix(opts: RunMatrixOptions): Promise<SuiteRun[]> {
  const builds = containerdVersions();
  const work = await Deno.makeTempDir({ prefix: "skiff-containerd-suite-" });
  const runs: SuiteRun[] = [];
  const reg = await startRegistry();
  try {
    await Deno.mkdir(`${work}/offline`);
    const offline = await prepareOffline(reg, registryBinary(), `${work}/offline`);
    await reg.stop();
    let skiffBin: string | undefined;
    if (opts.shims.includes("skiff")) {
      await installExampleShims({
        prefix: work,
        shims: { [SKIFF_LAUNCHER]: "examples/runc/main.ts" },
      });
      skiffBin = `${work}/bin`;
    }
    for (const version of opts.versions) {
      const build = builds.find((b) => b.version === version);
      if (!build) {
        throw new Error(`containerd ${version} is not built here (tests/setup/prepare.sh)`);
      }
      await buildSuite(version);
      let tests = await selectTests(version);
      if (opts.filter) tests = tests.filter((t) => opts.filter!.test(t));
      for (const shim of opts.shims) {
        const run = await runSuite({
          version,
          binDir: build.binDir,
          shim,
          ...(skiffBin ? { skiffBin } : {}),
          offline,
          logPath: `${opts.logs}/containerd-${version}-${shim}.log`,
          tests,
          ...(opts.timeoutMs ? { timeoutMs: opts.timeoutMs } : {}),
        });
        runs.push(run);
        opts.onRun?.(run);
      }
    }
  } finally {
    await reg.stop();
    await Deno.remove(work, { recursive: true }).catch(() => undefined);
  }
  return runs;
}

/**
 * What is wrong with skiff's results: a failed test, or fewer passes than the Go shim on the
 * same version. Empty when all is well.
 */
export function regressions(runs: SuiteRun[]): string[] {
  const out: string[] = [];
  for (const r of runs.filter((r) => r.shim === "skiff")) {
    const c = countRun(r);
    if (c.failed > 0) {
      const names = r.selected.filter((t) =>
        r.results.get(t) !== "pass" && r.results.get(t) !== "skip"
      );
      out.push(`containerd ${r.version}: skiff failed ${c.failed}: ${names.join(", ")}`);
    }
    const go = runs.find((g) => g.version === r.version && g.shim === "go");
    if (go && c.passed < countRun(go).passed) {
      out.push(
        `containerd ${r.version}: skiff passed ${c.passed}, the Go shim ${countRun(go).passed}`,
      );
    }
  }
  return out;
}
