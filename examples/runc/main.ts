/**
 * containerd-shim-skiff-runc-v2: a containerd shim for runc, built on skiff.
 * Runtime name `io.containerd.skiff-runc.v2`; options `containerd.runc.v1.Options`
 * (or the same keys in CRI's TOML runtime options).
 */
import {
  type OciRuntimeCliOptions,
  OciShim,
  optionsMessage,
  RUNC_OPTIONS_CODEC,
  runShim,
  type RuntimeContext,
  SKIFF_VERSION,
} from "@skiff/shim";

/** The runc settings this shim honours. */
export interface RuncOptions {
  binaryName: string;
  root: string;
  systemdCgroup: boolean;
  noPivotRoot: boolean;
  noNewKeyring: boolean;
  criuPath: string;
}

/** The runc shim: options in, an OCI runtime CLI out. */
export class RuncShim extends OciShim<RuncOptions> {
  readonly runtimeName = "io.containerd.skiff-runc.v2";
  override readonly version = SKIFF_VERSION; // skiff's examples go with skiff
  readonly options = {
    defaults: (): RuncOptions => ({
      binaryName: "runc",
      root: "/run/containerd/runc",
      systemdCgroup: false,
      noPivotRoot: false,
      noNewKeyring: false,
      criuPath: "",
    }),
    messages: [optionsMessage(RUNC_OPTIONS_CODEC, (m, base: RuncOptions): RuncOptions => ({
      binaryName: m.binaryName || base.binaryName,
      root: m.root || base.root,
      systemdCgroup: m.systemdCgroup,
      noPivotRoot: m.noPivotRoot,
      noNewKeyring: m.noNewKeyring,
      criuPath: m.criuPath,
    }))],
    fromToml: (t: Record<string, unknown>, base: RuncOptions): RuncOptions => ({
      binaryName: String(t.BinaryName ?? base.binaryName),
      root: String(t.Root ?? base.root),
      systemdCgroup: t.SystemdCgroup === true,
      noPivotRoot: t.NoPivotRoot === true,
      noNewKeyring: t.NoNewKeyring === true,
      criuPath: String(t.CriuPath ?? base.criuPath),
    }),
  };

  /** runc's own flags; root, log, cwd, spawn, `--systemd-cgroup` and features are OciShim's. */
  protected override cliOptions({ options: o }: RuntimeContext<RuncOptions>): OciRuntimeCliOptions {
    return {
      noPivot: o.noPivotRoot,
      noNewKeyring: o.noNewKeyring,
      globalArgs: o.criuPath ? [`--criu=${o.criuPath}`] : [],
    };
  }
}

if (import.meta.main) await runShim(new RuncShim());
