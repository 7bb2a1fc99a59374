// The `upgrade` command's search for running shims (sdk/shim/boot/upgrade.ts): a shim is found
// however the operator names the binary (a relative path, a symbolic link), in the task state
// directory and in the `shim` sandboxer's beside it; another binary's shim is not. A shim that
// ended while the command ran is told apart from a failed upgrade.
import assert from "node:assert/strict";
import { endedMeanwhile, findShims, sandboxStateDir } from "../../../../sdk/shim/boot/upgrade.ts";
import { LAUNCHER_ENV } from "../../../../sdk/shim/contract/launcher_env.ts";
import { UPGRADE_ENDED } from "../../../../sdk/shim/contract/upgrade.ts";
import {
  Code,
  statusError,
  TTRPC_DIAL_FAILED,
  TTRPC_SHUTTING_DOWN,
} from "../../../../sdk/ttrpc/status_error.ts";

/** A stand-in server: a process whose environment names `launcher`. */
function fakeServer(launcher: string): Deno.ChildProcess {
  return new Deno.Command("sleep", {
    args: ["30"],
    env: { [LAUNCHER_ENV.launcher]: launcher },
    stdin: "null",
  }).spawn();
}

/** A task bundle under `dir` recording `pid` and its socket. */
function bundle(dir: string, ns: string, id: string, pid: number, socket: string): void {
  Deno.mkdirSync(`${dir}/${ns}/${id}`, { recursive: true });
  Deno.writeTextFileSync(`${dir}/${ns}/${id}/address`, `unix://${socket}`);
  Deno.writeTextFileSync(`${dir}/${ns}/${id}/shim.pid`, String(pid));
}

Deno.test("findShims: found by a relative path or a symbolic link; sandboxer bundles too", async () => {
  const root = Deno.makeTempDirSync({ prefix: "skiff-upgrade-find-" });
  const launcher = `${root}/prefix/bin/containerd-shim-x-v2`;
  Deno.mkdirSync(`${root}/prefix/bin`, { recursive: true });
  Deno.writeTextFileSync(launcher, "#!/bin/sh\n");
  Deno.symlinkSync(launcher, `${root}/link`);
  const tasks = `${root}/state/io.containerd.runtime.v2.task`;
  const sandboxes = sandboxStateDir(tasks);
  assert.equal(sandboxes, `${root}/state/io.containerd.sandbox.controller.v1.shim`);
  const pod = fakeServer(launcher);
  const sandbox = fakeServer(launcher);
  const other = fakeServer(`${root}/prefix/bin/containerd-shim-other-v2`);
  const cwd = Deno.cwd();
  try {
    bundle(tasks, "k8s.io", "pod", pod.pid, "/run/s/a");
    bundle(sandboxes, "k8s.io", "sbx", sandbox.pid, "/run/s/b");
    bundle(tasks, "default", "else", other.pid, "/run/s/c");
    const all = (name: string) =>
      findShims(tasks, name).map((s) => `${s.pid} ${s.namespace}/${s.ids.join(",")}`).sort();
    const want = [`${pod.pid} k8s.io/pod`, `${sandbox.pid} k8s.io/sbx`].sort();
    assert.deepEqual(all(launcher), want);
    assert.deepEqual(all(`${root}/link`), want, "through a symbolic link");
    Deno.chdir(root);
    assert.deepEqual(all("prefix/bin/containerd-shim-x-v2"), want, "by a relative path");
    assert.deepEqual(findShims(tasks, launcher, { id: "sbx" }).map((s) => s.pid), [sandbox.pid]);
  } finally {
    Deno.chdir(cwd);
    for (const p of [pod, sandbox, other]) {
      p.kill("SIGKILL");
      await p.status;
    }
    Deno.removeSync(root, { recursive: true });
  }
});

Deno.test("endedMeanwhile: a shim that said it is shutting down, or was never reached and whose socket is gone, ended; a call lost midway did not", () => {
  const root = Deno.makeTempDirSync({ prefix: "skiff-upgrade-ended-" });
  const socket = `${root}/s`;
  const listener = Deno.listen({ transport: "unix", path: socket });
  try {
    const s = { socket, pid: 4242, namespace: "default", ids: ["web"] };
    const ended = (e: Error) => endedMeanwhile(e, s);
    const failed = statusError("live upgrade failed, still serving the old code", Code.Internal);
    assert.equal(ended(failed), false, "the upgrade's own failure");
    assert.equal(
      ended(
        statusError(`${UPGRADE_ENDED}: the shim is shutting down (Shutdown)`, Code.Unavailable),
      ),
      true,
      "the server said it is ending",
    );
    assert.equal(ended(statusError(TTRPC_SHUTTING_DOWN, Code.Unavailable)), true, "draining");
    const dial = statusError(
      `${TTRPC_DIAL_FAILED} ${socket}: Connection refused`,
      Code.Unavailable,
    );
    assert.equal(ended(dial), false, "not reached, and its socket is still there: it died");
    const lost = statusError(`ttrpc client of ${socket} closed`, Code.Unavailable);
    listener.close(); // removes the socket file
    assert.equal(ended(dial), true, "not reached, and its socket is gone: it shut down");
    assert.equal(ended(lost), false, "lost while the call ran: the upgrade may have ended it");
  } finally {
    Deno.removeSync(root, { recursive: true });
  }
});
