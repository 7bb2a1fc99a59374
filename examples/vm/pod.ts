/**
 * The pod of one VM shim: the VM its containers run in, booted by the first container that
 * arrives (CRI's pause container, or `ctr run`'s only one) and stopped when the last one is
 * deleted, so that nothing of it (QEMU, sockets, 9p share, mounts, temp dirs) outlives the
 * pod's last container. With containerd's `shim` sandboxer the sandbox holds the VM instead
 * ({@linkcode Pod.hold}): booted at StartSandbox, ended at StopSandbox or when it dies, never by
 * a container's delete. It also shares each container's bundle into the guest and fans the
 * agent's OOM events out to the containers' watches.
 *
 * @module
 */

import { Code, ConnectError } from "@connectrpc/connect";
import { unmountAll } from "@skiff/shim/linux";
import type { AdoptedChild, RuntimeCarry } from "@skiff/shim";
import type { Logger, SandboxStarted } from "@skiff/shim/seam";
import { buildVmImage, type VmImage } from "./image.ts";
import { guestSpec } from "./spec.ts";
import { Vm } from "./vm.ts";

/** How the pod's VM is sized and where it keeps its state. */
export interface PodOptions {
  /** Guest memory in MiB. */
  memoryMiB: number;
  /** Virtual CPUs. */
  cpus: number;
  /** Parent of the VM's state directory. */
  stateParent: string;
  /** The shim's logger. */
  logger: Logger;
  /** The boot image; default {@linkcode buildVmImage} (cached). */
  image?: () => Promise<VmImage>;
}

/** What the next code needs of a pod after a live upgrade (its `data`). */
interface PodCarryData {
  memoryMiB: number;
  cpus: number;
  members: string[];
  holder?: { id: string; vmPid: number; released: boolean };
  vm?: unknown;
}

/** The pod's VM and the containers in it. */
export class Pod {
  #options: PodOptions;
  #vm: Promise<Vm> | undefined;
  #members = new Set<string>();
  #oomWatches = new Map<string, () => void>();
  /** The sandbox that holds the VM (the `shim` sandboxer), and its VM's pid. */
  #holder: { id: string; vmPid: number; released: boolean } | undefined;
  #releasing: Promise<void> | undefined;
  /** The VM once booted (for what must not wait: settled, a live upgrade). */
  #booted: Vm | undefined;

  /** @param options size, state and logger */
  constructor(options: PodOptions) {
    this.#options = options;
  }

