// The skiff runsc (gVisor) example shim under real containerd 1.6 and 2.4, through ctr:
// output, exit codes, exec and kill. gVisor's kernel reports "Linux version 4.4.0", which
// proves the container did not run on the host kernel.
import assert from "node:assert/strict";
import { integrationTest } from "../_integration.ts";
import { containerdVersions, startContainerd } from "../../sdk/testing/containerd.ts";
import { ctrRun } from "../../sdk/testing/ctr.ts";
import { installExampleShims } from "../../sdk/install/examples.ts";

const RUNSC = "io.containerd.skiff-runsc.v2";
const NS = "skiff-test";

for (const v of containerdVersions().filter((v) => /^(1\.6|2\.4)\./.test(v.version))) {
  integrationTest(
    `containerd ${v.version}: skiff runsc shim runs, execs and kills gVisor containers`,
    { root: true, binaries: ["runsc"] },
    async (t) => {
      const prefix = await Deno.makeTempDir({ prefix: "skiff-runsc-" });
      const [runcShim] = await installExampleShims({ prefix });
      const c = await startContainerd({
        binDir: v.binDir,
        extraPath: [runcShim.slice(0, runcShim.lastIndexOf("/"))],
      });
      try {
        const image = await c.importBusyboxImage(NS);

        await t.step("ctr run --rm: output from the gVisor kernel, exit code 3", async () => {
          const r = await ctrRun(c, {
            image,
            id: "once",
            runtime: RUNSC,
            args: ["sh", "-c", "echo hello-gvisor; cat /proc/version; exit 3"],
          });
          assert.equal(r.code, 3, r.stderr);
          assert.match(r.stdout, /hello-gvisor/);
          assert.match(r.stdout, /Linux version 4\.4\.0/);
        });

        await t.step("exec output and exit code, then kill", async () => {
          const d = await ctrRun(c, {
            image,
            id: "svc",
            runtime: RUNSC,
            detach: true,
            args: ["sleep", "600"],
          });
          assert.equal(d.code, 0, d.stderr);
          const ex = await c.ctr([
            "task",
            "exec",
            "--fifo-dir",
            c.fifoDir,
            "--exec-id",
            "e1",
            "svc",
            "sh",
            "-c",
            "echo exec-out; exit 5",
          ], { namespace: NS });
          assert.equal(ex.code, 5, ex.stderr);
          assert.match(ex.stdout, /exec-out/);
          const kill = await c.ctr(["task", "kill", "-s", "SIGKILL", "svc"], { namespace: NS });
          assert.equal(kill.code, 0, kill.stderr);
          let listed = "";
          for (let i = 0; i < 50; i++) {
            listed = (await c.ctr(["task", "ls"], { namespace: NS })).stdout;
            if (/svc\s+\d+\s+STOPPED/.test(listed)) break;
            await new Promise((r) => setTimeout(r, 100));
          }
          assert.match(listed, /svc\s+\d+\s+STOPPED/);
          // ctr task delete reports the task's exit status: 128 + SIGKILL.
          const del = await c.ctr(["task", "delete", "svc"], { namespace: NS });
          assert.equal(del.code, 0, del.stderr);
          assert.match(del.stderr, /exit code 137/);
          assert.equal((await c.ctr(["container", "delete", "svc"], { namespace: NS })).code, 0);
        });

        await t.step(
          "a pod's containers share one gVisor sandbox; a member's exit still arrives",
          async () => {
            const cri = (type: string) => [
              "--annotation",
              `io.kubernetes.cri.container-type=${type}`,
              "--annotation",
              "io.kubernetes.cri.sandbox-id=pod1",
            ];
            for (
              const [id, type, args] of [
                ["pod1", "sandbox", ["sleep", "600"]],
                ["app1", "container", ["sh", "-c", "echo app-up; exec sleep 600"]],
              ] as const
            ) {
              const r = await ctrRun(c, {
                image,
                id,
                runtime: RUNSC,
                detach: true,
                flags: cri(type),
                args: [...args],
              });
              assert.equal(r.code, 0, r.stderr);
            }
            // runsc names a member's state "<id>_sandbox:<sandbox id>": app1 joined pod1.
            const state = [...Deno.readDirSync(`/run/containerd/runsc/${NS}`)].map((e) => e.name);
            assert.ok(state.includes("app1_sandbox:pod1.state"), `runsc state: ${state}`);
            const ls = (await c.ctr(["task", "ls"], { namespace: NS })).stdout;
            const pidOf = (id: string) =>
              new RegExp(`^${id}\\s+(\\d+)\\s+RUNNING`, "m").exec(ls)?.[1];
            assert.ok(
              pidOf("pod1") && pidOf("pod1") === pidOf("app1"),
              `one sandbox process: ${ls}`,
            );
            // The member's process is not a host process: its exit comes from `runsc wait`.
            assert.equal(
              (await c.ctr(["task", "kill", "-s", "SIGKILL", "app1"], { namespace: NS })).code,
              0,
            );
            let after = "";
            for (let i = 0; i < 50; i++) {
              after = (await c.ctr(["task", "ls"], { namespace: NS })).stdout;
              if (/app1\s+\d+\s+STOPPED/.test(after)) break;
              await new Promise((r) => setTimeout(r, 100));
            }
            assert.match(after, /app1\s+\d+\s+STOPPED/);
            assert.match(after, /pod1\s+\d+\s+RUNNING/, "the sandbox outlives its member");
            const del = await c.ctr(["task", "delete", "app1"], { namespace: NS });
            assert.match(del.stderr, /exit code 137/);
            await c.ctr(["task", "kill", "-s", "SIGKILL", "pod1"], { namespace: NS });
            for (let i = 0; i < 50; i++) {
              if (
                /pod1\s+\d+\s+STOPPED/.test((await c.ctr(["task", "ls"], { namespace: NS })).stdout)
              ) break;
              await new Promise((r) => setTimeout(r, 100));
            }
            await c.ctr(["task", "delete", "pod1"], { namespace: NS });
            for (const id of ["app1", "pod1"]) {
              assert.equal((await c.ctr(["container", "delete", id], { namespace: NS })).code, 0);
            }
          },
        );
      } finally {
        await c.stop();
        await Deno.remove(prefix, { recursive: true }).catch(() => {});
      }
    },
  );
}
