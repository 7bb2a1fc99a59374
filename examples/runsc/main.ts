/**
 * containerd-shim-skiff-runsc-v2: a containerd shim for gVisor's runsc, built on skiff.
 * Runtime name `io.containerd.skiff-runsc.v2`; options are CRI's `runtimeoptions.v1.Options`
 * with a TOML body (or `ConfigPath`) in gVisor's format:
 *
 *   binary_name = "runsc"
 *   root = "/run/containerd/runsc"
 *   [runsc_config]          # each key becomes a runsc global flag: --key=value
 *   network = "none"
 *   platform = "ptrace"
 */
import {
  type OciRuntimeCliOptions,
  OciShim,
  runShim,
  type RuntimeContext,
  SKIFF_VERSION,
} from "@skiff/shim";
import { makeCgroupParent } from "./cgroup_parent.ts";

/** The runsc settings this shim honours. */
export interface RunscOptions {
  binaryName: string;
  root: string;
  /** runsc global flags, `--key=value`. */
  runscConfig: Record<string, string>;
}

/** The runsc shim: TOML options in, an OCI runtime CLI with runsc's flags out. */
export class RunscShim extends OciShim<RunscOptions> {
  readonly runtimeName = "io.containerd.skiff-runsc.v2";
  override readonly version = SKIFF_VERSION; // skiff's examples go with skiff
  readonly options = {
    defaults: (): RunscOptions => ({
      binaryName: "runsc",
      root: "/run/containerd/runsc",
      // ptrace works on every kernel; `network` follows the container's spec (see below).
      runscConfig: { platform: "ptrace" },
    }),
    fromToml: (t: Record<string, unknown>, base: RunscOptions): RunscOptions => ({
      binaryName: String(t.binary_name ?? base.binaryName),
      root: String(t.root ?? base.root),
      runscConfig: {
        ...base.runscConfig,
        ...Object.fromEntries(
          Object.entries((t.runsc_config ?? {}) as Record<string, unknown>)
            .map(([k, v]) => [k, String(v)]),
        ),
      },
    }),
  };

  /** runsc's flags and its sandbox model; root, log, cwd, spawn and features are OciShim's. */
  protected override cliOptions(ctx: RuntimeContext<RunscOptions>): OciRuntimeCliOptions {
    const o = ctx.options;
    const spec = readSpec(ctx.bundle);
    // On cgroup v2 runsc deletes the parents it made, even one another container still uses.
    makeCgroupParent(spec?.linux?.cgroupsPath);
    const network = o.runscConfig.network ?? networkMode(spec);
    return {
      globalArgs: Object.entries({ ...o.runscConfig, network }).map(([k, v]) => `--${k}=${v}`),
      // A pod's containers share one gVisor sandbox process: exits come from `runsc wait`.
      initExit: "wait",
      // A pod member (CRI's "container" type) is a gVisor sub-container: `runsc start`, not
      // `runsc create`, hands it its stdio.
      stdioAt: spec?.annotations?.["io.kubernetes.cri.container-type"] === "container"
        ? "start"
        : "create",
      // `runsc ps` lists gVisor's own pids; the shim reports the host pids it knows.
      psPids: "sandbox",
    };
  }
}

interface Spec {
  annotations?: Record<string, string>;
  linux?: { cgroupsPath?: string; namespaces?: { type: string; path?: string }[] };
}

function readSpec(bundle: string): Spec | undefined {
  try {
    return JSON.parse(Deno.readTextFileSync(`${bundle}/config.json`));
  } catch {
    return undefined;
  }
}

/** runsc's network mode for a spec: the pod's namespace, an empty one, or the host's. */
function networkMode(spec: Spec | undefined): string {
  if (!spec) return "none";
  const ns = spec.linux?.namespaces?.find((n) => n.type === "network");
  // runsc's own network stack needs a prepared namespace (CRI's); it refuses the root one.
  return !ns ? "host" : ns.path ? "sandbox" : "none";
}

if (import.meta.main) await runShim(new RunscShim());
