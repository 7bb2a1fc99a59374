/**
 * The operations endpoint and the RPC debug log of the real skiff runc shim, started the way
 * containerd starts it (ShimHarness: `start`, log FIFO, events server), without a containerd.
 */
import assert from "node:assert/strict";
import { exists, integrationTest } from "../_integration.ts";
import { ShimHarness } from "../../sdk/testing/harness.ts";
import { installExampleShims } from "../../sdk/install/examples.ts";
import { parseExposition } from "../../sdk/ops/metrics.ts";
import { opsSocketPath } from "../../sdk/shim/contract/socket_address.ts";
import { unixGet } from "../../sdk/ops/unix_http.ts";

const LAUNCHER = "containerd-shim-skiff-runc-v2";
const NEEDS = { root: true, binaries: ["mkfifo"] };

/** Polls until `cond` holds; fails after a generous bound (never a timing assertion). */
async function eventually(cond: () => Promise<boolean>, what: string): Promise<void> {
  const until = Date.now() + 30_000;
  while (!(await cond())) {
    if (Date.now() > until) throw new Error(`${what}: not within 30s`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function withShim(
  opts: { debug: boolean; env: Record<string, string> },
  fn: (h: ShimHarness, launcher: string) => Promise<void>,
): Promise<void> {
  const prefix = await Deno.makeTempDir({ prefix: "skiff-ops-shim-" });
  const bundle = await Deno.makeTempDir({ prefix: "skiff-ops-bundle-" });
  let h: ShimHarness | undefined;
  try {
    const [launcher] = await installExampleShims({
      prefix,
      shims: { [LAUNCHER]: "examples/runc/main.ts" },
    });
    h = await ShimHarness.start({
      shim: launcher!,
      bundle,
      id: `ops-${crypto.randomUUID().slice(0, 8)}`,
      namespace: "skiff-ops",
      debug: opts.debug,
      env: opts.env,
    });
    if (opts.debug ? opts.env.SKIFF_OPS !== "0" : opts.env.SKIFF_OPS === "1") {
      // The endpoint starts right after the ttrpc socket serves, which is when start returns.
      const ops = opsSocketPath(h.address);
      await eventually(() => exists(ops), "ops socket appears").catch((e) => {
        throw new Error(`${(e as Error).message}; shim log:\n${h!.log}`);
      });
    }
    await fn(h, launcher!);
  } finally {
    const ops = h ? opsSocketPath(h.address) : undefined;
    try {
      await h?.close();
      // A shim that did not exit on Shutdown is a bug the test reports, but the node stays clean.
      if (ops && await exists(ops)) {
        await eventually(async () => !(await exists(ops)), "ops socket removal").catch(
          async (e) => {
            // Still serving: stop the shim this test started (by its pid) before reporting.
            const state = await unixGet(ops, "/debug/state", { timeoutMs: 2_000 }).catch(() => {});
            const pid = state ? (JSON.parse(state.body) as { pid?: number }).pid : undefined;
            if (pid) {
              try {
                Deno.kill(pid, "SIGKILL");
              } catch { /* gone meanwhile */ }
            }
            await Deno.remove(ops).catch(() => {});
            throw new Error(`${(e as Error).message}; shim log:\n${h!.log}`);
          },
        );
      }
    } finally {
      await Deno.remove(bundle, { recursive: true }).catch(() => {});
      await Deno.remove(prefix, { recursive: true }).catch(() => {});
    }
  }
}

integrationTest(
  "skiff runc shim with SKIFF_OPS=1 serves <socket>.ops (0600) and removes it on Shutdown",
  NEEDS,
  async () => {
    let ops = "";
    await withShim({ debug: false, env: { SKIFF_OPS: "1" } }, async (h) => {
      ops = opsSocketPath(h.address);
      const st = await Deno.lstat(ops);
      assert.ok(st.isSocket);
      assert.equal(st.mode! & 0o777, 0o600);
      assert.equal(st.uid, 0);
      await assert.rejects(h.task.state({ id: "nope" }), /not found/);
      await h.task.connect({ id: h.id });
      const m = await unixGet(ops, "/metrics", { timeoutMs: 10_000 });
      assert.equal(m.status, 200);
      const fams = parseExposition(m.body);
      const value = (name: string, want: Record<string, string>) =>
        fams.flatMap((f) => f.samples).find((s) =>
          s.name === name &&
          Object.entries(want).every(([k, v]) => s.labels.some(([lk, lv]) => lk === k && lv === v))
        )?.value;
      assert.equal(
        value("skiff_ttrpc_requests_total", { method: "State", code: "NotFound" }),
        "1",
      );
      assert.equal(value("skiff_ttrpc_requests_total", { method: "Connect", code: "OK" }), "1");
      assert.equal(value("skiff_shim_info", { namespace: "skiff-ops", id: h.id }), "1");
      const state = JSON.parse((await unixGet(ops, "/debug/state", { timeoutMs: 10_000 })).body);
      assert.equal(state.endpoint.address, h.address);
      assert.equal(state.endpoint.ops, ops);
      assert.equal(state.bundle, h.bundle);
      assert.equal(state.containerdAddress, h.containerdAddress);
      assert.deepEqual(state.containers, []);
      // Without -debug there is no per-RPC log line.
      assert.doesNotMatch(h.log, /msg=rpc/);
    });
    assert.equal(await exists(ops), false, "the ops socket outlived the shim");
  },
);

integrationTest(
  "skiff runc shim with -debug logs one JSON line per RPC (SKIFF_LOG_FORMAT=json)",
  NEEDS,
  async () => {
    await withShim({ debug: true, env: { SKIFF_LOG_FORMAT: "json" } }, async (h) => {
      assert.ok(await exists(opsSocketPath(h.address)), "-debug enables the endpoint");
      await assert.rejects(h.task.state({ id: "ghost", execId: "e1" }), /not found/);
      let line: Record<string, unknown> | undefined;
      await eventually(() => {
        line = h.log.split("\n").filter(Boolean).map((l) => JSON.parse(l))
          .find((l) => l.msg === "rpc" && l.id === "ghost");
        return Promise.resolve(line !== undefined);
      }, "rpc log line");
      assert.equal(line!.level, "debug");
      assert.equal(line!.rpc, "containerd.task.v2.Task/State");
      assert.equal(line!.exec_id, "e1");
      assert.equal(line!.namespace, "skiff-ops");
      assert.equal(line!.runtime, "io.containerd.skiff-runc.v2");
      assert.equal(line!.code, "NotFound");
      assert.equal(typeof line!.duration_ms, "number");
      assert.match(String(line!.error), /container "ghost" not found/);
    });
  },
);

integrationTest(
  "skiff runc shim without -debug or SKIFF_OPS has no ops socket (SKIFF_OPS=0 vetoes -debug)",
  NEEDS,
  async () => {
    // The server logs "serving" after the endpoint would have started: only then is its
    // absence meaningful.
    const served = (h: ShimHarness) =>
      eventually(() => Promise.resolve(/msg=serving/.test(h.log)), "serving log line");
    await withShim({ debug: false, env: { SKIFF_OPS: "" } }, async (h) => {
      await h.task.connect({ id: h.id });
      await served(h);
      assert.equal(await exists(opsSocketPath(h.address)), false);
    });
    await withShim({ debug: true, env: { SKIFF_OPS: "0" } }, async (h) => {
      await assert.rejects(h.task.state({ id: "x" }), /not found/);
      await served(h);
      assert.equal(await exists(opsSocketPath(h.address)), false);
      // The RPC debug log stays on with -debug.
      await eventually(() => Promise.resolve(/msg=rpc/.test(h.log)), "rpc log line");
    });
  },
);

integrationTest(
  "skiff runc shim counts CreateSandbox outcomes and the Sandbox API calls by code",
  NEEDS,
  async () => {
    let ops = "";
    await withShim({ debug: false, env: { SKIFF_OPS: "1" } }, async (h) => {
      ops = opsSocketPath(h.address);
      await h.sandbox.createSandbox({ sandboxId: h.id, bundlePath: h.bundle });
      await assert.rejects(
        h.sandbox.createSandbox({ sandboxId: h.id, bundlePath: h.bundle }),
        /already exists/,
      );
      await assert.rejects(
        h.sandbox.createSandbox({ sandboxId: "not valid!", bundlePath: h.bundle }),
        /invalid sandbox id/,
      );
      const text = (await unixGet(ops, "/metrics", { timeoutMs: 10_000 })).body;
      const lines = text.split("\n");
      assert.ok(
        lines.includes(
          'skiff_sandbox_create_requests_total{runtime="io.containerd.skiff-runc.v2",result="ok"} 1',
        ),
        text,
      );
      assert.ok(
        lines.includes(
          'skiff_sandbox_create_requests_total{runtime="io.containerd.skiff-runc.v2",result="error"} 2',
        ),
        text,
      );
      for (const code of ["OK", "AlreadyExists", "InvalidArgument"]) {
        assert.ok(
          lines.includes(
            `skiff_ttrpc_requests_total{service="containerd.runtime.sandbox.v1.Sandbox",method="CreateSandbox",code="${code}"} 1`,
          ),
          `${code}:\n${text}`,
        );
      }
      assert.ok(
        lines.includes(
          'skiff_task_create_requests_total{runtime="io.containerd.skiff-runc.v2",result="error"} 0',
        ),
      );
      const state = JSON.parse((await unixGet(ops, "/debug/state", { timeoutMs: 10_000 })).body);
      assert.equal(state.sandboxes, 1);
      // With a sandbox, Task.Shutdown does not end the shim: ShutdownSandbox does.
      await h.sandbox.stopSandbox({ sandboxId: h.id });
      await h.sandbox.shutdownSandbox({ sandboxId: h.id });
      await eventually(async () => !(await exists(ops)), "ops socket removed at ShutdownSandbox");
    });
  },
);
