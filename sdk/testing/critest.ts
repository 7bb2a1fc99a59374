/**
 * Kubernetes' CRI validation suite (`critest` from `sigs.k8s.io/cri-tools`) against a private
 * containerd 2.x, once per CRI runtime handler: containerd's Go runc shim (`runc`, the
 * reference) and skiff's examples (`skiff-runc`, `skiff-runsc`). Everything stays on this
 * machine: the images critest pulls are locally built busybox images served by a private
 * registry on 127.0.0.1 ({@linkcode startRegistry}), and pods get a CNI bridge network from
 * Debian's `containernetworking-plugins` on a private bridge and subnet.
 *
 * critest's specs that need an image busybox cannot stand in for (nginx, httpd, images with a
 * fixed digest or their own users) are skipped by name, for every handler alike:
 * {@linkcode CRITEST_SKIPS}.
 *
 * @example Run the suite on containerd 2.4.2 and print the matrix
 * ```ts ignore
 * import { critestMatrix, runCritestMatrix } from "@skiff/shim/testing";
 *
 * const runs = await runCritestMatrix({ binDir: "/root/.cache/skiff/containerd-v2.4.2/bin" });
 * console.log(critestMatrix([runs]));
 * ```
 *
 * @module
 */
// long: over 500 lines with its runnable JSDoc examples; the code (~400 lines) is one concept,
// critest's runs and their report

import { startContainerd } from "./containerd.ts";
import { containerdVersionOf, skiffCacheDir } from "./containerd_versions.ts";
import type { PrivateContainerd } from "./private_containerd.ts";
import { installExampleShims } from "../install/examples.ts";
import { buildBusyboxImage, buildPauseImage } from "./image.ts";
import { type LocalRegistry, startRegistry } from "./registry.ts";

/** The cri-tools release whose critest runs (`tests/setup/critest.sh` builds it). */
export const CRITEST_VERSION = "1.37.0";

/**
 * Where `tests/setup/critest.sh` puts the critest binary.
 *
 * @returns `$SKIFF_CACHE/critest-v<CRITEST_VERSION>/critest` (not necessarily existing)
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { critestBinary, CRITEST_VERSION } from "@skiff/shim/testing";
 * const bin = critestBinary(); // ~/.cache/skiff/critest-v1.37.0/critest
 * strictEqual(bin.endsWith(`/critest-v${CRITEST_VERSION}/critest`), true);
 * ```
 */
export function critestBinary(): string {
  return `${skiffCacheDir()}/critest-v${CRITEST_VERSION}/critest`;
}

/**
 * A critest spec skipped for every handler, and why.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { CritestSkip } from "@skiff/shim/testing";
 * const s: CritestSkip = { pattern: "port mapping", reason: "needs nginx" };
 * strictEqual(new RegExp(s.pattern).test("runtime should support port mapping with only container port"), true);
 * ```
 */
export interface CritestSkip {
  /** A regular expression (Go RE2 syntax) matched against the spec's full text. */
  pattern: string;
  /** Why it cannot run here. */
  reason: string;
}

/**
 * The specs no busybox image can serve, or that need more than this machine has. The same list
 * is passed as `--ginkgo.skip` for every handler.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { CRITEST_SKIPS } from "@skiff/shim/testing";
 * const skipped = (name: string) => CRITEST_SKIPS.some((s) => new RegExp(s.pattern).test(name));
 * strictEqual(skipped("[k8s.io] Security Context NoNewPrivs should not allow"), true);
 * strictEqual(skipped("[k8s.io] Container runtime should support execSync"), false);
 * ```
 */
