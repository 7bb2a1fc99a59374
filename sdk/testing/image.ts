/**
 * A busybox container image built locally as an OCI image-layout tar, so tests can
 * `ctr images import` it: nothing is pulled from a registry.
 *
 * The tar writer is a small ustar implementation (regular files, directories, symlinks) with
 * fixed owners and mtimes, so the same busybox always yields the same digests.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { buildBusyboxImage, BUSYBOX_IMAGE_REF, readOciLayout } from "@skiff/shim/testing";
 *
 * const dir = await Deno.makeTempDir(); // default: $SKIFF_CACHE/images
 * const tar = await buildBusyboxImage({ dir });
 * // ctr -n test images import <tar>   → BUSYBOX_IMAGE_REF
 * const { index } = await readOciLayout(tar);
 * strictEqual(index.manifests[0].annotations?.["io.containerd.image.name"], BUSYBOX_IMAGE_REF);
 * await Deno.remove(dir, { recursive: true });
 * ```
 *
 * @module
 */

import { buildBusyboxRootfs, findBusybox } from "./bundle.ts";

/**
 * The name the image is imported under.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { BUSYBOX_IMAGE_REF } from "@skiff/shim/testing";
 * // With a private containerd c: c.ctr(["run", "--rm", BUSYBOX_IMAGE_REF, "x", "true"], ...)
 * strictEqual(BUSYBOX_IMAGE_REF, "localhost/skiff/busybox:latest"); // never a registry's name
 * ```
 */
export const BUSYBOX_IMAGE_REF: string = "localhost/skiff/busybox:latest";

/**
 * Options of {@linkcode buildBusyboxImage}.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { buildBusyboxImage, type BusyboxImageOptions } from "@skiff/shim/testing";
 * import { readOciLayout } from "@skiff/shim/testing";
 * const dir = await Deno.makeTempDir();
 * const opts: BusyboxImageOptions = { dir, ref: "localhost/me/bb:1", cmd: ["echo", "hi"] };
 * const tar = await buildBusyboxImage(opts);
 * strictEqual(tar.startsWith(`${dir}/`), true);
 * strictEqual(await buildBusyboxImage(opts), tar); // the same image: the tar is reused
 * const { index } = await readOciLayout(tar);
 * strictEqual(index.manifests[0].annotations?.["org.opencontainers.image.ref.name"], "1");
 * await Deno.remove(dir, { recursive: true });
 * ```
 */
export interface BusyboxImageOptions {
  /** Directory the tar is written to (created if missing). Default `$SKIFF_CACHE/images`. */
  dir?: string;
  /** Image name recorded in the layout's index. Default {@linkcode BUSYBOX_IMAGE_REF}. */
  ref?: string;
  /** Which busybox to put in the image. Default: the host's. */
  busybox?: string;
  /** The image config's `Entrypoint`. Default: none. */
  entrypoint?: string[];
  /** The image config's `Cmd`. Default `["sh"]`. */
  cmd?: string[];
}

/**
 * One archive member.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { type TarEntry, writeTar } from "./image.ts";
 * const e: TarEntry = { path: "bin/sh", type: "symlink", mode: 0o777, linkname: "busybox" };
 * const tar = writeTar([e]);
 * strictEqual(String.fromCharCode(tar[156]), "2"); // ustar's typeflag for a symlink
 * ```
 */
export interface TarEntry {
  /** Path inside the archive, without a leading `/` (directories without a trailing `/`). */
  path: string;
  /** Member kind. */
  type: "file" | "dir" | "symlink";
  /** Permission bits. */
  mode: number;
  /** File contents (type `file`). */
  data?: Uint8Array;
  /** Link target (type `symlink`). */
  linkname?: string;
}

const enc = new TextEncoder();

// ustar keeps numbers as NUL-terminated octal strings.
function octal(buf: Uint8Array, off: number, len: number, value: number): void {
  const s = value.toString(8).padStart(len - 1, "0");
  if (s.length > len - 1) throw new RangeError(`tar field overflow: ${value}`);
  buf.set(enc.encode(s), off);
  buf[off + len - 1] = 0;
}

function field(buf: Uint8Array, off: number, len: number, text: string): void {
  const b = enc.encode(text);
  if (b.length > len) throw new RangeError(`tar field too long: "${text}"`);
  buf.set(b, off);
}

