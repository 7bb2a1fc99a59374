// runc's systemd cgroup driver on cgroup v2, run INSIDE the test guest booted with systemd as
// its PID 1 (`runInGuest({ init: "systemd" })`) by tests/external/cgroup2_guest_test.ts. Not a *_test.ts
// file: the host's `deno test tests/` does not pick it up, and outside such a guest it fails.
//
// A container whose cgroupsPath is systemd-style (`slice:prefix:name`) with SystemdCgroup set
// runs in the transient scope systemd made for it (`/system.slice/<prefix>-<name>.scope`), and
// the scope is gone once the task is deleted: for containerd's Go runc shim (ctr's
// --runc-systemd-cgroup) and for skiff's runc example (SystemdCgroup in its TOML options).
import assert from "node:assert/strict";
import { containerdVersions, startContainerd } from "../../sdk/testing/containerd.ts";
import { installExampleShims } from "../../sdk/install/examples.ts";
import { ctrRun, DEFAULT_NAMESPACE, RUNC_RUNTIME } from "../../sdk/testing/ctr.ts";

const v21 = containerdVersions().find((v) => v.version.startsWith("2.1."));

function guard(): void {
  assert.equal(Deno.env.get("SKIFF_GUEST"), "1", "runs inside the test guest only");
  assert.equal(Deno.readTextFileSync("/proc/1/comm").trim(), "systemd", "systemd is PID 1");
  assert.ok(v21, "containerd 2.1 (tests/setup/prepare.sh)");
}

async function systemctl(...args: string[]): Promise<string> {
  const out = await new Deno.Command("systemctl", { args, stdout: "piped", stderr: "piped" })
    .output();
  return new TextDecoder().decode(out.stdout).trim();
}

async function shimDir(): Promise<string> {
  const host = Deno.env.get("SKIFF_GUEST_SHIMS");
  if (host) return host;
  const dir = await Deno.makeTempDir({ prefix: "skiff-guest-shims-" });
  await installExampleShims({ prefix: dir });
  return `${dir}/bin`;
}

async function systemdScope(skiff: boolean): Promise<void> {
  guard();
  const dir = skiff ? await shimDir() : undefined;
  const c = await startContainerd({
    binDir: v21!.binDir,
    ...(dir
      ? { runtimes: { skiff: { runtimeType: "io.containerd.skiff-runc.v2", binaryDir: dir } } }
      : {}),
  });
  const id = skiff ? "sd-skiff" : "sd-go";
  const ns = { namespace: DEFAULT_NAMESPACE, timeoutMs: 300_000 };
  try {
    const ref = await c.importBusyboxImage(DEFAULT_NAMESPACE);
    let runtimeConfigPath: string | undefined;
    if (skiff) {
      runtimeConfigPath = `${c.dir}/skiff-runc.toml`;
      await Deno.writeTextFile(runtimeConfigPath, "SystemdCgroup = true\n");
    }
    const run = await ctrRun(c, {
      image: ref,
      id,
      runtime: skiff ? "skiff" : RUNC_RUNTIME,
      detach: true,
      cgroup: `system.slice:skiff:${id}`,
      ...(skiff ? { runtimeConfigPath } : { flags: ["--runc-systemd-cgroup"] }),
      args: ["sleep", "600"],
      timeoutMs: 300_000,
    });
    assert.equal(run.code, 0, `ctr run: ${run.stderr}\n${await c.logs()}`);
    const ls = await c.ctr(["task", "ls"], ns);
    const pid = Number(ls.stdout.split("\n").find((l) => l.startsWith(id))?.trim().split(/\s+/)[1]);
    assert.ok(pid > 0, `task pid of ${id}: ${ls.stdout}`);
    const scope = `skiff-${id}.scope`;
    assert.equal(
      Deno.readTextFileSync(`/proc/${pid}/cgroup`).trim(),
      `0::/system.slice/${scope}`,
      "the container runs in its systemd scope",
    );
    assert.equal(await systemctl("is-active", scope), "active", `${scope} is active`);
    await c.ctr(["task", "kill", "-s", "SIGKILL", id], ns);
    for (let i = 0; i < 240 && (await c.ctr(["task", "delete", id], ns)).code !== 0; i++) {
      await new Promise((r) => setTimeout(r, 500));
    }
    let state = "";
    for (let i = 0; i < 240; i++) {
      state = await systemctl("is-active", scope);
      if (state !== "active" && state !== "deactivating") break;
      await new Promise((r) => setTimeout(r, 500));
    }
    assert.notEqual(state, "active", `${scope} is gone after the delete`);
  } finally {
    await c.stop();
  }
}

Deno.test("guest (systemd): systemd cgroupsPath, containerd's Go runc shim", async () => {
  await systemdScope(false);
});

Deno.test("guest (systemd): systemd cgroupsPath, skiff's runc example", async () => {
  await systemdScope(true);
});