export const CRITEST_SKIPS: readonly CritestSkip[] = [
  {
    pattern: "port mapping|portforward|should support network$|HostNetwork is|HostPID|PodPID|" +
      "ContainerPID",
    reason: "serve or run an nginx image (e2e-test-images/nginx, hostnet-nginx)",
  },
  {
    pattern: "Multiple Containers",
    reason: "runs an httpd image (e2e-test-images/httpd) next to busybox",
  },
  {
    pattern: "NoNewPrivs",
    reason: "runs e2e-test-images/nonewprivs, a setuid test binary",
  },
  {
    pattern: "Image Manager|Image Consistency|Image Identifier Consistency",
    reason: "image-service specs (no runtime handler involved) that check the names and tags " +
      "they pulled; critest's --registry-prefix rewrites the names and drops the tags, and one " +
      "pulls a fixed sha256 digest",
  },
  {
    pattern: "SupplementalGroupsPolicy|subPath should succeed",
    reason: "need test-image-predefined-group, an image whose /etc/group puts its user in groups",
  },
  {
    pattern: "execSync with timeout|HostIpc",
    reason: "run pgrep / ipcs, which Debian's busybox-static does not build in",
  },
  {
    pattern: "MaskedPaths",
    reason: "masks /bin/ls, which in the busybox image is a symlink to /bin/busybox (so masking " +
      "it masks the shell too); the upstream image has hard links",
  },
];

/**
 * One spec's outcome.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { CritestSpec } from "@skiff/shim/testing";
 * const s: CritestSpec = { name: "[k8s.io] ... execSync", state: "passed", seconds: 2.1 };
 * strictEqual(s.message, undefined); // only a spec that did not pass has one
 * ```
 */
export interface CritestSpec {
  /** Full text: container texts and the `It` text, space-separated (what `--ginkgo.focus` matches). */
  name: string;
  /** ginkgo's state: `passed`, `failed`, `skipped`, `panicked`, `timedout`, `interrupted`, ... */
  state: string;
  /** Run time. */
  seconds: number;
  /** The failure's message (first lines), for a spec that did not pass. */
  message?: string;
}

/**
 * One handler's critest run.
 *
 * @example Usage
 * ```ts
 * import { deepStrictEqual } from "node:assert/strict";
 * import type { CritestRun, CritestSpec } from "@skiff/shim/testing";
 * // What runCritest(c, { handler: "skiff-runc", ... }) resolves with:
 * const spec = (name: string, state: string): CritestSpec => ({ name, state, seconds: 1 });
 * const run: CritestRun = {
 *   handler: "skiff-runc",
 *   version: "2.4.2",
 *   specs: [spec("[k8s.io] Container runtime should execSync", "passed"), spec("[k8s.io] b", "failed")],
 *   code: 1,
 *   timedOut: false,
 *   seconds: 42,
 *   logPath: "/tmp/critest.log",
 * };
 * deepStrictEqual(run.specs.filter((s) => s.state === "failed").map((s) => s.name), ["[k8s.io] b"]);
 * ```
 */
export interface CritestRun {
  /** The CRI runtime handler. */
  handler: string;
  /** containerd's version. */
  version: string;
  /** Every spec critest ran or skipped. */
  specs: CritestSpec[];
  /** critest's exit code (non-zero when a spec failed). */
  code: number;
  /** True when the run was killed at its deadline. */
  timedOut: boolean;
  /** Wall time of the run. */
  seconds: number;
  /** critest's output (verbose ginkgo log). */
  logPath: string;
  /** The `--ginkgo.focus` of the run, when only some specs ran. */
  focus?: string;
}

/**
 * Options of {@linkcode runCritest}.
 *
 * @example Usage
 * ```ts ignore
 * const o: RunCritestOptions = { handler: "skiff-runc", images, dir, timeoutMs: 600_000 };
 * ```
 */
export interface RunCritestOptions {
  /** CRI runtime handler (`--runtime-handler`). */
  handler: string;
  /** What {@linkcode serveCritestImages} returned. */
  images: CritestImages;
  /** Where the log and the JSON report go. */
  dir: string;
  /** Kill critest after this long. Default 15 minutes. */
  timeoutMs?: number;
  /** Only specs matching this (`--ginkgo.focus`). */
  focus?: string;
  /** More specs to skip, on top of {@linkcode CRITEST_SKIPS}. */
  skip?: string[];
  /** The critest binary. Default {@linkcode critestBinary}. */
  binary?: string;
}

