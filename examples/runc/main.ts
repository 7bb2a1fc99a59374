/**
 * containerd-shim-skiff-runc-v2: a containerd shim for runc, built on skiff.
 * Runtime name `io.containerd.skiff-runc.v2`; options `containerd.runc.v1.Options`
 * (or the same keys in CRI's TOML runtime options).
 */
import {
  ociFeaturesAny,
  OciRuntimeCli,
  optionsMessage,
  runShim,
  type RuntimeContext,
  Shim,
} from "../../mod.ts";
import type { Any } from "@bufbuild/protobuf/wkt";
import { RuncOptionsSchema } from "../../proto/mod.ts";

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
export class RuncShim extends Shim<RuncOptions> {
  readonly runtimeName = "io.containerd.skiff-runc.v2";
  readonly options = {
    defaults: (): RuncOptions => ({
      binaryName: "runc",
      root: "/run/containerd/runc",
      systemdCgroup: false,
      noPivotRoot: false,
      noNewKeyring: false,
      criuPath: "",
    }),
    messages: [optionsMessage(RuncOptionsSchema, (m, base: RuncOptions): RuncOptions => ({
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

  /** `-info`'s features: the runtime's own `features` document, when it has one. */
  override async features(o: RuncOptions): Promise<Any> {
    return ociFeaturesAny(await new OciRuntimeCli({ binary: o.binaryName }).features());
  }

  runtime(ctx: RuntimeContext<RuncOptions>): OciRuntimeCli {
    const o = ctx.options;
    return new OciRuntimeCli({
      binary: o.binaryName,
      root: `${o.root}/${ctx.namespace}`,
      log: `${ctx.bundle}/log.json`,
      // The bundle is the runtime's working directory (wrappers read ./config.json).
      cwd: ctx.bundle,
      systemdCgroup: o.systemdCgroup,
      noPivot: o.noPivotRoot,
      noNewKeyring: o.noNewKeyring,
      globalArgs: o.criuPath ? [`--criu=${o.criuPath}`] : [],
      spawn: ctx.spawn,
    });
  }
}

if (import.meta.main) await runShim(new RuncShim());
