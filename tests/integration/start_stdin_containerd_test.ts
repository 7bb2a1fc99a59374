// What each real containerd sends on a shim's `start` stdin, and which answer it takes, measured
// on every containerd found (1.6, 1.7, 2.1, 2.2, 2.3, 2.4): a recording shim (a bash wrapper
// named containerd-shim-rec-v2) saves `start`'s stdin and stdout and runs the skiff runc example
// with them; `ctr run` with runtime options (a private runc Root) must then run the container with
// those options in effect. docs/architecture.md's version table is this test's findings.
import assert from "node:assert/strict";
import { fromBinary } from "@bufbuild/protobuf";
import { integrationTest } from "../_integration.ts";
import { containerdVersions, startContainerd } from "../../sdk/testing/containerd.ts";
import { ctrRun } from "../../sdk/testing/ctr.ts";
import { installExampleShims } from "../../sdk/install/examples.ts";
import { parseStartInput } from "../../sdk/shim/boot/start.ts";
import { BootstrapResultSchema } from "../../proto/gen/containerd/runtime/bootstrap/v1/bootstrap_pb.ts";
import { OptionsSchema as CriOptionsSchema } from "../../proto/gen/runtimeoptions/v1/api_pb.ts";

const NS = "skiff-rec";
const RECORDER = `#!/bin/bash
# Records start's stdin and stdout in $SKIFF_REC_DIR, then is the skiff runc example.
set -o pipefail
real="$(dirname "$0")/containerd-shim-skiff-runc-v2"
if [ "\${@: -1}" = start ]; then
  cat >"$SKIFF_REC_DIR/start.in"
  "$real" "$@" <"$SKIFF_REC_DIR/start.in" | tee "$SKIFF_REC_DIR/start.out"
  exit
fi
exec "$real" "$@"
`;

/** How a `start` answer is spelled. */
function answerKind(out: Uint8Array): "plain address" | "JSON" | "BootstrapResult" {
  const text = new TextDecoder().decode(out).trim();
  if (/^unix:\/\/\/\S+$/.test(text)) return "plain address";
  if (text.startsWith("{")) return "JSON";
  const r = fromBinary(BootstrapResultSchema, out);
  assert.match(r.address, /^unix:\/\/\//, `start answer: ${JSON.stringify(text)}`);
  return "BootstrapResult";
}

const versions = containerdVersions();

integrationTest(
  "containerd's start stdin and the answer it takes, per version (a recording shim)",
  { root: true, binaries: ["runc", "busybox", "bash", "tee"] },
  async (t) => {
    const prefix = await Deno.makeTempDir({ prefix: "skiff-rec-" });
    await installExampleShims({
      prefix,
      shims: { "containerd-shim-skiff-runc-v2": "examples/runc/main.ts" },
    });
    await Deno.writeTextFile(`${prefix}/bin/containerd-shim-rec-v2`, RECORDER, { mode: 0o755 });
    try {
      for (const v of versions) {
        await t.step(`containerd ${v.version}`, async () => {
          const rec = `${prefix}/rec-${v.version}`;
          await Deno.mkdir(rec);
          const c = await startContainerd({
            binDir: v.binDir,
            runtimes: { rec: { runtimeType: "io.containerd.rec.v2", binaryDir: `${prefix}/bin` } },
            env: { SKIFF_REC_DIR: rec },
          });
          try {
            const image = await c.importBusyboxImage(NS);
            const root = `${rec}/runc-root`;
            const config = `${rec}/runc.toml`;
            await Deno.writeTextFile(config, `Root = "${root}"\n`);
            const id = "rec";
            const r = await ctrRun(c, {
              image,
              id,
              namespace: NS,
              runtime: "rec",
              runtimeConfigPath: config,
              args: ["sh", "-c", `test -d /proc/1 && echo ran; exit 3`],
            });
            assert.equal(r.code, 3, `${r.stdout}${r.stderr}`);
            assert.equal(r.stdout, "ran\n");
            const input = parseStartInput(await Deno.readFile(`${rec}/start.in`), id, NS);
            const answer = answerKind(await Deno.readFile(`${rec}/start.out`));
            const bootstrap = /^2\.([3-9]|\d\d)\./.test(v.version);
            assert.equal(input.dialect, bootstrap ? "bootstrap" : "legacy");
            // Either way the options arrive, once: the Any itself or a bootstrap extension. ctr
            // sends --runtime-config-path as CRI's runtimeoptions (config_path) for any runtime
            // but io.containerd.runc.*; the runc example reads the TOML, so runc used its Root.
            assert.deepEqual(input.carriers.map((a) => a.typeUrl), ["runtimeoptions.v1.Options"]);
            assert.equal(fromBinary(CriOptionsSchema, input.carriers[0]!.value).configPath, config);
            assert.ok((await Deno.stat(`${root}/${NS}`)).isDirectory, "runc ran with the Root");
            if (bootstrap) {
              assert.equal(input.params?.containerdVersion.replace(/\+.*/, ""), v.version);
            }
            // skiff answers 1.x with the plain address, 2.0-2.2 with JSON, 2.3+ in protobuf.
            assert.equal(
              answer,
              c.major < 2 ? "plain address" : bootstrap ? "BootstrapResult" : "JSON",
            );
          } finally {
            await c.stop();
          }
        });
      }
    } finally {
      await Deno.remove(prefix, { recursive: true }).catch(() => {});
    }
  },
);