  /**
   * Continues, after a live upgrade, the pod the previous code ran ({@linkcode Pod.carry}): its
   * VM, containers and sandbox.
   *
   * @param carried what {@linkcode Pod.carry} returned
   * @param options state and logger (the size comes from the carried state)
   * @param adoptChild the shim's `UpgradeContext.adoptChild`, for QEMU
   * @returns the pod
   */
  static adopt(
    carried: RuntimeCarry,
    options: Omit<PodOptions, "memoryMiB" | "cpus">,
    adoptChild: (pid: number, startTime: number) => AdoptedChild,
  ): Pod {
    const d = carried.data as PodCarryData | undefined;
    if (!d || !Array.isArray(d.members)) {
      throw new Error(`carried pod state is incomplete: ${JSON.stringify(carried)}`);
    }
    const pod = new Pod({ ...options, memoryMiB: d.memoryMiB, cpus: d.cpus });
    for (const id of d.members) pod.#members.add(id);
    if (d.holder) pod.#holder = d.holder;
    if (d.vm) {
      const vm = Vm.adopt({ descriptors: carried.descriptors ?? {}, data: d.vm }, adoptChild);
      pod.#booted = vm;
      pod.#vm = Promise.resolve(vm);
      void pod.#pollOom(vm);
    }
    options.logger.info("pod adopted", { qemu: pod.#booted?.pid, members: d.members.length });
    return pod;
  }

  /** The booted VM, when there is one (no wait); it may have died since. */
  get vm(): Vm | undefined {
    return this.#booted;
  }

  /** True when no agent call is in flight (always, without a running VM). */
  get settled(): boolean {
    return !this.#booted?.running || this.#booted.gate.inflight === 0;
  }

  /** Live upgrade, old code: no agent call left in flight (the long polls paused). */
  async quiesce(): Promise<void> {
    this.#refuseUnsettledVm();
    await this.#booted?.quiesce();
  }

  /** Live upgrade, old code: the upgrade did not happen; the long polls go on. */
  proceed(): void {
    this.#booted?.gate.resume();
  }

  /** A VM booting, stopping or dead (its containers are being ended) does not cross an upgrade. */
  #refuseUnsettledVm(): void {
    if (this.#vm && !this.#booted) throw new Error("the pod's VM is still booting");
    if (this.#releasing) throw new Error("the pod's VM is stopping");
    if (this.#booted && !this.#booted.running) {
      throw new Error(`the pod's VM (QEMU ${this.#booted.pid}) has exited`);
    }
  }

  /**
   * What the next code needs to continue this pod ({@linkcode Pod.adopt}), after
   * {@linkcode Pod.quiesce}.
   *
   * @throws {Error} when the VM is booting or stopping, saying so
   */
  carry(): RuntimeCarry {
    this.#refuseUnsettledVm();
    const vm = this.#booted?.carry();
    const data: PodCarryData = {
      memoryMiB: this.#options.memoryMiB,
      cpus: this.#options.cpus,
      members: [...this.#members],
      ...(this.#holder ? { holder: this.#holder } : {}),
      ...(vm ? { vm: vm.data } : {}),
    };
    return { ...(vm?.descriptors ? { descriptors: vm.descriptors } : {}), data };
  }

  /** The shim's logger. */
  get logger(): Logger {
    return this.#options.logger;
  }

  /**
   * Admits a container: boots the VM if it is the first.
   *
   * @param id the container id
   * @returns the running VM
   */
  async enter(id: string): Promise<Vm> {
    if (this.#holder?.released) {
      throw new ConnectError(
        `container ${id}: the pod's sandbox ${this.#holder.id} is stopped`,
        Code.FailedPrecondition,
      );
    }
    this.#members.add(id);
    this.#vm ??= this.#boot();
    try {
      return await this.#vm;
    } catch (e) {
      this.#members.delete(id);
      this.#vm = undefined;
      throw new ConnectError(`VM for container ${id}: ${(e as Error).message}`, Code.Unavailable);
    }
  }

  /**
   * Lets a container go: its share is removed, and the VM stopped if it was the last.
   *
   * @param id the container id
   */
  async leave(id: string): Promise<void> {
    const vm = await this.#vm?.catch(() => undefined);
    this.#oomWatches.delete(id);
    if (vm) await unmountAll(`${vm.shared}/${id}`).catch(() => {});
    if (vm) await Deno.remove(`${vm.shared}/${id}`, { recursive: true }).catch(() => {});
    if (!this.#members.delete(id) || this.#members.size > 0 || !vm) return;
    this.#vm = undefined;
    this.#booted = undefined;
    await vm.stop();
    this.#options.logger.info("vm stopped", { qemu: vm.pid });
  }

  /**
   * Boots the VM for the sandbox `id` (StartSandbox), which holds it until {@linkcode release}.
   *
   * @param id the sandbox id
   * @returns QEMU's pid and the VM's end: its exit code, once nothing of it is left
   */
  async hold(id: string): Promise<Required<SandboxStarted>> {
    const vm = await this.enter(id);
    this.#holder = { id, vmPid: vm.pid, released: this.#releasing !== undefined };
    return { pid: vm.pid, exited: this.heldEnd() };
  }

  /**
   * The end of the sandbox's VM: its exit code, once nothing of it is left (at
   * {@linkcode Pod.hold}, and again after a live upgrade).
   */
  async heldEnd(): Promise<number> {
    const vm = await this.#vm;
    if (!vm) return 0;
    const s = await vm.exited;
    await this.release(); // a VM that died leaves nothing either
    return s.code;
  }

  /**
   * Ends the sandbox's VM whatever its containers (StopSandbox, or the VM's death); no container
   * enters after. Every call resolves once the VM's state is gone.
   */
  release(): Promise<void> {
    if (this.#holder) this.#holder.released = true;
    this.#releasing ??= this.#release();
    return this.#releasing;
  }

  async #release(): Promise<void> {
    const vm = await this.#vm?.catch(() => undefined);
    this.#vm = undefined;
    this.#booted = undefined;
    this.#members.clear();
    if (!vm) return;
    await vm.stop();
    this.#options.logger.info("vm stopped", { qemu: vm.pid });
  }

  /**
   * Shares a container's bundle into the guest: its rootfs (and the bind mounts' sources the
   * guest cannot see) bound into the pod's share, its spec rewritten next to them.
   *
   * @param vm the pod's VM
   * @param id the container id
   * @param bundle the host's bundle directory
   * @returns the bundle's directory in the guest
   */
  async share(vm: Vm, id: string, bundle: string): Promise<string> {
    const dir = `${vm.shared}/${id}`;
    const guestDir = `${vm.guestShared}/${id}`;
    const spec = JSON.parse(await Deno.readTextFile(`${bundle}/config.json`));
    const rewritten = guestSpec(spec, id, bundle, guestDir, this.#holder?.vmPid);
    await Deno.mkdir(dir);
    for (const s of rewritten.shares) {
      const target = `${dir}/${s.name}`;
      if ((await Deno.stat(s.source)).isDirectory) await Deno.mkdir(target);
      else await Deno.writeFile(target, new Uint8Array());
      await run("mount", ["--rbind", s.source, target]);
    }
    await Deno.writeTextFile(`${dir}/config.json`, JSON.stringify(rewritten.spec));
    return guestDir;
  }

  /**
   * Calls `onOom` when the agent reports an OOM kill in the container's cgroup.
   *
   * @param id the container id
   * @param onOom the callback
   * @returns its release
   */
  watchOom(id: string, onOom: () => void): { close(): void } {
    this.#oomWatches.set(id, onOom);
    return { close: () => this.#oomWatches.delete(id) };
  }

  async #boot(): Promise<Vm> {
    const o = this.#options;
    await Deno.mkdir(o.stateParent, { recursive: true });
    const image = await (o.image ?? buildVmImage)();
    const vm = await Vm.start({
      image,
      memoryMiB: o.memoryMiB,
      cpus: o.cpus,
      stateParent: o.stateParent,
    });
    o.logger.info("vm ready", { qemu: vm.pid, readyMs: Math.round(vm.readyMs) });
    this.#booted = vm;
    void this.#pollOom(vm);
    return vm;
  }

  /** One long poll at a time, for the VM's life. */
  async #pollOom(vm: Vm): Promise<void> {
    let gone = false;
    void vm.exited.then(() => gone = true);
    while (!gone) {
      try {
        await vm.gate.open();
        const { containerId } = await vm.agent.oomEvent({});
        if (containerId) this.#oomWatches.get(containerId)?.();
      } catch {
        if (!gone) await new Promise((r) => setTimeout(r, 1000));
      }
    }
  }
}

async function run(cmd: string, args: string[]): Promise<void> {
  const out = await new Deno.Command(cmd, { args, stdin: "null" }).output();
  if (!out.success) {
    const err = new TextDecoder().decode(out.stderr).trim();
    throw new ConnectError(`${cmd} ${args.join(" ")}: exited ${out.code}: ${err}`, Code.Internal);
  }
}
