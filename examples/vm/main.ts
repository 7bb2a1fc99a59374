/**
 * containerd-shim-skiff-vm-v2: a VM sandbox runtime on skiff, Kata Containers' model in one
 * example. Runtime name `io.containerd.skiff-vm.v2`; a pod is a QEMU microVM and its containers
 * run inside it, started by a skiff ttrpc agent in the guest (examples/vm/agent).
 *
 * The VM boots at the pod's first container (CRI's pause container; with `ctr run`, the
 * container itself); the pod's other containers reach this shim through CRI's sandbox-id
 * grouping and run in the same VM; the VM stops when the last container is deleted. Options (CRI
 * TOML): `MemoryMiB`, `Cpus`.
 *
 * Needs qemu-system-x86_64 (TCG is enough), an unpacked Debian kernel (tests/setup/guest.sh),
 * busybox-static, and runc on the host (the guest runs the host's runc and deno from the host's
 * root, shared read-only); `deno task vm-image` builds the boot image for installed launchers.
 */
import { type ContainerRuntime, runShim, type RuntimeContext, Shim } from "../../mod.ts";
import { currentVmImage } from "./image.ts";
import { Pod } from "./pod.ts";
import { AgentRuntime } from "./runtime.ts";

/** The VM's size. */
export interface VmShimOptions {
  memoryMiB: number;
  cpus: number;
}

/** A TOML value that must be a positive integer; anything else is refused, naming it. */
function positive(key: string, v: unknown): number {
  if (Number.isSafeInteger(v) && (v as number) > 0) return v as number;
  throw new Error(`${key} must be a positive integer, got ${JSON.stringify(v)}`);
}

/** The VM shim: one pod, one VM, every container through the guest's agent. */
export class VmShim extends Shim<VmShimOptions> {
  readonly runtimeName = "io.containerd.skiff-vm.v2";
  readonly options = {
    defaults: (): VmShimOptions => ({ memoryMiB: 1024, cpus: 1 }),
    fromToml: (t: Record<string, unknown>, base: VmShimOptions): VmShimOptions => ({
      memoryMiB: positive("MemoryMiB", t.MemoryMiB ?? base.memoryMiB),
      cpus: positive("Cpus", t.Cpus ?? base.cpus),
    }),
  };
  #pod: Pod | undefined;

  /** Every container of this shim's pod shares its VM; the first one's options size it. */
  runtime(ctx: RuntimeContext<VmShimOptions>): ContainerRuntime {
    this.#pod ??= new Pod({
      ...ctx.options,
      stateParent: "/run/skiff-vm",
      logger: ctx.logger,
      image: currentVmImage,
    });
    return new AgentRuntime(this.#pod);
  }
}

if (import.meta.main) await runShim(new VmShim());
