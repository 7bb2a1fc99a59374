/**
 * Stats of a task whose init has exited and that is not deleted yet, as containerd 2.4's CRI
 * reads them to tell whether a container was OOM-killed (`internal/cri/server/events.go`): the Go
 * runc shim answers with the cgroup's metrics until Delete, and so must skiff's (it answered
 * NotFound, and kubelet's SIGKILLed containers logged "no metrics received"). Side by side with
 * the Go shim, under containerd 2.4 and 1.6, through `ctr task metrics`.
 */
import assert from "node:assert/strict";
import { integrationTest } from "../_integration.ts";
import { containerdVersions, startContainerd } from "../../sdk/testing/containerd.ts";
import { ctrRun, RUNC_RUNTIME } from "../../sdk/testing/ctr.ts";
import { installExampleShims } from "../../sdk/install/examples.ts";

const NS = "skiff-stats-exit";

for (const v of containerdVersions().filter((v) => /^(1\.6|2\.4)\./.test(v.version))) {
  integrationTest(
    `containerd ${v.version}: an exited task's metrics until Delete, as the Go runc shim answers`,
    { root: true, binaries: ["runc", "/bin/busybox"] },
    async () => {
      const prefix = await Deno.makeTempDir({ prefix: "skiff-stats-exit-" });
      const [launcher] = await installExampleShims({
        prefix,
        shims: { "containerd-shim-skiff-runc-v2": "examples/runc/main.ts" },
      });
      const c = await startContainerd({
        binDir: v.binDir,
        extraPath: [launcher!.slice(0, launcher!.lastIndexOf("/"))],
      });
      try {
        const image = await c.importBusyboxImage(NS);
        for (
          const [shim, runtime] of [["go", RUNC_RUNTIME], ["skiff", "io.containerd.skiff-runc.v2"]]
        ) {
          const id = `exited-${shim}`;
          const run = await ctrRun(c, {
            image,
            id,
            namespace: NS,
            runtime,
            detach: true,
            args: ["sh", "-c", "exit 3"],
          });
          assert.equal(run.code, 0, `${shim}: ${run.stderr}`);
          // Until the task has stopped (bounded: a hang fails, a slow machine does not).
          for (let i = 0;; i++) {
            const ls = await c.ctr(["tasks", "ls"], { namespace: NS });
            if (new RegExp(`^${id}\\s+\\d+\\s+STOPPED`, "m").test(ls.stdout)) break;
            assert.ok(i < 600, `${shim}: ${id} never stopped: ${ls.stdout}`);
            await new Promise((r) => setTimeout(r, 100));
          }
          const m = await c.ctr(["tasks", "metrics", id], { namespace: NS });
          assert.equal(m.code, 0, `${shim}: ctr task metrics of an exited task: ${m.stderr}`);
          assert.match(m.stdout, /memory\.usage_in_bytes|memory\.usage/, `${shim}: ${m.stdout}`);
          const del = await c.ctr(["tasks", "delete", id], { namespace: NS });
          assert.equal(del.code, 0, `${shim}: ${del.stderr}`);
          const gone = await c.ctr(["tasks", "metrics", id], { namespace: NS });
          assert.notEqual(gone.code, 0, `${shim}: metrics after Delete`);
          await c.ctr(["containers", "delete", id], { namespace: NS });
        }
      } finally {
        await c.stop();
        await Deno.remove(prefix, { recursive: true });
      }
    },
  );
}