/**
 * The images critest pulls, served by a private registry.
 *
 * @example Usage
 * ```ts ignore
 * const images: CritestImages = await serveCritestImages(registry, dir);
 * ```
 */
export interface CritestImages {
  /** `--registry-prefix`: the registry's host. critest rewrites its image names to it. */
  registryPrefix: string;
  /** `--test-images-file`: the default test container image, in that registry. */
  imagesFile: string;
  /** The registry hosts dir containerd's CRI reads (`registry.config_path`). */
  hostsDir: string;
}

/**
 * Pushes busybox images under every name critest's runnable specs pull (its default test
 * image, and the image-service specs' `k8s-staging-cri-tools/test-image-*`; the three
 * "different images" differ in their `Cmd`), and writes the images file.
 *
 * @param registry where to push
 * @param dir where to write the images file
 * @returns the flags' values
 *
 * @example Usage
 * ```ts ignore
 * const reg = await startRegistry();
 * const images = await serveCritestImages(reg, "/tmp/critest");
 * ```
 */
export async function serveCritestImages(
  registry: LocalRegistry,
  dir: string,
): Promise<CritestImages> {
  const busybox = await buildBusyboxImage();
  const staging = "k8s-staging-cri-tools";
  // critest's --registry-prefix keeps a name's path and drops its tag (cri-tools 1.37's
  // PrepareImageName), so every name is pulled as :latest; push both.
  const same = [
    "e2e-test-images/busybox:latest",
    "e2e-test-images/busybox:1.29-2",
    `${staging}/test-image-tag:latest`,
    `${staging}/test-image-tags:latest`,
    `${staging}/test-image-latest:latest`,
    `${staging}/test-image-tag:test`,
    `${staging}/test-image-tag:all`,
    `${staging}/test-image-tags:1`,
    `${staging}/test-image-tags:2`,
    `${staging}/test-image-tags:3`,
  ];
  for (const ref of same) await registry.push(ref, busybox);
  // The "same image from two registries" spec pulls pause:3.9 from two hosts (one, prefixed).
  await registry.push("pause:latest", await buildPauseImage());
  for (const n of [1, 2, 3]) {
    const distinct = await buildBusyboxImage({
      ref: `localhost/skiff/critest-image-${n}:latest`,
      cmd: ["sh", "-c", `echo image ${n}`],
    });
    await registry.push(`${staging}/test-image-${n}:latest`, distinct);
  }
  const imagesFile = `${dir}/critest-images.yaml`;
  await Deno.writeTextFile(
    imagesFile,
    `defaultTestContainerImage: ${registry.host}/e2e-test-images/busybox:latest\n`,
  );
  return { registryPrefix: registry.host, imagesFile, hostsDir: registry.hostsDir };
}

interface GinkgoSpecReport {
  ContainerHierarchyTexts?: string[] | null;
  LeafNodeText?: string;
  LeafNodeType?: string;
  State?: string;
  RunTime?: number;
  Failure?: { Message?: string };
}

/**
 * Reads ginkgo's JSON report (`--ginkgo.json-report`) into per-spec outcomes (`It` nodes only).
 *
 * @param text the report's JSON
 * @returns one entry per spec
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { parseGinkgoReport } from "@skiff/shim/testing";
 * const specs = parseGinkgoReport(JSON.stringify([{ SpecReports: [{
 *   ContainerHierarchyTexts: ["[k8s.io] Pod"], LeafNodeText: "runs", LeafNodeType: "It",
 *   State: "passed", RunTime: 2e9,
 * }] }]));
 * strictEqual(specs[0]!.name, "[k8s.io] Pod runs");
 * strictEqual(specs[0]!.seconds, 2);
 * ```
 */
