// `-info`: the RuntimeInfo a shim prints, decoded as containerd decodes it.
import assert from "node:assert/strict";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { type Any, AnySchema } from "@bufbuild/protobuf/wkt";
import { RuntimeInfoSchema } from "../../../../proto/gen/containerd/types/introspection_pb.ts";
import { OptionsSchema as RuncOptionsSchema } from "../../../../proto/gen/containerd/runc/v1/oci_pb.ts";
import { OptionsSchema as CriOptionsSchema } from "../../../../proto/gen/runtimeoptions/v1/api_pb.ts";
import { runInfo } from "../../../../sdk/shim/boot/info.ts";
import { runShimWith } from "../../../../sdk/shim/boot/run.ts";
import { SKIFF_VERSION } from "../../../../sdk/shim/version.ts";
import { optionsMessage, RUNC_OPTIONS_CODEC } from "../../../../sdk/shim/options.ts";
import { Shim } from "../../../../sdk/shim/shim.ts";
import type { ContainerRuntime } from "../../../../sdk/shim/runtime.ts";
import {
  decodeOciFeatures,
  OCI_FEATURES_TYPE_URL,
  ociFeaturesAny,
} from "../../../../sdk/oci/features.ts";
import { findExecutable, integrationTest } from "../../../_integration.ts";

const EXAMPLE = new URL("../../../../examples/runc/main.ts", import.meta.url).pathname;

interface Opts {
  binary: string;
}

/** A shim whose features name the binary its options chose, or fail for "broken". */
class FakeShim extends Shim<Opts> {
  readonly runtimeName = "io.containerd.fake.v1";
  override readonly version = "9.8.7";
  readonly options = {
    defaults: (): Opts => ({ binary: "runc" }),
    messages: [optionsMessage(RUNC_OPTIONS_CODEC, (m, base: Opts): Opts => ({
      binary: m.binaryName || base.binary,
    }))],
  };
  seen: Opts[] = [];
  runtime(): ContainerRuntime {
    throw new Error("-info must not build a container runtime");
  }
  override features(o: Opts): Promise<Any | undefined> {
    this.seen.push(o);
    if (o.binary === "broken") return Promise.reject(new Error("broken has no features\nusage"));
    return Promise.resolve(ociFeaturesAny({ mountOptions: ["rro"], annotations: { b: o.binary } }));
  }
}

function runcOptionsAny(binaryName: string): Any {
  return create(AnySchema, {
    typeUrl: "containerd.runc.v1.Options",
    value: toBinary(RuncOptionsSchema, create(RuncOptionsSchema, { binaryName, root: "/r" })),
  });
}

Deno.test("-info without options: name, version and the default runtime's features", async () => {
  const shim = new FakeShim();
  const info = fromBinary(RuntimeInfoSchema, await runInfo(shim, new Uint8Array()));
  assert.equal(info.name, "io.containerd.fake.v1");
  assert.equal(info.version?.version, "9.8.7");
  assert.equal(info.options, undefined);
  assert.equal(info.features?.typeUrl, OCI_FEATURES_TYPE_URL);
  assert.deepEqual(decodeOciFeatures(info.features!), {
    mountOptions: ["rro"],
    annotations: { b: "runc" },
  });
  assert.deepEqual(shim.seen, [{ binary: "runc" }]);
});

Deno.test("-info echoes the options it was given and asks the runtime those options name", async () => {
  const shim = new FakeShim();
  const given = runcOptionsAny("/opt/runc-wrapper");
  const info = fromBinary(RuntimeInfoSchema, await runInfo(shim, toBinary(AnySchema, given)));
  assert.equal(info.options?.typeUrl, "containerd.runc.v1.Options");
  const echoed = fromBinary(RuncOptionsSchema, info.options!.value);
  assert.equal(echoed.binaryName, "/opt/runc-wrapper");
  assert.equal(echoed.root, "/r");
  assert.deepEqual(shim.seen, [{ binary: "/opt/runc-wrapper" }]);
  assert.equal(decodeOciFeatures(info.features!).annotations?.b, "/opt/runc-wrapper");
});

Deno.test("-info answers without features when the runtime cannot tell, and says so once", async () => {
  const warnings: string[] = [];
  const out = await runInfo(
    new FakeShim(),
    toBinary(AnySchema, runcOptionsAny("broken")),
    (m) => warnings.push(m),
  );
  const info = fromBinary(RuntimeInfoSchema, out);
  assert.equal(info.features, undefined);
  assert.equal(info.name, "io.containerd.fake.v1");
  assert.deepEqual(warnings, ["io.containerd.fake.v1 -info: no features: broken has no features"]);
});

Deno.test("-info rejects options it cannot use, naming them", async () => {
  const cri = create(AnySchema, {
    typeUrl: "runtimeoptions.v1.Options",
    value: toBinary(CriOptionsSchema, create(CriOptionsSchema, { typeUrl: "x" })),
  });
  await assert.rejects(
    runInfo(new FakeShim(), toBinary(AnySchema, cri)),
    /options type "runtimeoptions.v1.Options" is not accepted by io.containerd.fake.v1/,
  );
  await assert.rejects(
    runInfo(new FakeShim(), new Uint8Array([0xff, 0xff, 0xff])),
    /runtime options on stdin are not a protobuf Any/,
  );
});

