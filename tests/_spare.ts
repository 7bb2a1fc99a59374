/**
 * Helpers for the warm spare's integration tests (tests/integration/spare_containerd_test.ts on the host,
 * tests/guest/spare_cgroup_checks.ts in the cgroup v2 guest): a kit that installs the runc
 * example and starts private containerds with it, and probes for the waiting spare, the server
 * that served a container, the spare's counters and containerd's log. Everything waits by
 * polling with generous bounds; nothing asserts a duration.
 *
 * @module
 */
import assert from "node:assert/strict";
import { create, type MessageInitShape, toBinary } from "@bufbuild/protobuf";
import { type Any, AnySchema } from "@bufbuild/protobuf/wkt";
import {
  type CtrResult,
  type PrivateContainerd,
  startContainerd,
  type StartContainerdOptions,
} from "../sdk/testing/containerd.ts";
import { ctrRun, type CtrRunOptions } from "../sdk/testing/ctr.ts";
import { installExampleShims } from "../sdk/install/examples.ts";
import { OptionsSchema as RuncOptionsSchema } from "../proto/gen/containerd/runc/v1/oci_pb.ts";
import { processAlive } from "../sdk/linux/proc_stat.ts";
import { spareDir } from "../sdk/shim/spare/mod.ts";

export const RUNTIME = "io.containerd.skiff-runc.v2";
export const LAUNCHER = "containerd-shim-skiff-runc-v2";
export const NEEDS = { root: true, binaries: ["runc", "busybox", "sh"] };
export const SPEC_TYPE = "types.containerd.io/opencontainers/runtime-spec/1/Spec";
/** Generous bound for what must happen eventually (never a timing assertion). */
export const EVENTUALLY_MS = 90_000;
export const enc = new TextEncoder();

export function uid(tag: string): string {
  return `${tag}-${crypto.randomUUID().slice(0, 8)}`;
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Polls `probe` until it returns a value other than undefined; fails after a long bound. */
export async function eventually<V>(
  what: string,
  probe: () => V | undefined | Promise<V | undefined>,
  ms = EVENTUALLY_MS,
): Promise<V> {
  const until = Date.now() + ms;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > until) throw new Error(`gave up waiting for ${what}`);
    await sleep(50);
  }
}

export function exists(path: string): boolean {
  try {
    Deno.lstatSync(path);
    return true;
  } catch {
    return false;
  }
}

/** Running (a zombie waiting for init to reap it counts as gone). */
export function alive(pid: number): boolean {
  return processAlive(pid);
}

export function describe(r: CtrResult): string {
  return `code ${r.code}${
    r.timedOut ? " (timed out)" : ""
  }\nstdout: ${r.stdout}\nstderr: ${r.stderr}`;
}

export function bundleOf(c: PrivateContainerd, ns: string, id: string): string {
  return `${c.state}/io.containerd.runtime.v2.task/${ns}/${id}`;
}

/** The counters of the (one) installed launcher; zeros when none was written. */
export async function stats(c: PrivateContainerd): Promise<{ adopted: number; cold: number }> {
  const dir = spareDir(c.address);
  const files: string[] = [];
  try {
    for (const e of Deno.readDirSync(dir)) {
      if (/^stats-.*\.json$/.test(e.name)) files.push(e.name);
    }
  } catch { /* no dir: nothing counted */ }
  assert.ok(files.length <= 1, `one launcher, one counters file: ${files}`);
  if (files.length === 0) return { adopted: 0, cold: 0 };
  const v = JSON.parse(await Deno.readTextFile(`${dir}/${files[0]}`));
  return { adopted: v.adopted, cold: v.cold };
}

/** Waits until the counters read `want` (servers count themselves just after listening). */
export async function statsReach(c: PrivateContainerd, want: { adopted: number; cold: number }) {
  let last = { adopted: -1, cold: -1 };
  try {
    await eventually(`counters ${JSON.stringify(want)}`, async () => {
      last = await stats(c);
      return last.adopted === want.adopted && last.cold === want.cold ? true : undefined;
    }, 30_000);
  } catch {
    assert.deepEqual(last, want, "spare counters");
  }
}

/**
 * The spare waiting for `c`: a `-spare` process of this containerd that holds the lock (its
 * pid is in the lock file) and whose socket exists.
 */
export async function waitingSpare(c: PrivateContainerd): Promise<number> {
  const dir = spareDir(c.address);
  return await eventually(`a waiting spare of ${c.address}`, () => {
    const spares = new Set(c.spares().map((s) => s.pid));
    try {
      for (const e of Deno.readDirSync(dir)) {
        const m = /^spare-(.*)\.lock$/.exec(e.name);
        if (!m) continue;
        const pid = Number(Deno.readTextFileSync(`${dir}/${e.name}`).trim());
        if (spares.has(pid) && exists(`${dir}/spare-${m[1]}.sock`)) return pid;
      }
    } catch { /* not yet */ }
    return undefined;
  });
}

/** The server `start` recorded for a container (the bundle's `shim.pid`). */
export function serverOf(c: PrivateContainerd, ns: string, id: string): Promise<number> {
  return eventually(`shim.pid of ${ns}/${id}`, () => {
    try {
      const pid = Number(Deno.readTextFileSync(`${bundleOf(c, ns, id)}/shim.pid`).trim());
      return pid > 0 ? pid : undefined;
    } catch {
      return undefined;
    }
  });
}

