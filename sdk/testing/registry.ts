/**
 * A private OCI distribution registry on 127.0.0.1, for tests that need containerd to pull:
 * Debian's `docker-registry` (the CNCF distribution registry) unpacked into the skiff cache by
 * `tests/setup/registry.sh`, run with its own storage dir on a free port, plain HTTP, no auth.
 * {@linkcode LocalRegistry.push} uploads a locally built OCI image layout (e.g. from
 * `buildBusyboxImage`) over the registry API, so nothing comes from outside the machine.
 *
 * @example Push the busybox image and pull it with a private containerd
 * ```ts ignore
 * import { buildBusyboxImage, startRegistry } from "@skiff/shim/testing";
 *
 * const reg = await startRegistry();
 * try {
 *   const ref = await reg.push("skiff/busybox:1", await buildBusyboxImage());
 *   // ctr -n test images pull --plain-http <ref>
 * } finally {
 *   await reg.stop();
 * }
 * ```
 *
 * @module
 */

import { skiffCacheDir } from "./containerd_versions.ts";
import { type OciDescriptor, type OciIndex, type OciLayout, readOciLayout } from "./oci_layout.ts";

/**
 * A running private registry; {@linkcode startRegistry} makes one.
 *
 * @example Usage
 * ```ts ignore
 * const reg: LocalRegistry = await startRegistry();
 * console.log(reg.host); // "127.0.0.1:41234"
 * await reg.stop();
 * ```
 */
export interface LocalRegistry {
  /** `127.0.0.1:PORT`, the registry host part of the references it serves. */
  readonly host: string;
  /** The private dir (config, log, storage); removed by {@linkcode LocalRegistry.stop}. */
  readonly dir: string;
  /**
   * A containerd registry hosts dir (`<dir>/<host>/hosts.toml`, plain HTTP to this registry):
   * CRI's `config_path`, the Go client's `config.HostDirFromRoot`, or `ctr --hosts-dir`.
   */
  readonly hostsDir: string;
  /**
   * Uploads an OCI image layout (a tar such as `buildBusyboxImage` returns, or a layout dir)
   * under `ref`: its blobs, its manifest (or index and manifests), then the tag.
   *
   * @param ref `name:tag` (or `name@sha256:...`) inside this registry, e.g. `library/busybox:1.36`
   * @param image path of an OCI image layout tar or directory
   * @returns the full reference, `host/name:tag`
   */
  push(ref: string, image: string): Promise<string>;
  /** The registry's log so far. */
  logs(): Promise<string>;
  /** Stops the registry and removes its dir. Safe to call twice. */
  stop(): Promise<void>;
}

/**
 * Options of {@linkcode startRegistry}.
 *
 * @example Usage
 * ```ts ignore
 * const reg = await startRegistry({ dir: "/var/tmp" });
 * ```
 */
export interface StartRegistryOptions {
  /** Parent of the registry's private temp dir. Default: the system temp dir. */
  dir?: string;
  /** The `docker-registry` binary. Default: the one `tests/setup/registry.sh` unpacks. */
  binary?: string;
}

/**
 * Where `tests/setup/registry.sh` unpacks Debian's `docker-registry` binary.
 *
 * @returns an absolute path (not necessarily existing)
 *
 * @example Usage
 * ```ts ignore
 * const bin = registryBinary(); // ~/.cache/skiff/docker-registry/usr/bin/docker-registry
 * ```
 */
export function registryBinary(): string {
  return `${skiffCacheDir()}/docker-registry/usr/bin/docker-registry`;
}

const MANIFEST = "application/vnd.oci.image.manifest.v1+json";
const INDEX = "application/vnd.oci.image.index.v1+json";
const DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json";
const DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Splits `name:tag` / `name@digest` into the repository and the manifest reference. */
function splitRef(ref: string): { name: string; reference: string; full: (h: string) => string } {
  const at = ref.indexOf("@");
  if (at > 0) {
    const name = ref.slice(0, at);
    return { name, reference: ref.slice(at + 1), full: (h) => `${h}/${ref}` };
  }
  const colon = ref.lastIndexOf(":");
  const name = colon > ref.lastIndexOf("/") ? ref.slice(0, colon) : ref;
  const tag = colon > ref.lastIndexOf("/") ? ref.slice(colon + 1) : "latest";
  if (
    !/^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:\/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$/.test(
      name,
    )
  ) {
    throw new Error(`bad repository name "${name}" in "${ref}" (lower case, no host part)`);
  }
  return { name, reference: tag, full: (h) => `${h}/${name}:${tag}` };
}

