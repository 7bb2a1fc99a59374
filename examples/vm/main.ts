/**
 * containerd-shim-skiff-vm-v2: a VM sandbox runtime on skiff, Kata Containers' model in one
 * example. Runtime name `io.containerd.skiff-vm.v2`; a pod is a QEMU microVM and its containers
 * run inside it, started by a skiff ttrpc agent in the guest (examples/vm/agent).
 *
 * The VM boots at the pod's first container (CRI's pause container; with `ctr run`, the
 * container itself); the pod's other containers reach this shim through CRI's sandbox-id
 * grouping and run in the same VM; the VM stops when the last container is deleted. With
 * containerd's `shim` sandboxer (the Sandbox API) the sandbox is the VM: StartSandbox boots it,
 * StopSandbox ends it, and the pod's containers arrive at its task-API endpoint. Options (CRI
 * TOML): `MemoryMiB`, `Cpus`; the VMs' state lives under `$SKIFF_VM_STATE_DIR` (default
 * `/run/skiff-vm`).
 *
 * Needs qemu-system-x86_64 (TCG is enough), an unpacked Debian kernel (tests/setup/guest.sh),
 * busybox-static, and runc on the host (the guest runs the host's runc and deno from the host's
 * root, shared read-only); `deno task vm-image` builds the boot image for installed launchers.
 */
import {
  type ContainerRuntime,
  runShim,
  type RuntimeCarry,
  type RuntimeContext,
  type SandboxContext,
  type SandboxRuntime,
  Shim,
  SKIFF_VERSION,
  type UpgradeContext,
} from "@skiff/shim";
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
  override readonly version = SKIFF_VERSION; // skiff's examples go with skiff
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
    return new AgentRuntime(this.#podOf(ctx));
  }

  /** The `shim` sandboxer's pod: its sandbox is the VM, from StartSandbox to StopSandbox. */
  override sandbox(ctx: SandboxContext<VmShimOptions>): SandboxRuntime<VmShimOptions> {
    const pod = this.#podOf(ctx);
    return {
      start: () => pod.hold(ctx.id),
      stop: () => pod.release(),
      resumeEnd: () => pod.heldEnd(),
    };
  }

  // Live upgrade: the pod's VM (QEMU, its console, the agent) carries on in the next code.
  override prepareUpgrade(): Promise<void> {
    return this.#pod?.quiesce() ?? Promise.resolve();
  }

  override upgradeCancelled(): void {
    this.#pod?.proceed();
  }

  override carryUpgrade(): RuntimeCarry | undefined {
    return this.#pod?.carry();
  }

  override adoptUpgrade(carried: RuntimeCarry, ctx: UpgradeContext): void {
    this.#pod = Pod.adopt(carried, { ...this.#place(), logger: ctx.logger }, ctx.adoptChild);
  }

  #podOf(ctx: RuntimeContext<VmShimOptions> | SandboxContext<VmShimOptions>): Pod {
    const { logger, options } = ctx;
    this.#pod ??= new Pod({ ...options, ...this.#place(), logger });
    return this.#pod;
  }

  #place(): { stateParent: string; image: typeof currentVmImage } {
    return {
      stateParent: Deno.env.get("SKIFF_VM_STATE_DIR") || "/run/skiff-vm",
      image: currentVmImage,
    };
  }
}

if (import.meta.main) await runShim(new VmShim());