/** containerd's log lines that came from a shim's `serving` line for `id`. */
export async function servingOrigin(c: PrivateContainerd, id: string): Promise<string> {
  return await eventually(`the serving line of ${id} in containerd's log`, async () => {
    for (const line of (await c.logs()).split("\n")) {
      if (!/msg="?serving/.test(line) || !line.includes(`id=${id} `)) continue;
      const m = /origin=(\w+)/.exec(line);
      if (m) return m[1];
    }
    return undefined;
  });
}

/**
 * How an adopted spare's `start` reached it, from its serving line: "door" (the launcher's
 * shell, no Deno `start`) or "socket" (Deno's `start`); "" for a cold server.
 */
export async function servingHandoff(c: PrivateContainerd, id: string): Promise<string> {
  return await eventually(`the serving line of ${id} in containerd's log`, async () => {
    for (const line of (await c.logs()).split("\n")) {
      if (!/msg="?serving/.test(line) || !line.includes(`id=${id} `)) continue;
      return /handoff=(\w+)/.exec(line)?.[1] ?? "";
    }
    return undefined;
  });
}

/**
 * Lines of containerd's log that say it lost a shim (of container `id`, or any). containerd logs
 * them too when a shim exits after its last task: ask while the task still runs.
 */
export async function shimLossLines(c: PrivateContainerd, id?: string): Promise<string[]> {
  return (await c.logs()).split("\n").filter((l) =>
    /shim disconnected|cleaning up after shim|dead shim/i.test(l) &&
    (id === undefined || l.includes(`id=${id}`))
  );
}

export function runcOptions(init: MessageInitShape<typeof RuncOptionsSchema>): Any {
  return create(AnySchema, {
    typeUrl: "containerd.runc.v1.Options",
    value: toBinary(RuncOptionsSchema, create(RuncOptionsSchema, init)),
  });
}

/** The nice value of `pid`'s autogroup, or undefined without autogroups (`/autogroup-N nice 19`). */
export function autogroupNice(pid: number): number | undefined {
  try {
    const m = /\snice\s+(-?\d+)/.exec(Deno.readTextFileSync(`/proc/${pid}/autogroup`));
    return m ? Number(m[1]) : undefined;
  } catch {
    return undefined;
  }
}

export function readProc(pid: number, file: string): string {
  return Deno.readTextFileSync(`/proc/${pid}/${file}`).trim();
}

/** A `binary://` logger that writes the environment it got from the shim server to a file. */
export async function envLogger(dir: string): Promise<string> {
  const path = `${dir}/env-logger.sh`;
  await Deno.writeTextFile(
    path,
    [
      "#!/bin/sh",
      `env > "${dir}/$CONTAINER_ID.env.part" && mv "${dir}/$CONTAINER_ID.env.part" "${dir}/$CONTAINER_ID.env"`,
      "exec 5>&-",
      "cat <&3 >/dev/null &",
      "cat <&4 >/dev/null &",
      "wait",
      "",
    ].join("\n"),
    { mode: 0o755 },
  );
  return path;
}

export function parseEnv(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of text.split("\n")) {
    const i = line.indexOf("=");
    if (i > 0) out.set(line.slice(0, i), line.slice(i + 1));
  }
  return out;
}

/** One version's setup: an installed shim and a way to start containerds with it. */
export interface Kit {
  prefix: string;
  binDir: string;
  image: string;
  started: PrivateContainerd[];
  containerd(opts?: Partial<StartContainerdOptions>): Promise<PrivateContainerd>;
  run(
    c: PrivateContainerd,
    o: Omit<CtrRunOptions, "image" | "runtime" | "runtimeConfigPath">,
  ): Promise<CtrResult>;
  /** Stops every containerd it started and removes its own install. */
  close(): Promise<void>;
}

/**
 * A kit for containerd's binaries in `binDir`. The runc example is installed into a temp prefix
 * that {@linkcode Kit.close} removes, unless `installed` names a prefix that already holds its
 * launcher (the guest gets the host's: bundling under emulation takes minutes).
 */
export async function kit(binDir: string, installed?: string): Promise<Kit> {
  const prefix = installed ?? await Deno.makeTempDir({ prefix: "skiff-spare-" });
  if (!installed) {
    await installExampleShims({ prefix, shims: { [LAUNCHER]: "examples/runc/main.ts" } });
  }
  const runtimeConfigs = new Map<PrivateContainerd, string>();
  const imported = new Set<string>();
  const k: Kit = {
    prefix,
    binDir,
    image: "",
    started: [],
    async containerd(opts = {}) {
      const c = await startContainerd({
        binDir,
        runtimes: { skiff: { runtimeType: RUNTIME, binaryDir: `${prefix}/bin` } },
        ...opts,
      });
      k.started.push(c);
      const cfg = `${c.dir}/runc.toml`;
      // runc state in the private containerd's runc root, so stop() cleans it up.
      await Deno.writeTextFile(cfg, `Root = "${c.runcRoot}"\n`);
      runtimeConfigs.set(c, cfg);
      return c;
    },
    async run(c, o) {
      const ns = o.namespace ?? "skiff-test";
      if (!imported.has(`${c.dir}/${ns}`)) {
        k.image = await c.importBusyboxImage(ns);
        imported.add(`${c.dir}/${ns}`);
      }
      return await ctrRun(c, {
        ...o,
        namespace: ns,
        image: k.image,
        runtime: "skiff",
        runtimeConfigPath: runtimeConfigs.get(c)!,
        timeoutMs: o.timeoutMs ?? 120_000,
      });
    },
    async close() {
      for (const c of k.started) await c.stop();
      if (!installed) await Deno.remove(prefix, { recursive: true }).catch(() => {});
    },
  };
  return k;
}

export async function ok(r: Promise<CtrResult>, what: string): Promise<CtrResult> {
  const res = await r;
  assert.equal(res.code, 0, `${what}: ${describe(res)}`);
  return res;
}