Deno.test("decodeOciFeatures() refuses another type URL", () => {
  assert.throws(
    () => decodeOciFeatures(create(AnySchema, { typeUrl: "x.Y", value: new Uint8Array() })),
    /features type URL is "x.Y"/,
  );
});

integrationTest(
  "the runc example's -info: runc's own features, from the BinaryName its options name",
  { binaries: ["runc", "sh"] },
  async () => {
    const dir = await Deno.makeTempDir({ prefix: "skiff-info-" });
    try {
      // A wrapper that marks the document, so the answer provably came from BinaryName.
      const wrapper = `${dir}/runc-wrapper`;
      await Deno.writeTextFile(
        wrapper,
        `#!/bin/sh\n[ "$1" = features ] && echo wrapped > "${dir}/asked"\nexec ${
          findExecutable("runc")
        } "$@"\n`,
        { mode: 0o755 },
      );
      const run = async (stdin: Uint8Array) => {
        const child = new Deno.Command(Deno.execPath(), {
          args: ["run", "-A", "--quiet", EXAMPLE, "-info"],
          stdin: "piped",
          stdout: "piped",
          stderr: "piped",
        }).spawn();
        const w = child.stdin.getWriter();
        await w.write(stdin);
        await w.close();
        const out = await child.output();
        assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
        return fromBinary(RuntimeInfoSchema, out.stdout);
      };
      const runc = await new Deno.Command("runc", { args: ["features"] }).output();
      const want = JSON.parse(new TextDecoder().decode(runc.stdout));

      const plain = await run(new Uint8Array());
      assert.equal(plain.name, "io.containerd.skiff-runc.v2");
      assert.deepEqual(decodeOciFeatures(plain.features!), want);

      const wrapped = await run(toBinary(AnySchema, runcOptionsAny(wrapper)));
      assert.equal(fromBinary(RuncOptionsSchema, wrapped.options!.value).binaryName, wrapper);
      assert.deepEqual(decodeOciFeatures(wrapped.features!), want);
      assert.equal((await Deno.readTextFile(`${dir}/asked`)).trim(), "wrapped");
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
);

integrationTest(
  "the crun example's -info: crun's features when it has the command, else none; BinaryName chooses",
  { binaries: ["crun", "runc"] },
  async () => {
    const crunExample = new URL("../../../../examples/crun/main.ts", import.meta.url).pathname;
    const run = async (stdin: Uint8Array) => {
      const child = new Deno.Command(Deno.execPath(), {
        args: ["run", "-A", "--quiet", crunExample, "-info"],
        stdin: "piped",
        stdout: "piped",
        stderr: "piped",
      }).spawn();
      const w = child.stdin.getWriter();
      await w.write(stdin);
      await w.close();
      const out = await child.output();
      assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
      return { info: fromBinary(RuntimeInfoSchema, out.stdout), stderr: out.stderr };
    };
    const features = async (binary: string) => {
      const out = await new Deno.Command(binary, { args: ["features"], stderr: "null" }).output();
      return out.success ? JSON.parse(new TextDecoder().decode(out.stdout)) : undefined;
    };

    const plain = await run(new Uint8Array());
    assert.equal(plain.info.name, "io.containerd.skiff-crun.v2");
    const crun = await features("crun");
    if (crun === undefined) {
      // crun before 1.9 has no `features` command: -info answers without, and says why.
      assert.equal(plain.info.features, undefined);
      assert.match(new TextDecoder().decode(plain.stderr), /no features: crun features failed/);
    } else {
      assert.deepEqual(decodeOciFeatures(plain.info.features!), crun);
    }
    // runc's options message reaches the crun shim: its BinaryName is the binary asked.
    const runc = findExecutable("runc")!;
    const named = await run(toBinary(AnySchema, runcOptionsAny(runc)));
    assert.equal(fromBinary(RuncOptionsSchema, named.info.options!.value).binaryName, runc);
    assert.deepEqual(decodeOciFeatures(named.info.features!), await features(runc));
  },
);

Deno.test("-v names skiff's version beside the shim's, and says when the shim set none", async () => {
  class Unversioned extends Shim<{ x: number }> {
    readonly runtimeName = "io.containerd.unversioned.v1";
    readonly options = { defaults: () => ({ x: 1 }) };
    runtime(): never {
      throw new Error("not here");
    }
  }
  class Versioned extends Unversioned {
    override readonly version = "4.2.0";
  }
  const printed: string[] = [];
  const log = console.log;
  const exit = Deno.exit;
  console.log = (s: string) => void printed.push(s);
  Deno.exit = (() => {
    throw new Error("exit");
  }) as typeof Deno.exit;
  try {
    for (const shim of [new Unversioned(), new Versioned()]) {
      await runShimWith(shim, ["-v"], () => Promise.resolve([])).catch(() => {});
    }
  } finally {
    console.log = log;
    Deno.exit = exit;
  }
  assert.deepEqual(printed, [
    `io.containerd.unversioned.v1 (skiff ${SKIFF_VERSION})\n  Version: unset (the shim sets Shim.version)`,
    `io.containerd.unversioned.v1 (skiff ${SKIFF_VERSION})\n  Version: 4.2.0`,
  ]);
  const config = JSON.parse(
    await Deno.readTextFile(new URL("../../../../deno.json", import.meta.url)),
  );
  assert.equal(SKIFF_VERSION, config.version, "SKIFF_VERSION is deno.json's version");
});