export function parseGinkgoReport(text: string): CritestSpec[] {
  const suites = JSON.parse(text) as { SpecReports?: GinkgoSpecReport[] | null }[];
  const out: CritestSpec[] = [];
  for (const suite of suites) {
    for (const r of suite.SpecReports ?? []) {
      if (r.LeafNodeType !== "It") continue;
      const name = [...(r.ContainerHierarchyTexts ?? []), r.LeafNodeText ?? ""].join(" ");
      const spec: CritestSpec = {
        name,
        state: r.State ?? "unknown",
        seconds: Math.round((r.RunTime ?? 0) / 1e7) / 100,
      };
      const message = r.Failure?.Message;
      if (message && r.State !== "passed" && r.State !== "skipped") {
        spec.message = message.split("\n").slice(0, 6).join("\n");
      }
      out.push(spec);
    }
  }
  return out;
}

/**
 * Runs critest once against `c`'s CRI socket for one handler, bounded by a deadline, and reads
 * its JSON report.
 *
 * @param c a private containerd with CRI on and `opts.handler` configured
 * @param opts handler, images, output dir, bounds
 * @returns the specs' outcomes
 *
 * @example Usage
 * ```ts ignore
 * const run = await runCritest(c, { handler: "skiff-runc", images, dir: c.dir });
 * ```
 */
export async function runCritest(
  c: PrivateContainerd,
  opts: RunCritestOptions,
): Promise<CritestRun> {
  const binary = opts.binary ?? critestBinary();
  const report = `${opts.dir}/critest-${opts.handler}.json`;
  const logPath = `${opts.dir}/critest-${opts.handler}.log`;
  const skip = [...CRITEST_SKIPS.map((s) => s.pattern), ...(opts.skip ?? [])].join("|");
  const args = [
    `--runtime-endpoint=unix://${c.address}`,
    `--image-endpoint=unix://${c.address}`,
    `--runtime-handler=${opts.handler}`,
    `--registry-prefix=${opts.images.registryPrefix}`,
    `--test-images-file=${opts.images.imagesFile}`,
    "--ginkgo.no-color",
    "--ginkgo.v",
    `--ginkgo.json-report=${report}`,
    `--ginkgo.skip=${skip}`,
    ...(opts.focus ? [`--ginkgo.focus=${opts.focus}`] : []),
  ];
  const timeoutMs = opts.timeoutMs ?? 15 * 60_000;
  const started = Date.now();
  const log = await Deno.open(logPath, { write: true, create: true, truncate: true });
  // critest writes temp files (and reads its config) relative to its working directory.
  const child = new Deno.Command(binary, {
    args,
    cwd: opts.dir,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    try {
      child.kill("SIGKILL");
    } catch { /* exited meanwhile */ }
  }, timeoutMs);
  const w = log.writable.getWriter();
  const pump = async (s: ReadableStream<Uint8Array>) => {
    for await (const chunk of s) await w.write(chunk);
  };
  const [status] = await Promise.all([child.status, pump(child.stdout), pump(child.stderr)]);
  clearTimeout(timer);
  await w.close().catch(() => {});
  let specs: CritestSpec[] = [];
  try {
    specs = parseGinkgoReport(await Deno.readTextFile(report));
  } catch (e) {
    if (!timedOut) {
      throw new Error(
        `critest (${opts.handler}) wrote no readable report ${report}: ${(e as Error).message}` +
          ` (exit ${status.code}; log ${logPath})`,
      );
    }
  }
  return {
    handler: opts.handler,
    version: c.version,
    specs,
    code: status.code,
    timedOut,
    seconds: Math.round((Date.now() - started) / 100) / 10,
    logPath,
    ...(opts.focus ? { focus: opts.focus } : {}),
  };
}