function header(e: TarEntry, size: number): Uint8Array {
  const h = new Uint8Array(512);
  let name = e.type === "dir" ? `${e.path}/` : e.path;
  let prefix = "";
  if (enc.encode(name).length > 100) {
    // Split at a "/" so the tail fits in name (100 bytes) and the head in prefix (155).
    let cut = -1;
    for (let i = name.indexOf("/"); i >= 0; i = name.indexOf("/", i + 1)) {
      if (i <= 155 && enc.encode(name.slice(i + 1)).length <= 100) {
        cut = i;
        break;
      }
    }
    if (cut < 0) throw new RangeError(`tar path too long: "${e.path}"`);
    prefix = name.slice(0, cut);
    name = name.slice(cut + 1);
  }
  field(h, 0, 100, name);
  octal(h, 100, 8, e.mode & 0o7777);
  octal(h, 108, 8, 0);
  octal(h, 116, 8, 0);
  octal(h, 124, 12, size);
  octal(h, 136, 12, 1700000000); // fixed mtime: reproducible digests
  h[156] = e.type === "file" ? 0x30 : e.type === "dir" ? 0x35 : 0x32;
  if (e.linkname) field(h, 157, 100, e.linkname);
  field(h, 257, 6, "ustar");
  h[262] = 0;
  field(h, 263, 2, "00");
  field(h, 265, 32, "root");
  field(h, 297, 32, "root");
  field(h, 345, 155, prefix);
  // The checksum is computed with its own field read as eight spaces.
  h.fill(0x20, 148, 156);
  let sum = 0;
  for (const b of h) sum += b;
  octal(h, 148, 7, sum);
  h[155] = 0x20;
  return h;
}

/**
 * Serializes entries as a ustar archive (two zero blocks at the end).
 *
 * @param entries members, written in the given order
 * @returns the archive bytes
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { writeTar } from "./image.ts";
 * const tar = writeTar([{ path: "hello", type: "file", mode: 0o644, data: new Uint8Array(3) }]);
 * strictEqual(tar.length, 512 * 4);
 * ```
 */
export function writeTar(entries: TarEntry[]): Uint8Array {
  const parts: Uint8Array[] = [];
  let total = 0;
  for (const e of entries) {
    const data = e.type === "file" ? e.data ?? new Uint8Array() : new Uint8Array();
    const h = header(e, data.length);
    parts.push(h);
    total += 512;
    if (data.length > 0) {
      parts.push(data);
      const pad = (512 - (data.length % 512)) % 512;
      parts.push(new Uint8Array(pad));
      total += data.length + pad;
    }
  }
  parts.push(new Uint8Array(1024));
  total += 1024;
  const out = new Uint8Array(total);
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.length;
  }
  return out;
}

/**
 * Reads a directory tree into tar entries, sorted by path so the output is reproducible.
 *
 * @param dir the directory whose contents become the archive root
 * @returns entries for every directory, regular file and symlink below `dir`
 *
 * @example Usage
 * ```ts
 * import { deepStrictEqual } from "node:assert/strict";
 * import { tarEntriesOf } from "./image.ts";
 * const dir = await Deno.makeTempDir(); // stands in for a rootfs
 * await Deno.mkdir(`${dir}/bin`);
 * await Deno.writeTextFile(`${dir}/bin/busybox`, "");
 * await Deno.symlink("busybox", `${dir}/bin/sh`);
 * const entries = await tarEntriesOf(dir); // then writeTar(entries) is the layer
 * deepStrictEqual(entries.map((e) => `${e.type} ${e.path}`), [
 *   "dir bin",
 *   "file bin/busybox",
 *   "symlink bin/sh",
 * ]);
 * await Deno.remove(dir, { recursive: true });
 * ```
 */
export async function tarEntriesOf(dir: string): Promise<TarEntry[]> {
  const out: TarEntry[] = [];
  async function walk(rel: string): Promise<void> {
    const names: string[] = [];
    for await (const d of Deno.readDir(rel ? `${dir}/${rel}` : dir)) names.push(d.name);
    names.sort();
    for (const n of names) {
      const path = rel ? `${rel}/${n}` : n;
      const full = `${dir}/${path}`;
      const st = await Deno.lstat(full);
      const mode = (st.mode ?? 0o644) & 0o7777;
      if (st.isSymlink) {
        out.push({ path, type: "symlink", mode: 0o777, linkname: await Deno.readLink(full) });
      } else if (st.isDirectory) {
        out.push({ path, type: "dir", mode });
        await walk(path);
      } else if (st.isFile) {
        out.push({ path, type: "file", mode, data: await Deno.readFile(full) });
      }
    }
  }
  await walk("");
  return out;
}

