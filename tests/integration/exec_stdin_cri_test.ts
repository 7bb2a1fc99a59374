/**
 * An exec's stdin EOF through CRI, as `kubectl exec -i` reaches a container (issue 48):
 * `echo abc | crictl exec -i <container> cat` through containerd's CRI streaming server, which
 * sends CloseIO when the client's stdin ends; on containerd 1.6, 2.1 and 2.4, for containerd's
 * Go runc shim (the `runc` handler) and skiff's runc example (`skiff-runc`) in the same run.
 *
 * Each try has a bound (8 s; an exec takes well under 1 s) and a hang fails the test with the
 * tries that hung; the loop still runs to the end, so the count is a figure.
 * `SKIFF_EXEC_STDIN_CRI_TRIES` sets the tries per handler and version (default 100). crictl is
 * built beside critest by tests/setup/critest.sh.
 */
import assert from "node:assert/strict";
import { integrationTest } from "../_integration.ts";
import {
  containerdVersions,
  type PrivateContainerd,
  type RuntimeConfig,
  startContainerd,
} from "../../sdk/testing/containerd.ts";
import { CRI_NAMESPACE, criClient } from "../../sdk/testing/cri_client.ts";
import { criContainerConfig, criPodConfig } from "../../sdk/testing/cri_container.ts";
import { BUSYBOX_IMAGE_REF } from "../../sdk/testing/image.ts";
import { critestBinary } from "../../sdk/testing/critest.ts";
import { installExampleShims } from "../../sdk/install/examples.ts";
import { eventually } from "../_spare.ts";

const TRIES = Number(Deno.env.get("SKIFF_EXEC_STDIN_CRI_TRIES") ?? 100);
const TRY_MS = 8_000;
/** Execs at a time: one exec's Start overlapping another's CloseIO, as under kubelet's load. */
const IN_FLIGHT = 3;
const CALL = { timeoutMs: 120_000 };
const CRICTL = critestBinary().replace(/critest$/, "crictl");
const versions = containerdVersions().filter((v) => /^(1\.6|2\.1|2\.4)\./.test(v.version));

/** The Go shim and skiff's runc, each with its runc state in the instance's private root. */
function handlers(version: string): Record<string, RuntimeConfig> {
  // 1.6's CRI sends a runtime other than io.containerd.runc.v2 only a ConfigPath.
  const old = version.startsWith("1.6.");
  return {
    "runc": { runtimeType: "io.containerd.runc.v2", options: (c) => ({ Root: c.runcRoot }) },
    "skiff-runc": {
      runtimeType: "io.containerd.skiff-runc.v2",
      options: (c) => old ? { ConfigPath: `${c.dir}/skiff-runc.toml` } : { Root: c.runcRoot },
    },
  };
}

/** One `echo … | crictl exec -i <id> cat`, bounded. */
async function crictlExec(c: PrivateContainerd, id: string, input: string) {
  const child = new Deno.Command(CRICTL, {
    args: ["--runtime-endpoint", `unix://${c.address}`, "exec", "-i", id, "cat"],
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(TRY_MS),
  }).spawn();
  const w = child.stdin.getWriter();
  await w.write(new TextEncoder().encode(input));
  await w.close();
  const out = await child.output();
  return {
    code: out.code,
    timedOut: out.signal === "SIGTERM",
    stdout: new TextDecoder().decode(out.stdout),
    stderr: new TextDecoder().decode(out.stderr),
  };
}

for (const v of versions) {
  integrationTest(
    `exec stdin EOF through CRI under containerd ${v.version}: ${TRIES} crictl exec -i of cat end, Go runc shim and skiff`,
    {
      root: true,
      binaries: ["runc", "/bin/busybox", CRICTL, `${v.binDir}/containerd-shim-runc-v2`],
    },
    async (t) => {
      const prefix = await Deno.makeTempDir({ prefix: "skiff-exec-cri-" });
      await installExampleShims({
        prefix,
        shims: { "containerd-shim-skiff-runc-v2": "examples/runc/main.ts" },
      });
      const c = await startContainerd({
        binDir: v.binDir,
        extraPath: [`${prefix}/bin`],
        runtimes: handlers(v.version),
        cri: { defaultHandler: "runc" },
      });
      try {
        await Deno.writeTextFile(`${c.dir}/skiff-runc.toml`, `Root = "${c.runcRoot}"\n`);
        await c.importBusyboxImage(CRI_NAMESPACE);
        const cri = criClient(c.address);
        await eventually("CRI to list the busybox image", async () => {
          const s = await cri.images.imageStatus({ image: { image: BUSYBOX_IMAGE_REF } }, CALL);
          return s.image ? true : undefined;
        }, 60_000);
        for (const handler of ["runc", "skiff-runc"]) {
          await t.step(handler, async () => {
            const config = criPodConfig(c, `stdin-${handler}`, { namespace: "skiff-exec-cri" });
            await Deno.mkdir(config.logDirectory, { recursive: true });
            const { podSandboxId } = await cri.runtime.runPodSandbox(
              { config, runtimeHandler: handler },
              CALL,
            );
            const { containerId } = await cri.runtime.createContainer({
              podSandboxId,
              config: criContainerConfig("main", ["sleep", "3600"]),
              sandboxConfig: config,
            }, CALL);
            await cri.runtime.startContainer({ containerId }, CALL);
            const hung: string[] = [];
            const wrong: string[] = [];
            let next = 0;
            const worker = async () => {
              for (let i = next++; i < TRIES; i = next++) {
                const r = await crictlExec(c, containerId, `abc ${i}\n`);
                const saw = `stdout ${JSON.stringify(r.stdout)}`;
                if (r.timedOut) hung.push(`try ${i}: no end within ${TRY_MS} ms (${saw})`);
                else if (r.code !== 0 || r.stdout !== `abc ${i}\n`) {
                  wrong.push(`try ${i}: exit ${r.code}, ${saw}, ${r.stderr.trim()}`);
                }
              }
            };
            await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
            console.log(
              `containerd ${v.version}, ${handler}: ${hung.length} of ${TRIES} hung, ` +
                `${wrong.length} ended without their input echoed`,
            );
            await cri.runtime.stopPodSandbox({ podSandboxId }, CALL);
            await cri.runtime.removePodSandbox({ podSandboxId }, CALL);
            // containerd's contract for every shim: a piped exec ends once its input has.
            assert.deepEqual(hung, [], `${handler}: crictl exec -i that never ended`);
            // And echoes its input: skiff always (the Go shim's misses are its own race, counted).
            if (handler !== "runc") assert.deepEqual(wrong, [], `${handler}: lost input`);
          });
        }
      } finally {
        await c.stop();
        await Deno.remove(prefix, { recursive: true }).catch(() => {});
      }
    },
  );
}