/**
 * A CNI network for a private containerd's pods: a bridge of its own (`skc<n>`) with a private
 * /24 from 10.233.0.0/16, host-local addresses, loopback and portmap, from Debian's
 * `containernetworking-plugins` in `/usr/lib/cni`. Nothing is routed off the machine (no
 * masquerade, no default route beyond the bridge).
 *
 * @param n a small number unique among the containerds running at once (0-255)
 * @returns the conflist's JSON text and the bridge's name
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { critestCniConfig } from "@skiff/shim/testing";
 * const { bridge, conflist } = critestCniConfig(7);
 * strictEqual(bridge, "skc7");
 * strictEqual(JSON.parse(conflist).plugins[0].type, "bridge");
 * ```
 */
export function critestCniConfig(n: number): { bridge: string; conflist: string } {
  const bridge = `skc${n}`;
  const conflist = {
    cniVersion: "1.0.0",
    name: `skiff-critest-${n}`,
    plugins: [
      {
        type: "bridge",
        bridge,
        isGateway: true,
        ipMasq: false,
        hairpinMode: true,
        ipam: {
          type: "host-local",
          ranges: [[{ subnet: `10.233.${n}.0/24` }]],
          routes: [{ dst: "0.0.0.0/0" }],
        },
      },
      { type: "portmap", capabilities: { portMappings: true } },
      { type: "loopback" },
    ],
  };
  return { bridge, conflist: JSON.stringify(conflist, null, 2) };
}

/** Directory of Debian's CNI plugins. */
export const CNI_BIN_DIR = "/usr/lib/cni";

/**
 * Options of {@linkcode runCritestMatrix}.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { type CritestMatrixOptions, CRITEST_HANDLERS } from "@skiff/shim/testing";
 * const binDir = "/root/.cache/skiff/containerd-v2.4.2/bin";
 * const o: CritestMatrixOptions = { binDir, handlers: ["runc", "skiff-runc"] };
 * strictEqual(o.handlers!.every((h) => CRITEST_HANDLERS.includes(h)), true);
 * ```
 */
export interface CritestMatrixOptions {
  /** containerd build (2.x) to run. */
  binDir: string;
  /** Handlers to run, in order. Default: {@linkcode defaultCritestHandlers}. */
  handlers?: string[];
  /** Per-handler deadline. Default 15 minutes. */
  timeoutMs?: number;
  /** Only specs matching this, for every handler (else {@linkcode CRITEST_HANDLER_FOCUS}). */
  focus?: string;
  /** Keep the private dirs (logs, reports) instead of removing them. */
  keep?: boolean;
  /** Called after each handler's run. */
  onRun?: (run: CritestRun) => void;
}

/**
 * Every handler {@linkcode runCritestMatrix} configures: the Go runc shim (`runc`, the
 * reference), skiff's examples under their own runtime types, `skiff-runc-compat`: the skiff
 * runc shim registered as `runtime_type = "io.containerd.runc.v2"` with `runtime_path` naming its
 * launcher, the way containerd 2.1's CRI introspects its features (docs/containerd-config.md),
 * and `skiff-runc-shared`: the skiff runc shim with shared servers
 * ({@linkcode CRITEST_SHARED_PODS} pods per server), installed under its own prefix and named by
 * `runtime_path`.
 */
export const CRITEST_HANDLERS: readonly string[] = [
  "runc",
  "skiff-runc",
  "skiff-runc-compat",
  "skiff-runc-shared",
  "skiff-runsc",
];

/** Pods per server of the `skiff-runc-shared` handler (shared servers, `SKIFF_SHARED_PODS`). */
export const CRITEST_SHARED_PODS = 8;

/**
 * Specs a handler is run on by default, when not all: `skiff-runc-compat` differs from
 * `skiff-runc` only in how CRI introspects it, so it runs the specs that depend on the
 * introspected features (recursive read-only mounts).
 */
