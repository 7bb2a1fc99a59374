/**
 * What containerd's clients expect from a runc shim beyond the Task API, checked for the skiff
 * runc example and containerd's Go runc shim in the same run, through containerd's gRPC API as
 * its own client and CRI use it (container runtime options, tasks, introspection):
 *
 * - `-info` (containerd 2.x): introspection's `PluginInfo` for the runtime plugin runs
 *   `<shim> -info`; the answer echoes the options and carries runc's `features` document.
 * - `shim_cgroup` (runc options): the shim's server process is put into that cgroup at start.
 * - the bundle is the runtime's working directory: a `BinaryName` wrapper that reads
 *   `./config.json` works for every runc command the shim runs.
 */
import assert from "node:assert/strict";
import { create, fromBinary, type MessageInitShape, toBinary } from "@bufbuild/protobuf";
import { type Any, AnySchema } from "@bufbuild/protobuf/wkt";
import { findExecutable, integrationTest } from "../_integration.ts";
import { makeCgroup, procsOf } from "../_cgroups.ts";
import {
  containerdVersions,
  type PrivateContainerd,
  startContainerd,
} from "../../sdk/testing/containerd.ts";
import { type ContainerdClient, containerdClient } from "../../sdk/testing/containerd_client.ts";
import { createBusyboxBundle, createOciSpec } from "../../sdk/testing/bundle.ts";
import { installExampleShims } from "../../sdk/install/examples.ts";
import { OptionsSchema as RuncOptionsSchema } from "../../proto/gen/containerd/runc/v1/oci_pb.ts";
import {
  RuntimeInfoSchema,
  RuntimeRequestSchema,
} from "../../proto/gen/containerd/types/introspection_pb.ts";
import { decodeOciFeatures, type OciFeatures } from "../../sdk/oci/features.ts";

const NS = "skiff-test";
const SPEC_TYPE = "types.containerd.io/opencontainers/runtime-spec/1/Spec";
const SHIMS = {
  skiff: "io.containerd.skiff-runc.v2",
  go: "io.containerd.runc.v2",
} as const;
type Which = keyof typeof SHIMS;
const NEEDS = { root: true, binaries: ["runc", "busybox", "sh"] };
const enc = new TextEncoder();
const dec = new TextDecoder();

function runcOptions(init: MessageInitShape<typeof RuncOptionsSchema>): Any {
  return create(AnySchema, {
    typeUrl: "containerd.runc.v1.Options",
    value: toBinary(RuncOptionsSchema, create(RuncOptionsSchema, init)),
  });
}

/**
 * The shim server process (not `start`/`delete`) serving `id` for this containerd. Through
 * `c.shims()`, which also lists a warm spare adopted for `id` (its own argv names no container).
 */
function shimServer(c: PrivateContainerd, id: string): number | undefined {
  for (const { pid, argv } of c.shims()) {
    const at = (flag: string) => argv[argv.indexOf(flag) + 1];
    if (argv.indexOf("-id") < 0 || at("-id") !== id) continue;
    if (argv.includes("start") || argv.includes("delete")) continue;
    return pid;
  }
  return undefined;
}

/** A task of `runtime` running `script` (as CRI does: runtime options on the container). */
async function runTask(
  c: PrivateContainerd,
  cl: ContainerdClient,
  o: { id: string; which: Which; options: Any; rootfs: string; script: string; out: string },
): Promise<number> {
  const spec = createOciSpec({ args: ["sh", "-c", o.script] });
  (spec as { root: unknown }).root = { path: o.rootfs, readonly: false };
  await cl.containers.create({
    container: {
      id: o.id,
      runtime: { name: SHIMS[o.which], options: o.options },
      spec: { typeUrl: SPEC_TYPE, value: enc.encode(JSON.stringify(spec)) },
      labels: {},
      extensions: {},
    },
  });
  const task = await cl.tasks.create({
    containerId: o.id,
    stdout: `file://${o.out}`,
    stderr: `file://${o.out}`,
  });
  assert.ok(task.pid > 0, `${o.which}: task ${o.id} has a pid`);
  const server = shimServer(c, o.id);
  assert.ok(server, `${o.which}: a shim server serves ${o.id}`);
  return server;
}

/** Starts the task, waits for its exit and removes it; returns the exit status. */
async function finish(cl: ContainerdClient, id: string): Promise<number> {
  await cl.tasks.start({ containerId: id });
  const { exitStatus } = await cl.tasks.wait({ containerId: id });
  await cl.tasks.delete({ containerId: id });
  await cl.containers.delete({ id });
  return exitStatus;
}

/** Fields of the features document that both shims take from runc unchanged. */
function fromRunc(f: OciFeatures): unknown {
  const linux = f.linux as { namespaces?: unknown; capabilities?: unknown } | undefined;
  return {
    ociVersionMin: f.ociVersionMin,
    ociVersionMax: f.ociVersionMax,
    hooks: f.hooks,
    mountOptions: f.mountOptions,
    namespaces: linux?.namespaces,
    capabilities: linux?.capabilities,
    annotations: f.annotations,
  };
}

