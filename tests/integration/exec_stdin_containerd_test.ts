/**
 * An exec's stdin EOF is never lost (issue 48): `echo abc | ctr tasks exec … cat` must end, on
 * containerd 1.6, 2.1 and 2.4, beside containerd's Go runc shim in the same run. The client
 * finishes writing and sends CloseIO as soon as the shim has opened the exec's stdin FIFO, which
 * is while Start is still running; a shim that drops that CloseIO leaves `cat` waiting forever.
 *
 * Each try has a bound (8 s; an exec takes ~0.1 s) and a hang fails the test with the tries that
 * hung; the rest of a loop still runs, so the count is a figure. `SKIFF_EXEC_STDIN_TRIES` sets the tries per shim and
 * version (default 500). Execs run two at a time, so that one
 * exec's Start overlaps another's CloseIO as under a real client's load.
 */
import assert from "node:assert/strict";
import { integrationTest } from "../_integration.ts";
import {
  containerdVersions,
  type PrivateContainerd,
  startContainerd,
} from "../../sdk/testing/containerd.ts";
import { ctrRun } from "../../sdk/testing/ctr.ts";
import { installExampleShims } from "../../sdk/install/examples.ts";

const NS = "skiff-exec-stdin";
const TRIES = Number(Deno.env.get("SKIFF_EXEC_STDIN_TRIES") ?? 500);
const TRY_MS = 8_000;
const IN_FLIGHT = 2;

const versions = containerdVersions().filter((v) => /^(1\.6|2\.1|2\.4)\./.test(v.version));
const GO_RUNTIME = "io.containerd.runc.v2";
const SHIMS = [
  { name: "Go runc shim", runtime: GO_RUNTIME },
  { name: "skiff runc shim", runtime: "skiff-runc" },
];

/** What a loop of piped execs did: the tries that hung, and those that ended otherwise wrong. */
interface Outcome {
  hung: string[];
  wrong: string[];
}

/** Runs `tries` piped execs of `cat` in `id`, `IN_FLIGHT` at a time. */
async function pipedExecs(c: PrivateContainerd, id: string, tries: number): Promise<Outcome> {
  const out: Outcome = { hung: [], wrong: [] };
  let next = 0;
  const worker = async () => {
    for (let i = next++; i < tries; i = next++) {
      const r = await c.ctr(["tasks", "exec", "--exec-id", `e${i}`, id, "cat"], {
        namespace: NS,
        stdin: `abc ${i}\n`,
        timeoutMs: TRY_MS,
      });
      const saw = `stdout ${JSON.stringify(r.stdout)}`;
      if (r.timedOut) out.hung.push(`e${i}: no end within ${TRY_MS} ms (${saw})`);
      else if (r.code !== 0 || r.stdout !== `abc ${i}\n`) {
        out.wrong.push(`e${i}: exit ${r.code}, ${saw}, ${r.stderr.trim()}`);
      }
    }
  };
  await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
  return out;
}

for (const v of versions) {
  integrationTest(
    `exec stdin EOF under containerd ${v.version}: ${TRIES} piped execs of cat end, Go runc shim and skiff`,
    { root: true, binaries: ["runc", "/bin/busybox", `${v.binDir}/containerd-shim-runc-v2`] },
    async (t) => {
      const prefix = await Deno.makeTempDir({ prefix: "skiff-exec-stdin-" });
      await installExampleShims({
        prefix,
        shims: { "containerd-shim-skiff-runc-v2": "examples/runc/main.ts" },
      });
      const c = await startContainerd({
        binDir: v.binDir,
        runtimes: {
          "skiff-runc": { runtimeType: "io.containerd.skiff-runc.v2", binaryDir: `${prefix}/bin` },
        },
      });
      try {
        const image = await c.importBusyboxImage(NS);
        for (const shim of SHIMS) {
          await t.step(shim.name, async () => {
            const id = `stdin-${shim.runtime.replace(/\W/g, "-")}`;
            const r = await ctrRun(c, {
              image,
              id,
              namespace: NS,
              runtime: shim.runtime,
              detach: true,
              args: ["sleep", "3600"],
            });
            assert.equal(r.code, 0, `${r.stdout}${r.stderr}`);
            const { hung, wrong } = await pipedExecs(c, id, TRIES);
            console.log(
              `containerd ${v.version}, ${shim.name}: ${hung.length} of ${TRIES} hung, ` +
                `${wrong.length} ended without their input echoed`,
            );
            await c.ctr(["tasks", "kill", "-s", "KILL", id], { namespace: NS });
            // containerd's contract for every shim: a piped exec ends once its input has.
            assert.deepEqual(hung, [], `${shim.name}: piped execs that never ended`);
            // And echoes its input: skiff always. The Go shim now and then ends such an exec
            // with exit 0 and no output (1 in 1500 at a load of 13): a race of its own, not a
            // hang, counted above and not asserted.
            if (shim.runtime !== GO_RUNTIME) {
              assert.deepEqual(wrong, [], `${shim.name}: piped execs that lost their input`);
            }
          });
        }
      } finally {
        await c.stop();
        await Deno.remove(prefix, { recursive: true }).catch(() => {});
      }
    },
  );
}
