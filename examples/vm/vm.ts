/**
 * One pod's virtual machine: QEMU booting the VM image ({@linkcode buildVmImage}) with the
 * host's root shared read-only, a writable share for the pod's bundles, and the agent's
 * virtio-serial port bound to a unix socket; {@linkcode Vm.start} resolves once the agent
 * answers a Ping, {@linkcode Vm.stop} ends the VM and leaves nothing of it (process, socket,
 * mount, temp dir).
 *
 * TCG only (`-accel tcg -cpu max`): nested KVM hangs on the machines this was built on, and TCG
 * needs nothing of the host.
 *
 * @module
 */

import type { Client } from "@connectrpc/connect";
import { create } from "@bufbuild/protobuf";
import { type Agent, type PingResponse, PingResponseSchema } from "./proto/agent_pb.ts";
import {
  type ChildPipes,
  FdStream,
  processStartTime,
  takeChildPipes,
  unmountAll,
} from "@skiff/shim/linux";
import type { AdoptedChild, RuntimeCarry } from "@skiff/shim";
import { type AgentConnection, connectAgent, waitForAgent } from "./client.ts";
import { AgentGate } from "./gate.ts";
import { AGENT_PORT, GUEST_SHARED, type VmImage } from "./image.ts";

/** Options of {@linkcode Vm.start}. */
export interface VmOptions {
  /** The boot image. */
  image: VmImage;
  /** Guest memory in MiB (the guest's tmpfs overlay lives in it). Default 1024. */
  memoryMiB?: number;
  /**
   * Virtual CPUs. Default 1: under TCG each vCPU is a host thread, and on a loaded host a
   * starved one stalls the other in cross-CPU calls (the guest's "soft lockup" in runc).
   */
  cpus?: number;
  /** Extra kernel command-line words (e.g. `nowatchdog`). */
  kernelArgs?: string[];
  /**
   * Ends QEMU and removes the VM's state when this process dies without stopping the VM (a
   * SIGKILLed shim): QEMU would otherwise outlive it. Default true.
   */
  reapIfOrphaned?: boolean;
  /** Bound on boot to agent-ready; QEMU is killed after it. Default 180 s (TCG, busy host). */
  readyTimeoutMs?: number;
  /** Parent of the VM's state directory (socket, share). Default the system's temp dir. */
  stateParent?: string;
  /** Receives the guest's console output as it arrives. */
  onConsole?: (text: string) => void;
}

/** The console's tail kept for diagnosis. */
const CONSOLE_KEEP = 64 * 1024;

/** QEMU: the process this code spawned, or one a live upgrade handed over. */
type Hypervisor = Pick<Deno.ChildProcess, "pid" | "status" | "kill">;

/** What the next code needs of a VM after a live upgrade (its `data`). */
interface VmCarryData {
  pid: number;
  startTime: number;
  stateDir: string;
  readyMs: number;
  ping: { version: string; kernel: string; uptimeSeconds: number };
}

/** A running VM and its agent. */
export class Vm {
  /** The agent's client. */
  readonly agent: Client<typeof Agent>;
  /** The agent's Ping answer when it became ready. */
  readonly ping: PingResponse;
  /** QEMU's pid. */
  readonly pid: number;
  /** The host directory the guest sees at {@linkcode Vm.guestShared} (writable). */
  readonly shared: string;
  /** Where the guest sees {@linkcode Vm.shared}. */
  readonly guestShared: string = GUEST_SHARED;
  /** Milliseconds from QEMU's start to the agent's first answer. */
  readonly readyMs: number;
  /** Counts the agent calls in flight; pauses long polls for a live upgrade. */
  readonly gate: AgentGate;
  #qemu: Hypervisor;
  #startTime: number | undefined;
  #pipes: ChildPipes | undefined;
  #connection: AgentConnection;
  #stateDir: string;
  #console: ConsoleTail;
  #stopping: Promise<void> | undefined;
  #gone = false;

