// examples/runsc/cgroup_parent.ts on a fake hierarchy (a temp dir): what it makes and where it
// stays out. The real thing, two runsc containers under one new parent deleted one by one on
// cgroup v2, is the conformance `grouping` scenario for runsc in the cgroup v2 guest
// (tests/guest/cgroup2_checks.ts), which fails without it.
import assert from "node:assert/strict";
import { makeCgroupParent } from "../../../examples/runsc/cgroup_parent.ts";

async function fakeRoot(v2: boolean): Promise<string> {
  const root = await Deno.makeTempDir({ prefix: "skiff-cgparent-" });
  if (v2) await Deno.writeTextFile(`${root}/cgroup.controllers`, "cpu memory pids\n");
  return root;
}

function dirs(root: string, at = ""): string[] {
  return [...Deno.readDirSync(`${root}${at}`)].filter((e) => e.isDirectory)
    .flatMap((e) => [`${at}/${e.name}`, ...dirs(root, `${at}/${e.name}`)]).sort();
}

Deno.test("runsc example: on cgroup v2 the parent of /<ns>/<id> is made, not the leaf", async () => {
  const root = await fakeRoot(true);
  try {
    makeCgroupParent("/default/web", root);
    makeCgroupParent("/a/b/c/", root);
    assert.deepEqual(dirs(root), ["/a", "/a/b", "/default"]);
    makeCgroupParent("/default/other", root); // already there: no error
    assert.deepEqual(dirs(root), ["/a", "/a/b", "/default"]);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("runsc example: nothing made for systemd, relative or top-level paths, or on v1", async () => {
  const v2 = await fakeRoot(true);
  const v1 = await fakeRoot(false);
  try {
    for (const p of ["system.slice:runsc:web", "default/web", "/web", undefined]) {
      makeCgroupParent(p, v2);
    }
    assert.deepEqual(dirs(v2), []);
    makeCgroupParent("/default/web", v1);
    assert.deepEqual(dirs(v1), []);
  } finally {
    await Deno.remove(v2, { recursive: true });
    await Deno.remove(v1, { recursive: true });
  }
});