for (const v of containerdVersions().filter((v) => /^(1\.6|2\.1|2\.4)\./.test(v.version))) {
  integrationTest(
    `containerd ${v.version}: skiff and Go runc shims honour shim_cgroup, run runc in the bundle${
      Number(v.version.split(".")[0]) >= 2 ? ", answer -info with runc's features" : ""
    }`,
    NEEDS,
    async (t) => {
      const tmp = await Deno.makeTempDir({ prefix: "skiff-runc-opts-" });
      await installExampleShims({
        prefix: tmp,
        shims: { "containerd-shim-skiff-runc-v2": "examples/runc/main.ts" },
      });
      const c = await startContainerd({
        binDir: v.binDir,
        runtimes: { skiff: { runtimeType: SHIMS.skiff, binaryDir: `${tmp}/bin` } },
      });
      const cl = containerdClient(c.address, NS);
      const rootfs = await createBusyboxBundle({ args: ["true"] });
      const runc = findExecutable("runc")!;
      try {
        if (Number(v.version.split(".")[0]) >= 2) {
          await t.step("-info through introspection's PluginInfo: runc's features", async () => {
            const want = JSON.parse(
              dec.decode((await new Deno.Command(runc, { args: ["features"] }).output()).stdout),
            ) as OciFeatures;
            const answers = new Map<Which, OciFeatures>();
            for (const which of ["skiff", "go"] as const) {
              const options = runcOptions({ root: c.runcRoot });
              const request = create(RuntimeRequestSchema, { runtimePath: SHIMS[which], options });
              const resp = await cl.introspection.pluginInfo({
                type: "io.containerd.runtime.v2",
                id: "task",
                options: create(AnySchema, {
                  typeUrl: RuntimeRequestSchema.typeName,
                  value: toBinary(RuntimeRequestSchema, request),
                }),
              });
              assert.equal(resp.extra?.typeUrl, RuntimeInfoSchema.typeName, which);
              const info = fromBinary(RuntimeInfoSchema, resp.extra!.value);
              assert.ok(info.name, `${which}: a runtime name`);
              // The options it was given come back.
              assert.equal(info.options?.typeUrl, "containerd.runc.v1.Options", which);
              assert.equal(fromBinary(RuncOptionsSchema, info.options!.value).root, c.runcRoot);
              assert.ok(info.features, `${which}: features`);
              answers.set(which, decodeOciFeatures(info.features!));
            }
            const skiff = answers.get("skiff")!;
            const go = answers.get("go")!;
            assert.deepEqual(skiff, want, "skiff passes runc's document through");
            assert.deepEqual(fromRunc(skiff), fromRunc(go), "skiff and the Go shim agree");
            // What CRI derives recursive_read_only_mounts from.
            assert.equal(
              skiff.mountOptions?.includes("rro"),
              go.mountOptions?.includes("rro"),
            );
          });
        }

        await t.step("shim_cgroup: the shim server is put into that cgroup at start", async () => {
          for (const which of ["skiff", "go"] as const) {
            // Under the private containerd's cgroup parent, which stop() removes.
            const path = `/${c.cgroupParent}/shim-${which}`;
            const dirs = await makeCgroup(path);
            const id = `shimcg-${which}`;
            const server = await runTask(c, cl, {
              id,
              which,
              options: runcOptions({ root: c.runcRoot, shimCgroup: path }),
              rootfs: `${rootfs.bundle}/rootfs`,
              script: "exit 0",
              out: `${tmp}/${id}.out`,
            });
            for (const d of dirs) {
              assert.ok(procsOf(d).includes(server), `${which}: shim ${server} in ${d}`);
            }
            assert.equal(await finish(cl, id), 0);
          }
        });

        await t.step("the bundle is runc's working directory (a BinaryName wrapper)", async () => {
          const wrapper = `${tmp}/runc-in-bundle`;
          const calls = `${tmp}/calls`;
          // Like runtimes that read the bundle from their working directory: no ./config.json,
          // no runc.
          await Deno.writeTextFile(
            wrapper,
            [
              "#!/bin/sh",
              `[ -r ./config.json ] || { echo "no ./config.json in $(pwd) for: $*" >&2; exit 97; }`,
              `echo "$(pwd -P) $*" >> "${calls}"`,
              `exec "${runc}" "$@"`,
              "",
            ].join("\n"),
            { mode: 0o755 },
          );
          for (const which of ["skiff", "go"] as const) {
            await Deno.writeTextFile(calls, "");
            const id = `cwd-${which}`;
            const out = `${tmp}/${id}.out`;
            await runTask(c, cl, {
              id,
              which,
              options: runcOptions({ root: c.runcRoot, binaryName: wrapper }),
              rootfs: `${rootfs.bundle}/rootfs`,
              script: "echo ran; exit 5",
              out,
            });
            assert.equal(await finish(cl, id), 5, `${which}: ${await Deno.readTextFile(calls)}`);
            assert.equal(await Deno.readTextFile(out), "ran\n");
            const lines = (await Deno.readTextFile(calls)).split("\n").filter(Boolean);
            const bundle = await Deno.realPath(`${c.state}/io.containerd.runtime.v2.task`)
              .then((p) => `${p}/${NS}/${id}`);
            const commands = lines.map((l) => {
              assert.ok(l.startsWith(`${bundle} `), `${which}: ran in ${bundle}: ${l}`);
              return l.split(" ").find((a) => ["create", "start", "delete"].includes(a));
            });
            for (const command of ["create", "start", "delete"]) {
              assert.ok(commands.includes(command), `${which}: runc ${command} ran: ${lines}`);
            }
          }
        });
      } finally {
        await c.stop();
        await rootfs.cleanup();
        await Deno.remove(tmp, { recursive: true }).catch(() => {});
      }
    },
  );
}
