/**
 * containerd's version is asked of its binary once per binary identity, then read from the file
 * kept beside the shim sockets (`sdk/shim/contract/containerd_version.ts`); an upgraded binary is
 * asked again. A shell script plays containerd and counts how often it was asked.
 */
import { deepStrictEqual, strictEqual } from "node:assert/strict";
import { containerdVersion } from "../../../../sdk/shim/contract/containerd_version.ts";

function fakeContainerd(dir: string, version: string): string {
  const bin = `${dir}/containerd`;
  Deno.writeTextFileSync(
    bin,
    `#!/bin/sh\necho x >> "${dir}/asked"\necho "containerd github.com/containerd/containerd/v2 v${version} abc"\n`,
    { mode: 0o755 },
  );
  return bin;
}

const asked = (dir: string) => {
  try {
    return Deno.readTextFileSync(`${dir}/asked`).split("\n").filter((l) => l).length;
  } catch {
    return 0;
  }
};

Deno.test("containerd version: asked once per binary, kept beside the sockets", async () => {
  const dir = Deno.makeTempDirSync({ prefix: "skiff-version-" });
  const sockets = `${dir}/s`;
  Deno.mkdirSync(sockets);
  try {
    const bin = fakeContainerd(dir, "2.1.9");
    deepStrictEqual(await containerdVersion(bin, sockets), [2, 1]);
    deepStrictEqual(await containerdVersion(bin, sockets), [2, 1]);
    strictEqual(asked(dir), 1, "the second start reads the kept answer");

    // An upgrade replaces the binary: its identity changes, so it is asked again.
    Deno.removeSync(bin);
    fakeContainerd(dir, "2.10.0"); // another size too, whatever the file system reuses
    deepStrictEqual(await containerdVersion(bin, sockets), [2, 10]);
    strictEqual(asked(dir), 2);

    // Without a cache directory (or with a garbled file) it is asked each time.
    deepStrictEqual(await containerdVersion(bin), [2, 10]);
    strictEqual(asked(dir), 3);
    for (const f of Deno.readDirSync(sockets)) {
      Deno.writeTextFileSync(`${sockets}/${f.name}`, "garbage");
    }
    deepStrictEqual(await containerdVersion(bin, sockets), [2, 10]);
    strictEqual(asked(dir), 4);
    deepStrictEqual(await containerdVersion(bin, sockets), [2, 10]);
    strictEqual(asked(dir), 4, "a garbled file is replaced");
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});
