/**
 * The image containerd's integration suite runs in place of its `busybox:1.36`: the kit's
 * busybox image plus one layer with what the suite expects of the real image and Debian's
 * static busybox lacks: the image's users and groups (`www-data` is uid 33), a `bash`, a
 * setuid `/usr/bin/passwd`, and an `nc` that exits 143 on SIGTERM (Debian's small busybox nc
 * installs no handler, so as a container's init it would ignore the suite's SIGTERM and hang
 * TestBindLowPortNonOpt). Written as an OCI image layout directory.
 *
 * @module
 */

import {
  buildBusyboxImage,
  sha256Digest,
  type TarEntry,
  writeTar,
} from "../../../sdk/testing/image.ts";
import { type OciDescriptor, readOciLayout } from "../../../sdk/testing/oci_layout.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();

/** The real busybox image's /etc/passwd and /etc/group (the names and ids the tests use). */
const PASSWD = [
  "root:x:0:0:root:/root:/bin/sh",
  "daemon:x:1:1:daemon:/usr/sbin:/bin/false",
  "bin:x:2:2:bin:/bin:/bin/false",
  "sys:x:3:3:sys:/dev:/bin/false",
  "sync:x:4:100:sync:/bin:/bin/sync",
  "mail:x:8:8:mail:/var/spool/mail:/bin/false",
  "www-data:x:33:33:www-data:/var/www:/bin/false",
  "operator:x:37:37:Operator:/var:/bin/false",
  "nobody:x:65534:65534:nobody:/home:/bin/false",
  "",
].join("\n");
const GROUP = [
  "root:x:0:",
  "daemon:x:1:",
  "bin:x:2:",
  "sys:x:3:",
  "adm:x:4:",
  "tty:x:5:",
  "disk:x:6:",
  "wheel:x:10:root",
  "mail:x:12:",
  "www-data:x:33:",
  "users:x:100:",
  "nogroup:x:65533:",
  "nobody:x:65534:",
  "",
].join("\n");

const NC = [
  "#!/bin/sh",
  "# busybox's small nc has no SIGTERM handler: as a container's init it would ignore SIGTERM.",
  "trap 'exit 143' TERM",
  '/bin/busybox nc "$@" &',
  "wait $!",
  "",
].join("\n");

function file(path: string, text: string, mode = 0o755): TarEntry {
  return { path, type: "file", mode, data: enc.encode(text) };
}

/**
 * Builds the suite's image as an OCI layout directory under `dir`.
 *
 * @returns the layout directory (for `LocalRegistry.push`)
 */
export async function buildSuiteImage(dir: string): Promise<string> {
  const base = await readOciLayout(
    await buildBusyboxImage({ ref: "localhost/skiff/suite-busybox:1" }),
  );
  const top = base.index.manifests[0]!;
  const manifest = JSON.parse(dec.decode(base.blobs.get(top.digest)!)) as {
    config: OciDescriptor;
    layers: OciDescriptor[];
  } & Record<string, unknown>;
  const config = JSON.parse(dec.decode(base.blobs.get(manifest.config.digest)!)) as {
    rootfs: { diff_ids: string[] };
    history?: unknown[];
  } & Record<string, unknown>;

  const layer = writeTar([
    { path: "etc", type: "dir", mode: 0o755 },
    file("etc/passwd", PASSWD, 0o644),
    file("etc/group", GROUP, 0o644),
    { path: "bin", type: "dir", mode: 0o755 },
    file("bin/bash", '#!/bin/sh\nexec /bin/sh "$@"\n'),
    file("bin/nc", NC),
    { path: "usr", type: "dir", mode: 0o755 },
    { path: "usr/bin", type: "dir", mode: 0o755 },
    file("usr/bin/passwd", "#!/bin/sh\nexit 0\n", 0o4755),
    { path: "var", type: "dir", mode: 0o755 },
    { path: "var/www", type: "dir", mode: 0o755 },
  ]);
  const layerDigest = await sha256Digest(layer);
  config.rootfs.diff_ids.push(layerDigest);
  config.history = [...(config.history ?? []), {
    created_by: "skiff containerd-suite: users, bash, setuid passwd, nc",
  }];
  const configBytes = enc.encode(JSON.stringify(config));
  const configDigest = await sha256Digest(configBytes);
  manifest.config = { ...manifest.config, digest: configDigest, size: configBytes.length };
  manifest.layers = [...manifest.layers, {
    mediaType: "application/vnd.oci.image.layer.v1.tar",
    digest: layerDigest,
    size: layer.length,
  }];
  const manifestBytes = enc.encode(JSON.stringify(manifest));
  const manifestDigest = await sha256Digest(manifestBytes);

  const blobs = new Map(base.blobs);
  blobs.set(layerDigest, layer);
  blobs.set(configDigest, configBytes);
  blobs.set(manifestDigest, manifestBytes);
  const out = `${dir}/suite-image`;
  await Deno.mkdir(`${out}/blobs/sha256`, { recursive: true });
  for (const [d, data] of blobs) {
    await Deno.writeFile(`${out}/blobs/sha256/${d.slice("sha256:".length)}`, data);
  }
  await Deno.writeTextFile(`${out}/oci-layout`, '{"imageLayoutVersion":"1.0.0"}');
  await Deno.writeTextFile(
    `${out}/index.json`,
    JSON.stringify({
      schemaVersion: 2,
      mediaType: "application/vnd.oci.image.index.v1+json",
      manifests: [{ ...top, digest: manifestDigest, size: manifestBytes.length }],
    }),
  );
  return out;
}
