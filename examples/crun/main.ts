/**
 * containerd-shim-skiff-crun-v2: a containerd shim for crun, built on skiff.
 * Runtime name `io.containerd.skiff-crun.v2`; options `containerd.runc.v1.Options`'s
 * `binary_name`, `root` and `systemd_cgroup` (or `BinaryName`, `Root`, `SystemdCgroup` in CRI's
 * TOML runtime options).
 */
import * as skiff from "@skiff/shim";

type CrunOptions = skiff.OciShimOptions;

/** The crun shim: crun takes runc's command line, so OciShim's defaults are all it needs. */
export class CrunShim extends skiff.OciShim<CrunOptions> {
  readonly runtimeName = "io.containerd.skiff-crun.v2";
  override readonly version = skiff.SKIFF_VERSION; // skiff's examples go with skiff
  readonly options = {
    defaults: (): CrunOptions => ({ binaryName: "crun", root: "/run/containerd/crun" }),
    messages: [skiff.optionsMessage(skiff.RUNC_OPTIONS_CODEC, (m, base: CrunOptions) => ({
      binaryName: m.binaryName || base.binaryName,
      root: m.root || base.root,
      systemdCgroup: m.systemdCgroup,
    }))],
    fromToml: (t: Record<string, unknown>, base: CrunOptions): CrunOptions => ({
      binaryName: String(t.BinaryName ?? base.binaryName),
      root: String(t.Root ?? base.root),
      systemdCgroup: t.SystemdCgroup === true,
    }),
  };
}

if (import.meta.main) await skiff.runShim(new CrunShim());