/**
 * The sha256 of some bytes as an OCI digest string.
 *
 * @param data bytes to hash
 * @returns `sha256:<hex>`
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { sha256Digest } from "./image.ts";
 * const d = await sha256Digest(new Uint8Array());
 * strictEqual(d.startsWith("sha256:e3b0c442"), true);
 * ```
 */
export async function sha256Digest(data: Uint8Array): Promise<string> {
  const h = new Uint8Array(await crypto.subtle.digest("SHA-256", data as Uint8Array<ArrayBuffer>));
  return `sha256:${Array.from(h, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

function goArch(): string {
  switch (Deno.build.arch) {
    case "x86_64":
      return "amd64";
    case "aarch64":
      return "arm64";
    default:
      return Deno.build.arch;
  }
}

/** The cache dir tests share: `$SKIFF_CACHE`, else `$HOME/.cache/skiff`. */
function cacheDir(): string {
  return Deno.env.get("SKIFF_CACHE") ?? `${Deno.env.get("HOME") ?? "/root"}/.cache/skiff`;
}

/**
 * Builds the OCI image layout tar for a one-layer busybox image: `oci-layout`, `index.json`
 * (with `org.opencontainers.image.ref.name` and containerd's `io.containerd.image.name`), a
 * manifest, a config with `rootfs.diff_ids` and `Cmd ["sh"]` (or the given entrypoint and
 * command), and an uncompressed layer.
 *
 * The file name contains the manifest digest, so an existing tar is reused as is.
 *
 * @param opts where to write the tar and which name to record
 * @returns the tar's absolute path
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { buildBusyboxImage } from "@skiff/shim/testing";
 * import { readOciLayout } from "@skiff/shim/testing";
 * const dir = await Deno.makeTempDir();
 * const tar = await buildBusyboxImage({ dir }); // containerd: ctr -n ns images import <tar>
 * const { index, blobs } = await readOciLayout(tar);
 * const manifest = JSON.parse(new TextDecoder().decode(blobs.get(index.manifests[0].digest)));
 * strictEqual(manifest.layers.length, 1);
 * await Deno.remove(dir, { recursive: true });
 * ```
 */
export async function buildBusyboxImage(opts: BusyboxImageOptions = {}): Promise<string> {
  // long: the image layout written top to bottom (layer, config, manifest, index, tar)
  const ref = opts.ref ?? BUSYBOX_IMAGE_REF;
  const busybox = opts.busybox ?? findBusybox();
  if (!busybox) throw new Error("busybox not found: install the busybox-static package");
  const tmp = await Deno.makeTempDir({ prefix: "skiff-image-" });
  let layer: Uint8Array;
  try {
    await buildBusyboxRootfs(tmp, { busybox });
    layer = writeTar(await tarEntriesOf(tmp));
  } finally {
    await Deno.remove(tmp, { recursive: true });
  }
  const layerDigest = await sha256Digest(layer);
  const config = enc.encode(JSON.stringify({
    architecture: goArch(),
    os: "linux",
    config: {
      Env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
      ...(opts.entrypoint ? { Entrypoint: opts.entrypoint } : {}),
      Cmd: opts.cmd ?? ["sh"],
      WorkingDir: "/",
    },
    rootfs: { type: "layers", diff_ids: [layerDigest] },
    history: [{ created_by: "skiff testing: busybox rootfs" }],
  }));
  const configDigest = await sha256Digest(config);
  const manifest = enc.encode(JSON.stringify({
    schemaVersion: 2,
    mediaType: "application/vnd.oci.image.manifest.v1+json",
    config: {
      mediaType: "application/vnd.oci.image.config.v1+json",
      digest: configDigest,
      size: config.length,
    },
    layers: [{
      mediaType: "application/vnd.oci.image.layer.v1.tar",
      digest: layerDigest,
      size: layer.length,
    }],
  }));
  const manifestDigest = await sha256Digest(manifest);
  const tag = ref.slice(ref.lastIndexOf(":") + 1);
  const index = enc.encode(JSON.stringify({
    schemaVersion: 2,
    mediaType: "application/vnd.oci.image.index.v1+json",
    manifests: [{
      mediaType: "application/vnd.oci.image.manifest.v1+json",
      digest: manifestDigest,
      size: manifest.length,
      platform: { architecture: goArch(), os: "linux" },
      annotations: {
        // containerd names the image from this full reference; the OCI annotation is the tag.
        "io.containerd.image.name": ref,
        "org.opencontainers.image.ref.name": tag,
      },
    }],
  }));
  const blob = (d: string) => `blobs/sha256/${d.slice("sha256:".length)}`;
  const tar = writeTar([
    {
      path: "oci-layout",
      type: "file",
      mode: 0o644,
      data: enc.encode('{"imageLayoutVersion":"1.0.0"}'),
    },
    { path: "index.json", type: "file", mode: 0o644, data: index },
    { path: "blobs", type: "dir", mode: 0o755 },
    { path: "blobs/sha256", type: "dir", mode: 0o755 },
    { path: blob(configDigest), type: "file", mode: 0o644, data: config },
    { path: blob(layerDigest), type: "file", mode: 0o644, data: layer },
    { path: blob(manifestDigest), type: "file", mode: 0o644, data: manifest },
  ]);
  const dir = opts.dir ?? `${cacheDir()}/images`;
  await Deno.mkdir(dir, { recursive: true });
  const safeRef = ref.replace(/[^A-Za-z0-9._-]+/g, "_");
  const path = `${await Deno.realPath(dir)}/${safeRef}-${manifestDigest.slice(7, 19)}.tar`;
  try {
    if ((await Deno.stat(path)).size === tar.length) return path;
  } catch { /* not built yet */ }
  // Write then rename: parallel test processes may build the same image at once.
  const part = `${path}.${Deno.pid}.${crypto.randomUUID().slice(0, 8)}.part`;
  await Deno.writeFile(part, tar);
  await Deno.rename(part, path);
  return path;
}

/**
 * The name the pause (pod sandbox) image is imported under.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { PAUSE_IMAGE_REF } from "@skiff/shim/testing";
 * const cfg = { sandboxImage: PAUSE_IMAGE_REF }; // CRI's sandbox image: never pulled
 * strictEqual(cfg.sandboxImage.startsWith("localhost/"), true);
 * ```
 */
export const PAUSE_IMAGE_REF: string = "localhost/skiff/pause:latest";

/**
 * The pause command: a shell that waits forever and exits 0 on SIGTERM or SIGINT. As a pid
 * namespace's init it gets only the signals it handles, so the trap is what makes it stoppable
 * without SIGKILL, like Kubernetes' own pause.
 */
const PAUSE_COMMAND: readonly string[] = [
  "/bin/sh",
  "-c",
  "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done",
];

/**
 * Builds the pause image CRI runs as each pod's sandbox container: the busybox image of
 * {@linkcode buildBusyboxImage} whose entrypoint waits until SIGTERM or SIGINT. Built locally,
 * so a private containerd never pulls a sandbox image.
 *
 * @param opts where to write the tar (`ref` defaults to {@linkcode PAUSE_IMAGE_REF})
 * @returns the tar's absolute path
 *
 * @example Usage
 * ```ts
 * import { deepStrictEqual } from "node:assert/strict";
 * import { buildPauseImage } from "@skiff/shim/testing";
 * import { readOciLayout } from "@skiff/shim/testing";
 * const dir = await Deno.makeTempDir();
 * const tar = await buildPauseImage({ dir }); // ctr -n k8s.io images import <tar>
 * const { index, blobs } = await readOciLayout(tar);
 * const text = (d: string) => JSON.parse(new TextDecoder().decode(blobs.get(d)));
 * const config = text(text(index.manifests[0].digest).config.digest);
 * deepStrictEqual(config.config.Entrypoint.slice(0, 2), ["/bin/sh", "-c"]); // the waiting shell
 * await Deno.remove(dir, { recursive: true });
 * ```
 */
export function buildPauseImage(
  opts: Omit<BusyboxImageOptions, "entrypoint" | "cmd"> = {},
): Promise<string> {
  return buildBusyboxImage({
    ref: PAUSE_IMAGE_REF,
    ...opts,
    entrypoint: [...PAUSE_COMMAND],
    cmd: [],
  });
}