class RunningRegistry implements LocalRegistry {
  readonly host: string;
  readonly dir: string;
  readonly hostsDir: string;
  readonly #child: Deno.ChildProcess;
  readonly #logPath: string;
  #stopped = false;

  constructor(host: string, dir: string, child: Deno.ChildProcess, logPath: string) {
    this.host = host;
    this.dir = dir;
    this.hostsDir = `${dir}/hosts`;
    this.#child = child;
    this.#logPath = logPath;
  }

  logs(): Promise<string> {
    return Deno.readTextFile(this.#logPath).catch(() => "");
  }

  async #request(method: string, url: string, init: RequestInit = {}): Promise<Response> {
    const full = url.startsWith("http") ? url : `http://${this.host}${url}`;
    const res = await fetch(full, { method, signal: AbortSignal.timeout(60_000), ...init });
    return res;
  }

  async #pushBlob(name: string, digest: string, data: Uint8Array): Promise<void> {
    const head = await this.#request("HEAD", `/v2/${name}/blobs/${digest}`);
    await head.body?.cancel();
    if (head.status === 200) return;
    const start = await this.#request("POST", `/v2/${name}/blobs/uploads/`);
    await start.body?.cancel();
    const location = start.headers.get("location");
    if (start.status !== 202 || !location) {
      throw new Error(`registry ${this.host}: upload of ${name} ${digest}: ${start.status}`);
    }
    const url = new URL(location, `http://${this.host}`);
    url.searchParams.set("digest", digest);
    const put = await this.#request("PUT", url.toString(), {
      body: data as Uint8Array<ArrayBuffer>,
      headers: { "content-type": "application/octet-stream" },
    });
    const text = await put.text();
    if (put.status !== 201) {
      throw new Error(`registry ${this.host}: PUT blob ${name} ${digest}: ${put.status} ${text}`);
    }
  }

  async #putManifest(name: string, reference: string, type: string, data: Uint8Array) {
    const res = await this.#request("PUT", `/v2/${name}/manifests/${reference}`, {
      body: data as Uint8Array<ArrayBuffer>,
      headers: { "content-type": type },
    });
    const text = await res.text();
    if (res.status !== 201) {
      throw new Error(
        `registry ${this.host}: PUT manifest ${name}:${reference}: ${res.status} ${text}`,
      );
    }
  }

  /** Pushes what `desc` points at (children first), by digest. Returns its bytes. */
  async #pushTree(name: string, layout: OciLayout, desc: OciDescriptor): Promise<Uint8Array> {
    const data = layout.blobs.get(desc.digest);
    if (!data) throw new Error(`image layout lacks blob ${desc.digest} (${desc.mediaType})`);
    if (desc.mediaType === MANIFEST || desc.mediaType === DOCKER_MANIFEST) {
      const m = JSON.parse(new TextDecoder().decode(data)) as {
        config: OciDescriptor;
        layers: OciDescriptor[];
      };
      for (const d of [m.config, ...m.layers]) {
        const blob = layout.blobs.get(d.digest);
        if (!blob) throw new Error(`image layout lacks blob ${d.digest} (${d.mediaType})`);
        await this.#pushBlob(name, d.digest, blob);
      }
    } else if (desc.mediaType === INDEX || desc.mediaType === DOCKER_LIST) {
      const idx = JSON.parse(new TextDecoder().decode(data)) as OciIndex;
      for (const child of idx.manifests) await this.#pushTree(name, layout, child);
    } else {
      throw new Error(`cannot push ${desc.digest}: media type ${desc.mediaType}`);
    }
    await this.#putManifest(name, desc.digest, desc.mediaType, data);
    return data;
  }

  async push(ref: string, image: string): Promise<string> {
    if (this.#stopped) throw new Error(`registry ${this.host} is stopped`);
    const { name, reference, full } = splitRef(ref);
    const layout = await readOciLayout(image);
    const entries = layout.index.manifests;
    if (entries.length === 0) throw new Error(`image layout "${image}" lists no manifest`);
    // One image per layout is what the kit writes; with several, push them all as one index.
    let top: { type: string; data: Uint8Array };
    if (entries.length === 1) {
      const d = entries[0]!;
      top = { type: d.mediaType, data: await this.#pushTree(name, layout, d) };
    } else {
      for (const d of entries) await this.#pushTree(name, layout, d);
      const manifests = entries.map(({ annotations: _, ...d }) => d);
      top = {
        type: INDEX,
        data: new TextEncoder().encode(
          JSON.stringify({ schemaVersion: 2, mediaType: INDEX, manifests }),
        ),
      };
    }
    if (!reference.startsWith("sha256:")) {
      await this.#putManifest(name, reference, top.type, top.data);
    }
    return full(this.host);
  }

  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    try {
      this.#child.kill("SIGTERM");
    } catch { /* already gone */ }
    const timer = setTimeout(() => {
      try {
        this.#child.kill("SIGKILL");
      } catch { /* gone */ }
    }, 10_000);
    try {
      await this.#child.status;
    } finally {
      clearTimeout(timer);
    }
    await Deno.remove(this.dir, { recursive: true }).catch(() => undefined);
  }
}