export const CRITEST_HANDLER_FOCUS: Readonly<Record<string, string>> = {
  "skiff-runc-compat": "readonly mounts",
};

/**
 * The handlers critest runs for a containerd version unless told otherwise (CI's gate): the Go
 * shim, `skiff-runc` and `skiff-runc-shared`, plus `skiff-runc-compat` where CRI introspects only
 * runc-typed handlers (2.1). `skiff-runsc` runs on demand only: Debian bookworm's runsc refuses every pod
 * that has its own network namespace on this machine's kernel (docs/conformance.md).
 *
 * @param version containerd version, e.g. `2.1.9`
 * @returns handler names, the reference first
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { defaultCritestHandlers } from "@skiff/shim/testing";
 * strictEqual(defaultCritestHandlers("2.4.2").join(), "runc,skiff-runc,skiff-runc-shared");
 * ```
 */
export function defaultCritestHandlers(version: string): string[] {
  return version.startsWith("2.1.")
    ? ["runc", "skiff-runc", "skiff-runc-compat", "skiff-runc-shared"]
    : ["runc", "skiff-runc", "skiff-runc-shared"];
}

let nextNetwork = Deno.pid % 200;

/**
 * Runs critest for each handler on one containerd: installs skiff's shims, starts a registry
 * with critest's images and a containerd with CRI, the handlers and a CNI bridge network,
 * runs the handlers one after another, then stops everything.
 *
 * @param opts containerd build, handlers, bounds
 * @returns one run per handler
 *
 * @example Usage
 * ```ts ignore
 * const runs = await runCritestMatrix({ binDir: "/root/.cache/skiff/containerd-v2.4.2/bin" });
 * ```
 */
export async function runCritestMatrix(opts: CritestMatrixOptions): Promise<CritestRun[]> {
  const work = await Deno.makeTempDir({ prefix: "skiff-critest-" });
  const n = nextNetwork++ % 256;
  const { bridge, conflist } = critestCniConfig(n);
  let registry: LocalRegistry | undefined;
  let c: PrivateContainerd | undefined;
  const runs: CritestRun[] = [];
  try {
    const handlers = opts.handlers ?? defaultCritestHandlers(
      containerdVersionOf(opts.binDir) ?? "",
    );
    await installExampleShims({ prefix: `${work}/prefix` });
    if (handlers.includes("skiff-runc-shared")) {
      await installExampleShims({
        prefix: `${work}/shared`,
        shims: { "containerd-shim-skiff-runc-v2": "examples/runc/main.ts" },
        sharedPods: CRITEST_SHARED_PODS,
      });
    }
    registry = await startRegistry({ dir: work });
    const images = await serveCritestImages(registry, work);
    const cniConf = `${work}/cni/net.d`;
    await Deno.mkdir(cniConf, { recursive: true });
    await Deno.writeTextFile(`${cniConf}/10-skiff-critest.conflist`, conflist);
    c = await startContainerd({
      binDir: opts.binDir,
      tmpDir: work,
      extraPath: [`${work}/prefix/bin`],
      runtimes: {
        runc: {
          runtimeType: "io.containerd.runc.v2",
          options: (p) => ({ Root: p.runcRoot }),
        },
        "skiff-runc": {
          runtimeType: "io.containerd.skiff-runc.v2",
          options: (p) => ({ Root: p.runcRoot }),
        },
        // Options as the Go shim's: the same runtime type, so CRI sends runc's options.
        "skiff-runc-compat": {
          runtimeType: "io.containerd.runc.v2",
          options: (p) => ({ Root: p.runcRoot }),
        },
        "skiff-runsc": {
          runtimeType: "io.containerd.skiff-runsc.v2",
          options: (p) => ({ root: `${p.dir}/runsc` }),
        },
        "skiff-runc-shared": {
          runtimeType: "io.containerd.skiff-runc.v2",
          options: (p) => ({ Root: p.runcRoot }),
        },
      },
      cri: { defaultHandler: "runc" },
      configToml: [
        `[plugins."io.containerd.cri.v1.runtime".cni]`,
        `conf_dir = "${cniConf}"`,
        `bin_dirs = ["${CNI_BIN_DIR}"]`,
        `[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.skiff-runc-compat]`,
        `runtime_path = "${work}/prefix/bin/containerd-shim-skiff-runc-v2"`,
        `[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.skiff-runc-shared]`,
        `runtime_path = "${work}/shared/bin/containerd-shim-skiff-runc-v2"`,
        `[plugins."io.containerd.cri.v1.images".registry]`,
        `config_path = "${images.hostsDir}"`,
        "",
      ].join("\n"),
    });
    for (const handler of handlers) {
      const run = await runCritest(c, {
        handler,
        images,
        dir: work,
        ...(opts.timeoutMs ? { timeoutMs: opts.timeoutMs } : {}),
        ...(opts.focus ?? CRITEST_HANDLER_FOCUS[handler]
          ? { focus: opts.focus ?? CRITEST_HANDLER_FOCUS[handler] }
          : {}),
      });
      runs.push(run);
      opts.onRun?.(run);
    }
    return runs;
  } finally {
    await c?.stop().catch((e) => console.warn(`critest: stopping containerd: ${e}`));
    await registry?.stop().catch(() => {});
    // The bridge plugin leaves its bridge behind when the last pod goes.
    await new Deno.Command("ip", { args: ["link", "del", bridge], stdout: "null", stderr: "null" })
      .output().catch(() => undefined);
    if (opts.keep) console.warn(`critest: kept ${work}`);
    else await Deno.remove(work, { recursive: true }).catch(() => {});
  }
}