  private constructor(init: {
    qemu: Hypervisor;
    startTime: number | undefined;
    pipes: ChildPipes | undefined;
    connection: AgentConnection;
    gate: AgentGate;
    ping: PingResponse;
    stateDir: string;
    console: ConsoleTail;
    readyMs: number;
  }) {
    this.#qemu = init.qemu;
    this.#startTime = init.startTime;
    this.#pipes = init.pipes;
    this.gate = init.gate;
    this.#connection = init.connection;
    this.agent = init.connection.agent;
    this.ping = init.ping;
    this.pid = init.qemu.pid;
    this.#stateDir = init.stateDir;
    this.shared = `${init.stateDir}/shared`;
    this.#console = init.console;
    this.readyMs = init.readyMs;
    void init.qemu.status.then(() => this.#gone = true);
  }

  /**
   * Boots a VM and waits for its agent.
   *
   * @param options image, size, bounds
   * @returns the running VM
   * @throws {Error} when QEMU fails or the agent is not ready in time (the console's tail in
   *   the message); nothing of the VM is left then
   */
  static async start(options: VmOptions): Promise<Vm> {
    const stateDir = await Deno.makeTempDir({
      prefix: "skiff-vm-",
      ...(options.stateParent ? { dir: options.stateParent } : {}),
    });
    const socket = `${stateDir}/agent.sock`;
    await Deno.mkdir(`${stateDir}/shared`);
    const started = performance.now();
    let qemu: Deno.ChildProcess | undefined;
    let pipes: ChildPipes | undefined;
    const gate = new AgentGate();
    const console = new ConsoleTail(options.onConsole);
    try {
      qemu = new Deno.Command("qemu-system-x86_64", {
        args: qemuArgs(options, stateDir, socket),
        stdin: "null",
        stdout: "piped",
        stderr: "piped",
      }).spawn();
      // Pipes skiff owns, so that a live upgrade can hand the console to the next code.
      pipes = takeChildPipes(qemu, { stdin: false, stdout: true, stderr: true });
      const startTime = processStartTime(qemu.pid);
      const errors = new ConsoleTail();
      const stderrDone = errors.pump(pipes?.stderr?.readable() ?? qemu.stderr);
      const stderr = stderrDone.then(() => errors.text);
      const consoleDone = console.pump(pipes?.stdout?.readable() ?? qemu.stdout);
      const died = new AbortController();
      const exited = qemu.status.then((s) => {
        died.abort(new Error(`qemu-system-x86_64 exited ${s.code}`));
        return s;
      });
      if (options.reapIfOrphaned ?? true) watchParent(qemu.pid, stateDir);
      await waitForSocket(socket, exited);
      let ready;
      try {
        ready = await waitForAgent(socket, options.readyTimeoutMs ?? 180_000, died.signal, [
          gate.interceptor,
        ]);
      } catch (e) {
        const why = died.signal.aborted
          ? `${(died.signal.reason as Error).message}: ${(await stderr).trim()}`
          : (e instanceof Error ? e.message : String(e));
        throw new Error(`VM boot failed: ${why}\n--- console tail ---\n${console.text}`);
      }
      void consoleDone;
      return new Vm({
        qemu,
        startTime,
        pipes,
        gate,
        connection: ready.connection,
        ping: ready.ping,
        stateDir,
        console,
        readyMs: performance.now() - started,
      });
    } catch (e) {
      if (qemu) {
        try {
          qemu.kill("SIGKILL");
        } catch { /* gone */ }
        await qemu.status;
      }
      await Promise.allSettled([pipes?.stdout?.close(), pipes?.stderr?.close()]);
      await removeState(stateDir);
      throw e;
    }
  }

  /**
   * Continues, after a live upgrade, the VM the previous code ran ({@linkcode Vm.carry}): the
   * same QEMU (its exit through the shim's reaper), its console's pipes, and a new connection to
   * the agent (the previous one ended idle with the old code).
   *
   * @param carried what {@linkcode Vm.carry} returned
   * @param adoptChild the shim's `UpgradeContext.adoptChild`
   * @returns the VM
   */
  static adopt(
    carried: RuntimeCarry,
    adoptChild: (pid: number, startTime: number) => AdoptedChild,
  ): Vm {
    const d = carried.data as VmCarryData | undefined;
    const out = carried.descriptors?.console;
    const err = carried.descriptors?.consoleErr;
    if (!d || typeof d.pid !== "number" || out === undefined || err === undefined) {
      throw new Error(`carried VM state is incomplete: ${JSON.stringify(carried)}`);
    }
    const gate = new AgentGate();
    const pipes = {
      stdout: new FdStream(out, `console of QEMU ${d.pid} (carried)`),
      stderr: new FdStream(err, `stderr of QEMU ${d.pid} (carried)`),
    };
    const console = new ConsoleTail();
    void console.pump(pipes.stdout.readable());
    void console.pump(pipes.stderr.readable());
    return new Vm({
      qemu: adoptChild(d.pid, d.startTime),
      startTime: d.startTime,
      pipes,
      gate,
      connection: connectAgent(`${d.stateDir}/agent.sock`, [gate.interceptor]),
      ping: create(PingResponseSchema, d.ping),
      stateDir: d.stateDir,
      console,
      readyMs: d.readyMs,
    });
  }

  /**
   * Live upgrade, in the old code: pauses the long polls and has the agent answer the pending
   * ones, until no call is in flight (the connection is left idle for the next code).
   */
  async quiesce(): Promise<void> {
    this.gate.pause();
    while (this.gate.inflight > 0 && this.running) {
      await this.agent.release({});
      if (this.gate.inflight > 0) await new Promise((r) => setTimeout(r, 10));
    }
  }

  /**
   * What the next code needs to continue this VM ({@linkcode Vm.adopt}); after
   * {@linkcode Vm.quiesce}.
   *
   * @throws {Error} when the VM is stopping or its console's pipes were not identified
   */
  carry(): RuntimeCarry {
    if (this.#stopping || !this.running) throw new Error(`VM (QEMU ${this.pid}) is stopping`);
    const { stdout, stderr } = this.#pipes ?? {};
    if (!stdout || !stderr || this.#startTime === undefined) {
      throw new Error(`VM (QEMU ${this.pid}): its console's pipes could not be identified`);
    }
    const data: VmCarryData = {
      pid: this.pid,
      startTime: this.#startTime,
      stateDir: this.#stateDir,
      readyMs: this.readyMs,
      ping: {
        version: this.ping.version,
        kernel: this.ping.kernel,
        uptimeSeconds: this.ping.uptimeSeconds,
      },
    };
    return { descriptors: { console: stdout.fd, consoleErr: stderr.fd }, data };
  }

  /** The console's recent output (boot messages, the init's and the agent's stderr). */
  get console(): string {
    return this.#console.text;
  }

  /** False once QEMU has exited (the VM stopped or died). */
  get running(): boolean {
    return !this.#gone;
  }

  /** Resolves when QEMU has exited (the VM stopped or died). */
  get exited(): Promise<Deno.CommandStatus> {
    return this.#qemu.status;
  }

  /**
   * Stops the VM: asks the agent to power the guest off, kills QEMU when it has not ended
   * within `timeoutMs`, then removes the socket and the share (unmounting what is mounted
   * under it). Idempotent.
   *
   * @param timeoutMs how long the guest may take to power off
   */
  stop(timeoutMs = 30_000): Promise<void> {
    this.#stopping ??= this.#stop(timeoutMs);
    return this.#stopping;
  }

  /** Same as {@linkcode stop}, for `await using`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.stop();
  }

  async #stop(timeoutMs: number): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    try {
      await this.agent.shutdown({}, { timeoutMs: Math.min(timeoutMs, 10_000) }).catch(() => {});
      const gone = await Promise.race([
        this.#qemu.status.then(() => true),
        new Promise<boolean>((r) => timer = setTimeout(() => r(false), timeoutMs)),
      ]);
      if (!gone) {
        try {
          this.#qemu.kill("SIGKILL");
        } catch { /* gone */ }
      }
      await this.#qemu.status;
    } finally {
      clearTimeout(timer);
      await this.#connection.close();
      await Promise.allSettled([this.#pipes?.stdout?.close(), this.#pipes?.stderr?.close()]);
      await removeState(this.#stateDir);
    }
  }
}

function qemuArgs(options: VmOptions, stateDir: string, socket: string): string[] {
  const img = options.image;
  const fsdev = (id: string, path: string, extra: string) => [
    "-fsdev",
    `local,id=${id},path=${path},security_model=passthrough,multidevs=remap${extra}`,
    "-device",
    `virtio-9p-pci,fsdev=${id},mount_tag=${id}`,
  ];
  const append = [
    "console=ttyS0",
    "quiet",
    "loglevel=1",
    "panic=-1",
    // Under TCG on a loaded host the IO-APIC timer check can miss its ticks and panic the boot
    // ("IO-APIC + timer doesn't work!", seen here); the check proves nothing about a VM.
    "no_timer_check",
    "cgroup_no_v1=all",
    `skiff.agent=${img.agent}`,
    `skiff.deno=${Deno.execPath()}`,
    ...(options.kernelArgs ?? []),
  ].join(" ");
  return [
    ...["-accel", "tcg", "-cpu", "max", "-M", "q35", "-smp", String(options.cpus ?? 1)],
    ...["-m", String(options.memoryMiB ?? 1024), "-nodefaults", "-no-user-config"],
    ...["-no-reboot", "-display", "none"],
    ...["-chardev", "stdio,id=con,signal=off", "-serial", "chardev:con"],
    ...["-kernel", img.kernel, "-initrd", img.initrd, "-append", append],
    ...fsdev("hostroot", "/", ",readonly=on"),
    ...fsdev("skiffshare", `${stateDir}/shared`, ""),
    ...["-device", "virtio-serial-pci,id=vser"],
    ...["-chardev", `socket,id=agent,path=${socket},server=on,wait=off`],
    ...["-device", `virtserialport,bus=vser.0,chardev=agent,name=${AGENT_PORT}`],
  ];
}

/**
 * A watchdog (sh, off the event loop) for the case this process dies first: it then kills QEMU,
 * unmounts the share and removes the state directory (`--one-file-system`: never into a rootfs
 * still bound there). While this process lives it stops its VMs itself; when QEMU ends first,
 * the watchdog waits for this process too and removes what it did not (it was killed between
 * QEMU's exit and its own clean-up: a state dir and a rootfs bind were once left so).
 */
function watchParent(qemu: number, stateDir: string): void {
  // A zombie still answers kill -0, and its parent may reap it late: read its state.
  const script = [
    "alive() { s=$(sed 's/.*) //' /proc/$1/stat 2>/dev/null) && [ \"${s%% *}\" != Z ]; }",
    'while alive "$1" && alive "$2"; do sleep 2; done',
    'kill -9 "$2" 2>/dev/null',
    'while alive "$1"; do sleep 2; done',
    '[ -d "$3" ] || exit 0',
    // Every mount under the share (the containers' rootfs binds), deepest first.
    `awk '{print $5}' /proc/self/mountinfo | grep "^$3/" | sort -r |`,
    '  while read -r m; do umount -l "$m"; done',
    'rm -rf --one-file-system "$3"',
  ].join("\n");
  new Deno.Command("/bin/sh", {
    args: ["-c", script, "skiff-vm-watchdog", String(Deno.pid), String(qemu), stateDir],
    stdin: "null",
    stdout: "null",
    stderr: "null",
  }).spawn().unref();
}

/** Waits until QEMU has created the port's socket (it does so before the guest runs). */
async function waitForSocket(socket: string, exited: Promise<Deno.CommandStatus>): Promise<void> {
  let dead = false;
  void exited.then(() => dead = true);
  for (let i = 0; i < 600; i++) {
    try {
      if (Deno.statSync(socket).isSocket) return;
    } catch { /* not yet */ }
    if (dead) return; // the caller reports QEMU's exit
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function removeState(dir: string): Promise<void> {
  await unmountAll(`${dir}/shared`).catch(() => {});
  await Deno.remove(dir, { recursive: true }).catch(() => {});
}

/** The console's output: passed on as it arrives, its tail kept. */
class ConsoleTail {
  #text = "";
  #decoder = new TextDecoder();
  #onText: ((t: string) => void) | undefined;

  constructor(onText?: (t: string) => void) {
    this.#onText = onText;
  }

  get text(): string {
    return this.#text;
  }

  /** Reads `stream` to its end; a stream closed under it (the VM stopped) just ends. */
  async pump(stream: ReadableStream<Uint8Array>): Promise<void> {
    try {
      for await (const chunk of stream) {
        const t = this.#decoder.decode(chunk, { stream: true }).replaceAll("\r", "");
        this.#onText?.(t);
        this.#text = (this.#text + t).slice(-CONSOLE_KEEP);
      }
    } catch { /* closed by Vm.stop */ }
  }
}
