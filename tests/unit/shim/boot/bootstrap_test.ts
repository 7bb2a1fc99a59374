// Bootstrap pieces: Go-style flags, the socket-address convention, start's stdin dialects and
// its answer per containerd version, and the endpoint forms.
import assert from "node:assert/strict";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { AnySchema } from "@bufbuild/protobuf/wkt";
import { createHash } from "node:crypto";
import {
  BootstrapParamsSchema,
  BootstrapResultSchema,
} from "../../../../proto/gen/containerd/runtime/bootstrap/v1/bootstrap_pb.ts";
import { OptionsSchema as RuncOptionsSchema } from "../../../../proto/gen/containerd/runc/v1/oci_pb.ts";
import { parseShimFlags } from "../../../../sdk/shim/contract/flags.ts";
import { shimSocketAddress } from "../../../../sdk/shim/contract/socket_address.ts";
import { cleanPath } from "../../../../sdk/linux/clean_path.ts";
import { formatStartAnswer, parseStartInput } from "../../../../sdk/shim/boot/start.ts";
import { formatTaskApiEndpoint, parseTaskApiEndpoint } from "../../../../sdk/shim/endpoint.ts";

Deno.test("parseShimFlags() reads containerd's start and delete command lines", () => {
  const s = parseShimFlags([
    "-namespace",
    "k8s.io",
    "-address",
    "/run/containerd/containerd.sock",
    "-publish-binary",
    "/usr/bin/containerd",
    "-id",
    "abc",
    "-debug",
    "start",
  ]);
  assert.deepEqual(
    [s.namespace, s.address, s.publishBinary, s.id, s.debug, s.action],
    ["k8s.io", "/run/containerd/containerd.sock", "/usr/bin/containerd", "abc", true, "start"],
  );
  const d = parseShimFlags([
    "--namespace=default",
    "-id",
    "x",
    "-bundle",
    "/b",
    "-debug=false",
    "delete",
  ]);
  assert.deepEqual([d.namespace, d.bundle, d.debug, d.action], ["default", "/b", false, "delete"]);
  assert.equal(parseShimFlags(["-id", "x"]).action, "serve");
  assert.equal(parseShimFlags(["-v"]).version, true);
  assert.equal(parseShimFlags(["-info"]).info, true);
});

Deno.test("parseShimFlags() rejects unknown flags, missing values and unknown actions", () => {
  assert.throws(() => parseShimFlags(["-bogus", "1"]), /flag provided but not defined: -bogus/);
  assert.throws(() => parseShimFlags(["-id"]), /flag needs an argument: -id/);
  assert.throws(() => parseShimFlags(["-id", "x", "launch"]), /unknown action "launch"/);
  assert.throws(() => parseShimFlags(["-debug=maybe"]), /invalid boolean value "maybe"/);
});

Deno.test("shimSocketAddress() hashes filepath.Join(address, namespace, group)", () => {
  const want = createHash("sha256").update("/run/containerd/containerd.sock/default/c1").digest(
    "hex",
  );
  assert.equal(
    shimSocketAddress("/run/containerd/containerd.sock", "default", "c1"),
    `unix:///run/containerd/s/${want}`,
  );
  assert.equal(cleanPath("/a//b/./c/../d"), "/a/b/d");
  assert.match(
    shimSocketAddress("/x.sock", "ns", "g", "/tmp/socks/"),
    /^unix:\/\/\/tmp\/socks\/[0-9a-f]{64}$/,
  );
  assert.throws(
    () => shimSocketAddress("/x", "ns", "g", "/" + "d".repeat(60)),
    /over the limit of 106/,
  );
});

Deno.test("parseStartInput() tells empty, legacy Any and BootstrapParams apart", () => {
  assert.deepEqual(parseStartInput(new Uint8Array(), "c1", "ns"), {
    dialect: "legacy",
    carriers: [],
  });
  const opts = create(AnySchema, {
    typeUrl: "containerd.runc.v1.Options",
    value: toBinary(RuncOptionsSchema, create(RuncOptionsSchema, { binaryName: "crun" })),
  });
  const legacy = parseStartInput(toBinary(AnySchema, opts), "c1", "ns");
  assert.equal(legacy.dialect, "legacy");
  assert.equal(legacy.carriers[0].typeUrl, "containerd.runc.v1.Options");

  const params = create(BootstrapParamsSchema, {
    instanceId: "c1",
    namespace: "ns",
    socketDir: "/tmp/s",
    extensions: [{ value: opts }],
  });
  const boot = parseStartInput(toBinary(BootstrapParamsSchema, params), "c1", "ns");
  assert.equal(boot.dialect, "bootstrap");
  assert.equal(boot.params?.socketDir, "/tmp/s");
  assert.equal(boot.carriers[0].typeUrl, "containerd.runc.v1.Options");
  // The same bytes with another id are a legacy Any (containerd's compat rule).
  assert.equal(
    parseStartInput(toBinary(BootstrapParamsSchema, params), "other", "ns").dialect,
    "legacy",
  );
  // Garbage is ignored, as containerd 2.x's own shims do: Create carries the options again.
  assert.deepEqual(parseStartInput(new Uint8Array([0xff, 0x01]), "c1", "ns").carriers, []);
});

Deno.test("formatStartAnswer() answers in each containerd version's dialect", () => {
  const ep = { address: "unix:///run/containerd/s/x", version: 3, protocol: "ttrpc" } as const;
  assert.equal(formatStartAnswer("legacy", ep, [1, 6]), "unix:///run/containerd/s/x");
  assert.equal(formatStartAnswer("legacy", ep, [1, 7]), "unix:///run/containerd/s/x");
  assert.equal(formatStartAnswer("legacy", ep, undefined), "unix:///run/containerd/s/x");
  assert.deepEqual(JSON.parse(formatStartAnswer("legacy", ep, [2, 1]) as string), {
    version: 3,
    address: "unix:///run/containerd/s/x",
    protocol: "ttrpc",
  });
  const bin = formatStartAnswer("bootstrap", ep, undefined);
  assert.ok(bin instanceof Uint8Array);
  const r = fromBinary(BootstrapResultSchema, bin);
  assert.deepEqual([r.version, r.address, r.protocol], [3, ep.address, "ttrpc"]);
});

Deno.test("parseTaskApiEndpoint() reads containerd's endpoint URLs and rejects others", () => {
  const ep = parseTaskApiEndpoint("ttrpc+unix:///run/containerd/s/abc", 3);
  assert.deepEqual(ep, { address: "unix:///run/containerd/s/abc", version: 3, protocol: "ttrpc" });
  assert.equal(formatTaskApiEndpoint(ep), "ttrpc+unix:///run/containerd/s/abc");
  assert.deepEqual(parseTaskApiEndpoint("grpc+vsock://3:1024", 3).protocol, "grpc");
  assert.equal(parseTaskApiEndpoint("unix:///x").version, 2);
  assert.throws(() => parseTaskApiEndpoint("ttrpc+unix://relative"), /must be absolute/);
  assert.throws(() => parseTaskApiEndpoint("ttrpc+tcp://1.2.3.4:5"), /unsupported transport "tcp"/);
  assert.throws(() => parseTaskApiEndpoint("unix:///x", 4), /expected 2 or 3/);
  assert.throws(() => parseTaskApiEndpoint("nonsense"), /invalid task API endpoint "nonsense"/);
});