/**
 * Starts a private registry on 127.0.0.1 (a free port the registry picks itself), storing
 * blobs in a new private temp dir. Waits until `GET /v2/` answers 200.
 *
 * @param opts parent dir of the private dir, binary
 * @returns the running registry; call `stop()` in a `finally`
 *
 * @example Usage
 * ```ts ignore
 * const reg = await startRegistry();
 * try {
 *   const ref = await reg.push("skiff/busybox:latest", await buildBusyboxImage());
 *   console.log(ref); // 127.0.0.1:PORT/skiff/busybox:latest
 * } finally {
 *   await reg.stop();
 * }
 * ```
 */
export async function startRegistry(opts: StartRegistryOptions = {}): Promise<LocalRegistry> {
  const bin = opts.binary ?? registryBinary();
  try {
    await Deno.stat(bin);
  } catch {
    throw new Error(`docker-registry not found at "${bin}" (run bash tests/setup/registry.sh)`);
  }
  const dir = await Deno.realPath(
    await Deno.makeTempDir({ prefix: "skiff-registry-", ...(opts.dir ? { dir: opts.dir } : {}) }),
  );
  const logPath = `${dir}/registry.log`;
  // Port 0: the registry binds a free port and logs "listening on 127.0.0.1:PORT" (info level).
  const config = [
    "version: 0.1",
    "log:",
    "  level: info",
    "  accesslog:",
    "    disabled: true",
    "storage:",
    "  filesystem:",
    `    rootdirectory: ${dir}/storage`,
    "  delete:",
    "    enabled: true",
    "http:",
    "  addr: 127.0.0.1:0",
    `  secret: ${crypto.randomUUID()}`,
    "",
  ].join("\n");
  await Deno.writeTextFile(`${dir}/config.yml`, config);
  const child = new Deno.Command("/bin/sh", {
    args: ["-c", 'exec "$0" serve "$1" >>"$2" 2>&1', bin, `${dir}/config.yml`, logPath],
    stdin: "null",
    stdout: "null",
    stderr: "null",
  }).spawn();
  child.unref();
  let exited = false;
  child.status.then(() => exited = true);
  const fail = async (why: string): Promise<never> => {
    try {
      child.kill("SIGKILL");
    } catch { /* gone */ }
    await child.status;
    const log = await Deno.readTextFile(logPath).catch(() => "");
    await Deno.remove(dir, { recursive: true }).catch(() => undefined);
    throw new Error(`docker-registry ${why}:\n${log.split("\n").slice(-20).join("\n")}`);
  };
  const until = Date.now() + 30_000;
  let host: string | undefined;
  for (;;) {
    if (exited) return await fail("exited at start");
    if (Date.now() > until) return await fail("did not answer GET /v2/ within 30 s");
    if (!host) {
      const log = await Deno.readTextFile(logPath).catch(() => "");
      host = log.match(/listening on (127\.0\.0\.1:\d+)/)?.[1];
    }
    if (host) {
      try {
        const res = await fetch(`http://${host}/v2/`, { signal: AbortSignal.timeout(5_000) });
        await res.body?.cancel();
        if (res.status === 200) {
          await Deno.mkdir(`${dir}/hosts/${host}`, { recursive: true });
          await Deno.writeTextFile(
            `${dir}/hosts/${host}/hosts.toml`,
            `server = "http://${host}"\n\n[host."http://${host}"]\n` +
              `  capabilities = ["pull", "resolve", "push"]\n`,
          );
          return new RunningRegistry(host, dir, child, logPath);
        }
      } catch { /* not serving yet */ }
    }
    await sleep(25);
  }
}