/** A spec's cell in the matrix. */
function cell(s: CritestSpec | undefined): string {
  if (!s) return "—";
  switch (s.state) {
    case "passed":
      return "pass";
    case "skipped":
      return "skip";
    case "failed":
    case "panicked":
    case "timedout":
    case "interrupted":
    case "aborted":
      return `**${s.state === "failed" ? "FAIL" : s.state.toUpperCase()}**`;
    default:
      return s.state;
  }
}

/**
 * Specs the reference handler (`runc`, the Go shim) passed and a skiff handler of the same
 * containerd did not: what CI fails on. A spec a handler failed is always listed. One it skipped
 * (or did not run) is listed unless another skiff handler of the same containerd passed it: on
 * containerd 2.1, `skiff-runc` skips the recursive read-only specs (CRI did not introspect its
 * features) and `skiff-runc-compat`, the same shim registered the way 2.1 introspects, passes
 * them.
 *
 * @param runs one containerd's runs, the reference among them
 * @param reference the reference handler. Default `runc`
 * @returns "handler: spec (state)" per regression
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { critestRegressions } from "@skiff/shim/testing";
 * const run = (handler: string, state: string) => ({
 *   handler, version: "2.4.2", code: 0, timedOut: false, seconds: 1, logPath: "",
 *   specs: [{ name: "a", state, seconds: 1 }],
 * });
 * const r = critestRegressions([run("runc", "passed"), run("skiff-runc", "failed")]);
 * strictEqual(r[0], "skiff-runc: a (failed)");
 * const skipped = [run("runc", "passed"), run("skiff-runc", "skipped"), run("skiff-runc-compat", "passed")];
 * strictEqual(critestRegressions(skipped).length, 0);
 * ```
 */
