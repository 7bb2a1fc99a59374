// How the testing kit lists a private containerd's shims from the process table and its bundles
// (sdk/testing/containerd_shims.ts): a warm spare that a `start` adopted is listed as the cold
// server of that container would be, a spare still waiting is not a shim, and a bundle being
// removed (no `shim.pid`) adopts nothing.
import assert from "node:assert/strict";
import { shimsAmong, sparesAmong } from "../../../sdk/testing/containerd_shims.ts";

const ADDRESS = "/tmp/skiff-ctrd-test/containerd.sock";

function spare(pid: number): { pid: number; argv: string[] } {
  return {
    pid,
    argv: [
      "/prefix/bin/containerd-shim-skiff-runc-v2",
      ...["-spare", "-address", ADDRESS, "-publish-binary", "/usr/bin/containerd"],
      ...["-socket", `/run/skiff/spare/${pid}.sock`],
    ],
  };
}

Deno.test("an adopted spare is listed with the argv of a cold server for its bundle", async () => {
  const state = await Deno.makeTempDir();
  try {
    const bundle = `${state}/io.containerd.runtime.v2.task/test/ctr-1`;
    await Deno.mkdir(bundle, { recursive: true });
    await Deno.writeTextFile(`${bundle}/shim.pid`, "101\n");
    await Deno.writeTextFile(`${bundle}/address`, "unix:///run/containerd/s/abc\n");
    // A bundle being created or removed: no shim.pid yet, so it names no server.
    await Deno.mkdir(`${state}/io.containerd.runtime.v2.task/test/ctr-2`);
    const cold = {
      pid: 100,
      argv: ["containerd-shim-runc-v2", "-namespace", "test", "-id", "go-1", "-address", ADDRESS],
    };
    const launched = [cold, spare(101), spare(102)];

    assert.deepEqual(shimsAmong(ADDRESS, state, launched), [cold, {
      pid: 101,
      argv: [
        "/prefix/bin/containerd-shim-skiff-runc-v2",
        ...["-namespace", "test", "-id", "ctr-1", "-address", ADDRESS],
        ...["-publish-binary", "/usr/bin/containerd", "-socket", "/run/containerd/s/abc"],
      ],
    }]);
    assert.deepEqual(sparesAmong(state, launched), [spare(102)]);
  } finally {
    await Deno.remove(state, { recursive: true });
  }
});
