/**
 * Reads an OCI image layout (a directory, or a tar of one such as
 * {@linkcode buildBusyboxImage} writes) into memory: its `index.json` and every blob by digest.
 * The registry pusher walks it from the index down.
 *
 * @module
 */

/**
 * An OCI image layout held in memory.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { buildBusyboxImage } from "@skiff/shim/testing";
 * import { type OciLayout, readOciLayout } from "@skiff/shim/testing";
 * const dir = await Deno.makeTempDir();
 * const tar = await buildBusyboxImage({ dir });
 * const layout: OciLayout = await readOciLayout(tar);
 * strictEqual(layout.index.manifests.length, 1);
 * strictEqual(layout.blobs.size, 3); // manifest, config, layer
 * await Deno.remove(dir, { recursive: true });
 * ```
 */
export interface OciLayout {
  /** The parsed `index.json`. */
  index: OciIndex;
  /** Blob bytes by digest (`sha256:<hex>`). */
  blobs: Map<string, Uint8Array>;
}

/**
 * A content descriptor (OCI image spec).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { sha256Digest } from "./image.ts";
 * import type { OciDescriptor } from "@skiff/shim/testing";
 * const body = new TextEncoder().encode("{}");
 * const d: OciDescriptor = {
 *   mediaType: "application/vnd.oci.image.manifest.v1+json",
 *   digest: await sha256Digest(body),
 *   size: body.length,
 * };
 * strictEqual(d.digest, "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a");
 * ```
 */
export interface OciDescriptor {
  /** Media type of the referenced content. */
  mediaType: string;
  /** `sha256:<hex>` of the content. */
  digest: string;
  /** Size in bytes. */
  size: number;
  /** Annotations (e.g. `org.opencontainers.image.ref.name`). */
  annotations?: Record<string, string>;
  /** Platform of a manifest in an index. */
  platform?: { architecture: string; os: string; variant?: string };
}

/**
 * An image index (`index.json`, or an index blob).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { OciIndex } from "@skiff/shim/testing";
 * const index: OciIndex = { schemaVersion: 2, manifests: [] };
 * strictEqual(index.manifests[0], undefined); // an empty layout names no image
 * ```
 */
export interface OciIndex {
  /** Always 2. */
  schemaVersion: number;
  /** `application/vnd.oci.image.index.v1+json` (optional in `index.json`). */
  mediaType?: string;
  /** The manifests (or nested indexes) it lists. */
  manifests: OciDescriptor[];
}

const dec = new TextDecoder();

function cString(b: Uint8Array): string {
  const end = b.indexOf(0);
  return dec.decode(end < 0 ? b : b.subarray(0, end));
}

/** Regular files of a ustar archive by path (without a leading `./`). */
function untar(tar: Uint8Array): Map<string, Uint8Array> {
  const files = new Map<string, Uint8Array>();
  let off = 0;
  while (off + 512 <= tar.length) {
    const h = tar.subarray(off, off + 512);
    if (h.every((b) => b === 0)) break;
    const name = cString(h.subarray(0, 100));
    const prefix = cString(h.subarray(345, 500));
    const size = parseInt(cString(h.subarray(124, 136)).trim() || "0", 8);
    const type = h[156];
    const path = (prefix ? `${prefix}/${name}` : name).replace(/^\.\//, "");
    off += 512;
    if (type === 0x30 || type === 0) files.set(path, tar.slice(off, off + size));
    off += Math.ceil(size / 512) * 512;
  }
  return files;
}

/**
 * Reads an OCI image layout from a directory or a tar file.
 *
 * @param path a layout directory, or a tar of one
 * @returns the index and every blob under `blobs/sha256`
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { buildBusyboxImage } from "@skiff/shim/testing";
 * import { readOciLayout } from "@skiff/shim/testing";
 * const dir = await Deno.makeTempDir();
 * const tar = await buildBusyboxImage({ dir });
 * const { index, blobs } = await readOciLayout(tar);
 * strictEqual(blobs.has(index.manifests[0].digest), true);
 * await Deno.remove(dir, { recursive: true });
 * ```
 */
export async function readOciLayout(path: string): Promise<OciLayout> {
  const files = new Map<string, Uint8Array>();
  if ((await Deno.stat(path)).isDirectory) {
    files.set("index.json", await Deno.readFile(`${path}/index.json`));
    for await (const e of Deno.readDir(`${path}/blobs/sha256`)) {
      if (e.isFile) {
        files.set(`blobs/sha256/${e.name}`, await Deno.readFile(`${path}/blobs/sha256/${e.name}`));
      }
    }
  } else {
    for (const [p, data] of untar(await Deno.readFile(path))) files.set(p, data);
  }
  const indexBytes = files.get("index.json");
  if (!indexBytes) throw new Error(`"${path}" is not an OCI image layout: no index.json`);
  const blobs = new Map<string, Uint8Array>();
  for (const [p, data] of files) {
    const m = p.match(/^blobs\/sha256\/([0-9a-f]{64})$/);
    if (m) blobs.set(`sha256:${m[1]}`, data);
  }
  return { index: JSON.parse(dec.decode(indexBytes)) as OciIndex, blobs };
}
