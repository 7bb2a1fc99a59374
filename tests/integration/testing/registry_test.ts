import assert from "node:assert/strict";
import { exists, integrationTest } from "../../_integration.ts";
import { containerdVersions, startContainerd } from "../../../sdk/testing/containerd.ts";
import { ctrRun } from "../../../sdk/testing/ctr.ts";
import { buildBusyboxImage } from "../../../sdk/testing/image.ts";
import { readOciLayout } from "../../../sdk/testing/oci_layout.ts";
import { registryBinary, startRegistry } from "../../../sdk/testing/registry.ts";

const versions = containerdVersions();
const newest = versions[versions.length - 1];

Deno.test("readOciLayout() reads the kit's busybox image tar", async () => {
  const dir = await Deno.makeTempDir({ prefix: "skiff-layout-test-" });
  try {
    const tar = await buildBusyboxImage({ dir, ref: "localhost/t/bb:7", cmd: ["true"] });
    const { index, blobs } = await readOciLayout(tar);
    assert.equal(index.manifests.length, 1);
    const m = index.manifests[0]!;
    assert.equal(m.annotations?.["org.opencontainers.image.ref.name"], "7");
    const manifest = JSON.parse(new TextDecoder().decode(blobs.get(m.digest)));
    assert.ok(blobs.has(manifest.config.digest), "config blob present");
    assert.ok(blobs.has(manifest.layers[0].digest), "layer blob present");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

integrationTest(
  "startRegistry(): push the busybox image, containerd pulls it over plain HTTP and runs it",
  {
    root: true,
    binaries: [registryBinary(), "runc", "busybox"],
    check: () => newest ? undefined : "a containerd build (tests/setup/prepare.sh)",
  },
  async (t) => {
    const reg = await startRegistry();
    const dir = reg.dir;
    try {
      assert.match(reg.host, /^127\.0\.0\.1:\d+$/);
      const tar = await buildBusyboxImage({ ref: "localhost/skiff/reg-test:1", cmd: ["true"] });
      const ref = await reg.push("skiff/reg-test:1", tar);
      assert.equal(ref, `${reg.host}/skiff/reg-test:1`);

      await t.step("the registry serves the tag and a second push is a no-op", async () => {
        const res = await fetch(`http://${reg.host}/v2/skiff/reg-test/tags/list`);
        assert.deepEqual(await res.json(), { name: "skiff/reg-test", tags: ["1"] });
        assert.equal(await reg.push("skiff/reg-test:1", tar), ref);
        const { index } = await readOciLayout(tar);
        const head = await fetch(`http://${reg.host}/v2/skiff/reg-test/manifests/1`, {
          method: "HEAD",
          headers: { accept: "application/vnd.oci.image.manifest.v1+json" },
        });
        assert.equal(head.status, 200);
        assert.equal(head.headers.get("docker-content-digest"), index.manifests[0]!.digest);
      });

      await t.step("a bad name is refused before anything is sent", async () => {
        await assert.rejects(() => reg.push("Upper/Case:1", tar), /bad repository name/);
      });

      await t.step(
        `containerd ${newest!.version} pulls with --plain-http and runs it`,
        async () => {
          const c = await startContainerd({ binDir: newest!.binDir });
          try {
            const ns = "skiff-registry";
            const pull = await c.ctr(["images", "pull", "--plain-http", ref], {
              namespace: ns,
              timeoutMs: 60_000,
            });
            assert.equal(pull.code, 0, `ctr images pull: ${pull.stderr}`);
            const r = await ctrRun(c, {
              image: ref,
              id: "from-registry",
              namespace: ns,
              args: ["sh", "-c", "echo pulled"],
            });
            assert.equal(r.code, 0, r.stderr);
            assert.equal(r.stdout.trim(), "pulled");
            // The hosts dir is the other way to reach it (CRI's config_path, the Go client).
            const viaHosts = await c.ctr(
              ["images", "pull", "--hosts-dir", reg.hostsDir, ref],
              { namespace: `${ns}-hosts`, timeoutMs: 60_000 },
            );
            assert.equal(viaHosts.code, 0, `ctr images pull --hosts-dir: ${viaHosts.stderr}`);
          } finally {
            await c.stop();
          }
        },
      );
    } finally {
      await reg.stop();
    }
    assert.equal(await exists(dir), false, "stop() removes the registry's dir");
    await reg.stop(); // twice is fine
  },
);
