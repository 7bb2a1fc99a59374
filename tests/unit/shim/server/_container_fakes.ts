// Fakes for the container and create unit tests: a runtime and a platform that record what
// they are asked, and the deps a Container needs (the router over the fake platform's exits).
import { create } from "@bufbuild/protobuf";
import { type Any, AnySchema } from "@bufbuild/protobuf/wkt";
import type { ContainerRuntime, RuntimeProcess } from "../../../../sdk/shim/runtime.ts";
import type { ReapedExit, ShimPlatform } from "../../../../sdk/shim/server/platform.ts";
import type { Container, ContainerDeps } from "../../../../sdk/shim/server/container.ts";
import { ExitRouter } from "../../../../sdk/shim/server/exits.ts";
import { Logger } from "../../../../sdk/shim/logger.ts";

/** Records every call as a line; `fail` makes the named call reject. */
export class FakeRuntime implements ContainerRuntime {
  calls: string[] = [];
  fail = new Set<string>();
  nextPid = 100;
  #call(line: string): Promise<void> {
    this.calls.push(line);
    const name = line.split(" ")[0];
    return this.fail.has(name) ? Promise.reject(new Error(`${name} failed`)) : Promise.resolve();
  }
  async create(id: string): Promise<RuntimeProcess> {
    await this.#call(`create ${id}`);
    return { pid: this.nextPid++ };
  }
  start(id: string) {
    return this.#call(`start ${id}`);
  }
  kill(id: string, sig: number, o?: { all?: boolean }) {
    return this.#call(`kill ${id} ${sig}${o?.all ? " all" : ""}`);
  }
  delete(id: string, o?: { force?: boolean }) {
    return this.#call(`delete ${id}${o?.force ? " force" : ""}`);
  }
  /** While set, an exec waits for it before it reports its process. */
  execGate: Promise<void> | undefined;
  /** Whether an exec's report owns its stdin and terminal (as an agent's does). */
  ownsStdio = false;
  async exec(id: string, execId: string): Promise<RuntimeProcess> {
    await this.#call(`exec ${id} ${execId}`);
    await this.execGate;
    const pid = this.nextPid++;
    if (!this.ownsStdio) return { pid };
    return {
      pid,
      closeStdin: () => this.#call(`close stdin ${pid}`),
      resize: (w, h) => this.#call(`resize ${pid} ${w}x${h}`),
    };
  }
  ps() {
    return Promise.resolve([]);
  }
  pause(id: string) {
    return this.#call(`pause ${id}`);
  }
  resume(id: string) {
    return this.#call(`resume ${id}`);
  }
  update() {
    return Promise.resolve();
  }
  checkpoint() {
    return Promise.resolve();
  }
  async restore(
    id: string,
    o: { imagePath: string; workPath?: string; noSubreaper?: boolean },
  ): Promise<RuntimeProcess> {
    await this.#call(`restore ${id} ${o.imagePath} ${o.workPath} subreaper=${!o.noSubreaper}`);
    return { pid: this.nextPid++ };
  }
}

/** Records mounts, I/O and kills; `reap` reports an exit as the reaper would. */
export class FakePlatform implements ShimPlatform {
  calls: string[] = [];
  failIoReady = false;
  /** While set, opening I/O waits for it (a slow FIFO open). */
  ioGate: Promise<void> | undefined;
  #listeners = new Set<(e: ReapedExit) => void>();
  onExit(l: (e: ReapedExit) => void) {
    this.#listeners.add(l);
    return () => this.#listeners.delete(l);
  }
  reap(pid: number, status: number) {
    for (const l of this.#listeners) l({ pid, status, exitedAt: new Date() });
  }
  spawn(cmd: Deno.Command) {
    return cmd.spawn();
  }
  async openIo(stdio: { stdout: string }) {
    this.calls.push(`open io ${stdio.stdout}`);
    await this.ioGate;
    return {
      io: {
        terminal: false,
        stdio: { stdin: "null", stdout: "null", stderr: "null" } as const,
        attach() {},
        streams: () => ({}),
      },
      ready: () =>
        this.failIoReady ? Promise.reject(new Error("stdio not ready")) : Promise.resolve(),
      handle: {
        closeStdin: () => {
          this.calls.push(`close stdin ${stdio.stdout}`);
          return Promise.resolve();
        },
        drain: () => Promise.resolve(),
        close: () => {
          this.calls.push(`close io ${stdio.stdout}`);
          return Promise.resolve();
        },
        resize: (w: number, h: number) => void this.calls.push(`resize ${stdio.stdout} ${w}x${h}`),
      },
    };
  }
  mount(_m: unknown[], target: string) {
    this.calls.push(`mount ${target}`);
    return Promise.resolve();
  }
  unmount(target: string) {
    this.calls.push(`unmount ${target}`);
    return Promise.resolve();
  }
  stats(pid: number): Promise<Any> {
    this.calls.push(`stats ${pid}`);
    return Promise.resolve(create(AnySchema, {}));
  }
  watchOom(pid: number) {
    this.calls.push(`watch oom ${pid}`);
    return Promise.resolve({ close: () => void this.calls.push(`unwatch oom ${pid}`) });
  }
  kill(pid: number, signal: number) {
    this.calls.push(`kill ${pid} ${signal}`);
  }
}

/** The deps of containers over `platform`, with the events published as topics. */
export function deps(platform: FakePlatform, listed: Container[] = []) {
  const events: string[] = [];
  const d: ContainerDeps = {
    platform,
    events: { publish: (topic: string) => void events.push(topic) },
    logger: new Logger(),
    exits: new ExitRouter({
      platform,
      events: { publish: (topic: string) => void events.push(topic) },
      logger: new Logger(),
      containers: () => listed,
    }),
  };
  return { deps: d, events, listed };
}
