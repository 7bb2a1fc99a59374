// The options seam: every carrier × runtime combination, and the regression guard that no
// endpoint field ever reaches a runtime hook.
import assert from "node:assert/strict";
import { create, toBinary } from "@bufbuild/protobuf";
import { type Any, AnySchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { OptionsSchema as RuncOptionsSchema } from "../../../proto/gen/containerd/runc/v1/oci_pb.ts";
import { OptionsSchema as CriOptionsSchema } from "../../../proto/gen/runtimeoptions/v1/api_pb.ts";
import { TaskOOMSchema } from "../../../proto/gen/containerd/events/task_pb.ts";
import { optionsMessage, resolveOptions, type RuntimeOptions } from "../../../sdk/shim/options.ts";
import { schemaCodec } from "../../../proto/schema_codec.ts";
import { RuncShim } from "../../../examples/runc/main.ts";
import { RunscShim } from "../../../examples/runsc/main.ts";

const runc = new RuncShim();
const runsc = new RunscShim();

function any(typeUrl: string, value: Uint8Array): Any {
  return create(AnySchema, { typeUrl, value });
}
function runcAny(init: Parameters<typeof create<typeof RuncOptionsSchema>>[1]): Any {
  return any(
    "containerd.runc.v1.Options",
    toBinary(RuncOptionsSchema, create(RuncOptionsSchema, init)),
  );
}
function criAny(toml: string, configPath = ""): Any {
  return any(
    "runtimeoptions.v1.Options",
    toBinary(
      CriOptionsSchema,
      create(CriOptionsSchema, { configBody: new TextEncoder().encode(toml), configPath }),
    ),
  );
}
const endpointOnly = runcAny({
  taskApiAddress: "ttrpc+unix:///run/containerd/s/abc",
  taskApiVersion: 3,
});

Deno.test("resolveOptions() with no carrier keeps current options or defaults", () => {
  for (const shim of [runc, runsc]) {
    const r = resolveOptions(shim.options as RuntimeOptions<object>, undefined, undefined, "x");
    assert.deepEqual(r.options, shim.options.defaults());
    assert.equal(r.fromCarrier, false);
    assert.equal(r.endpoint, undefined);
    const cur = { ...shim.options.defaults(), marker: 1 };
    assert.equal(
      resolveOptions(shim.options as RuntimeOptions<object>, undefined, cur, "x").options,
      cur,
    );
  }
});

Deno.test("resolveOptions() takes endpoint-only runc options as an endpoint, for every runtime", () => {
  for (const shim of [runc, runsc]) {
    const cur = { ...shim.options.defaults(), marker: "kept" };
    const r = resolveOptions(shim.options as RuntimeOptions<object>, endpointOnly, cur, "rt");
    assert.equal(r.options, cur, "the runtime keeps the options it already had");
    assert.equal(r.fromCarrier, false);
    assert.deepEqual(r.endpoint, {
      address: "unix:///run/containerd/s/abc",
      version: 3,
      protocol: "ttrpc",
    });
    assert.match(r.warnings.join(), /deprecated/);
  }
});

Deno.test("resolveOptions() passes full runc options to runc, minus the endpoint", () => {
  const r = resolveOptions(
    runc.options,
    runcAny({
      binaryName: "crun",
      root: "/r",
      systemdCgroup: true,
      taskApiAddress: "ttrpc+unix:///s/x",
      taskApiVersion: 3,
    }),
    undefined,
    runc.runtimeName,
  );
  assert.equal(r.options.binaryName, "crun");
  assert.equal(r.options.root, "/r");
  assert.equal(r.options.systemdCgroup, true);
  assert.equal(r.endpoint?.address, "unix:///s/x");
  assert.equal(r.fromCarrier, true);
});

Deno.test("resolveOptions() ignores real runc options for runsc with a warning, keeping its own", () => {
  const cur = { ...runsc.options.defaults(), marker: "kept" };
  const r = resolveOptions(
    runsc.options as RuntimeOptions<object>,
    runcAny({ binaryName: "runc", root: "/r" }),
    cur,
    runsc.runtimeName,
  );
  assert.equal(r.options, cur);
  assert.match(r.warnings.join(), /ignored containerd\.runc\.v1\.Options/);
});

Deno.test("resolveOptions() decodes runtimeoptions.v1 TOML for both runtimes", () => {
  const r1 = resolveOptions(
    runc.options,
    criAny(`BinaryName = "crun"\nSystemdCgroup = true`),
    undefined,
    "runc",
  );
  assert.equal(r1.options.binaryName, "crun");
  assert.equal(r1.options.systemdCgroup, true);
  const r2 = resolveOptions(
    runsc.options,
    criAny(`[runsc_config]\nplatform = "ptrace"\nnetwork = "none"\n`),
    undefined,
    "runsc",
  );
  assert.equal(r2.options.runscConfig.platform, "ptrace");
  assert.equal(r2.fromCarrier, true);
});

Deno.test("resolveOptions() reads runtimeoptions.v1 config_path", async () => {
  const f = await Deno.makeTempFile({ suffix: ".toml" });
  try {
    await Deno.writeTextFile(f, `[runsc_config]\nnetwork = "host"\n`);
    const r = resolveOptions(runsc.options, criAny("", f), undefined, "runsc");
    assert.equal(r.options.runscConfig.network, "host");
    assert.throws(
      () => resolveOptions(runsc.options, criAny("", f + ".missing"), undefined, "runsc"),
      (e: unknown) =>
        e instanceof ConnectError && e.code === Code.InvalidArgument &&
        /config_path/.test(e.message),
    );
  } finally {
    await Deno.remove(f);
  }
});

Deno.test("resolveOptions() decodes a runtime's own message type", () => {
  interface O {
    binary: string;
  }
  const hook: RuntimeOptions<O> = {
    defaults: () => ({ binary: "runc" }),
    messages: [
      optionsMessage(
        schemaCodec(RuncOptionsSchema),
        (m, b: O) => ({ binary: m.binaryName || b.binary }),
      ),
    ],
  };
  assert.equal(
    resolveOptions(hook, runcAny({ binaryName: "x" }), undefined, "rt").options.binary,
    "x",
  );
});

Deno.test("resolveOptions() rejects garbage and foreign types with InvalidArgument naming accepted types", () => {
  for (const shim of [runc, runsc]) {
    const hook = shim.options as RuntimeOptions<object>;
    assert.throws(
      () =>
        resolveOptions(
          hook,
          any("containerd.events.TaskOOM", toBinary(TaskOOMSchema, create(TaskOOMSchema, {}))),
          undefined,
          "rt",
        ),
      (e: unknown) =>
        e instanceof ConnectError && e.code === Code.InvalidArgument &&
        /"containerd\.events\.TaskOOM" is not accepted by rt; accepted: .*runtimeoptions\.v1\.Options/
          .test(e.message),
    );
    assert.throws(
      () =>
        resolveOptions(
          hook,
          any("containerd.runc.v1.Options", new Uint8Array([0xff, 0xff, 0xff])),
          undefined,
          "rt",
        ),
      (e: unknown) =>
        e instanceof ConnectError && e.code === Code.InvalidArgument &&
        /do not decode/.test(e.message),
    );
    assert.throws(
      () => resolveOptions(hook, criAny("not = [valid"), undefined, "rt"),
      (e: unknown) =>
        e instanceof ConnectError && e.code === Code.InvalidArgument && /TOML/.test(e.message),
    );
  }
});

Deno.test("regression: no runtime hook ever sees an endpoint field", () => {
  const seen: unknown[] = [];
  const hook: RuntimeOptions<{ n: number }> = {
    defaults: () => ({ n: 0 }),
    messages: [optionsMessage(schemaCodec(RuncOptionsSchema), (m, b: { n: number }) => {
      seen.push(m);
      return b;
    })],
  };
  resolveOptions(
    hook,
    runcAny({ binaryName: "runc", taskApiAddress: "ttrpc+unix:///a", taskApiVersion: 3 }),
    undefined,
    "rt",
  );
  resolveOptions(hook, endpointOnly, undefined, "rt");
  assert.equal(seen.length, 1, "endpoint-only carriers never reach the hook");
  for (const m of seen) {
    assert.ok(!("taskApiAddress" in (m as object)), "taskApiAddress reached a runtime hook");
    assert.ok(!("taskApiVersion" in (m as object)), "taskApiVersion reached a runtime hook");
  }
  // And the runtimes' resolved options never carry endpoint keys.
  for (const shim of [runc, runsc]) {
    const r = resolveOptions(shim.options as RuntimeOptions<object>, endpointOnly, undefined, "rt");
    const keys = Object.keys(r.options).join(",");
    assert.doesNotMatch(keys, /task_?[aA]pi/);
  }
});

Deno.test("a TOML hook that refuses a value gives InvalidArgument naming it, not Unknown", async () => {
  const hook: RuntimeOptions<{ n: number }> = {
    defaults: () => ({ n: 1 }),
    fromToml: (t) => {
      if (typeof t.N !== "number") {
        throw new Error(`N must be a number, got ${JSON.stringify(t.N)}`);
      }
      return { n: t.N };
    },
  };
  assert.equal(resolveOptions(hook, criAny("N = 3"), undefined, "rt").options.n, 3);
  assert.throws(
    () => resolveOptions(hook, criAny('N = "three"'), undefined, "rt"),
    (e: unknown) =>
      e instanceof ConnectError && e.code === Code.InvalidArgument &&
      /runtime options config_body for rt: N must be a number, got "three"/.test(e.message),
  );
  // The VM example's hook is one such: its sizes must be positive integers.
  const { VmShim } = await import("../../../examples/vm/main.ts");
  const vm = new VmShim();
  const base = vm.options.defaults();
  assert.deepEqual(vm.options.fromToml({ MemoryMiB: 512, Cpus: 2 }, base), {
    memoryMiB: 512,
    cpus: 2,
  });
  assert.throws(
    () => vm.options.fromToml({ Cpus: 0 }, base),
    /Cpus must be a positive integer, got 0/,
  );
  assert.throws(() => vm.options.fromToml({ MemoryMiB: "1G" }, base), /MemoryMiB .* got "1G"/);
});