export function critestRegressions(runs: CritestRun[], reference = "runc"): string[] {
  const ref = runs.find((r) => r.handler === reference);
  if (!ref) return [];
  const others = runs.filter((r) => r !== ref);
  const passedBy = (run: CritestRun, name: string) =>
    run.specs.some((s) => s.name === name && s.state === "passed");
  const out: string[] = [];
  for (const run of others) {
    const byName = new Map(run.specs.map((s) => [s.name, s]));
    const focus = run.focus ? new RegExp(run.focus) : undefined;
    for (const s of ref.specs) {
      if (s.state !== "passed") continue;
      const other = byName.get(s.name);
      if (other?.state === "passed") continue;
      const notRun = !other || other.state === "skipped" || (focus && !focus.test(s.name));
      if (notRun && others.some((o) => passedBy(o, s.name))) continue;
      out.push(`${run.handler}: ${s.name} (${other?.state ?? "missing"})`);
    }
    if (run.timedOut) out.push(`${run.handler}: timed out`);
  }
  return out;
}

/**
 * The per-spec matrix as a markdown table: one row per spec that ran for any handler, one
 * column per containerd version and handler, then a totals row.
 *
 * @param groups runs grouped by containerd version (each group one {@linkcode runCritestMatrix})
 * @returns markdown
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { type CritestRun, type CritestSpec, critestMatrix } from "@skiff/shim/testing";
 * // With a containerd build: critestMatrix([await runCritestMatrix({ binDir })])
 * const spec = (name: string, state: string): CritestSpec => ({ name, state, seconds: 1 });
 * const run: CritestRun = {
 *   handler: "skiff-runc",
 *   version: "2.4.2",
 *   specs: [spec("[k8s.io] Container runtime should execSync", "passed"), spec("[k8s.io] b", "failed")],
 *   code: 1,
 *   timedOut: false,
 *   seconds: 42,
 *   logPath: "/tmp/critest.log",
 * };
 * const md = critestMatrix([[run]]);
 * strictEqual(md.split("\n")[0], "| spec | 2.4.2 skiff-runc |");
 * strictEqual(md.endsWith("| **total** | 1 pass, 1 fail, 0 skip (42 s) |"), true);
 * ```
 */
export function critestMatrix(groups: CritestRun[][]): string {
  const columns = groups.flat();
  const names: string[] = [];
  const seen = new Set<string>();
  for (const run of columns) {
    for (const s of run.specs) {
      if (s.state === "skipped" && !columns.some((r) => ranSpec(r, s.name))) continue;
      if (!seen.has(s.name)) {
        seen.add(s.name);
        names.push(s.name);
      }
    }
  }
  names.sort();
  const head = [
    "spec",
    ...columns.map((r) => `${r.version} ${r.handler}${r.focus ? ` (only /${r.focus}/)` : ""}`),
  ];
  const lines = [
    `| ${head.join(" | ")} |`,
    `|${head.map((_, i) => i === 0 ? "---" : ":-:").join("|")}|`,
  ];
  const maps = columns.map((r) => new Map(r.specs.map((s) => [s.name, s])));
  const focus = columns.map((r) => r.focus ? new RegExp(r.focus) : undefined);
  for (const name of names) {
    const short = name.replace(/^\[k8s\.io\] /, "").replace(/\|/g, "\\|");
    const cells = maps.map((m, i) => focus[i]?.test(name) === false ? "" : cell(m.get(name)));
    lines.push(`| ${short} | ${cells.join(" | ")} |`);
  }
  const totals = columns.map((r, i) => {
    const specs = r.specs.filter((s) => focus[i]?.test(s.name) !== false);
    const count = (st: string) => specs.filter((s) => s.state === st).length;
    const failed = specs.filter((s) => !["passed", "skipped", "pending"].includes(s.state)).length;
    return `${count("passed")} pass, ${failed} fail, ${count("skipped")} skip` +
      `${r.timedOut ? ", TIMED OUT" : ""} (${Math.round(r.seconds)} s)`;
  });
  lines.push(`| **total** | ${totals.join(" | ")} |`);
  return lines.join("\n");
}

function ranSpec(r: CritestRun, name: string): boolean {
  return r.specs.some((s) => s.name === name && s.state !== "skipped");
}
