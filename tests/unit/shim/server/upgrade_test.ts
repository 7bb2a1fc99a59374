// The Upgrade method's calls into the shim's own hooks (sdk/shim/server/upgrade.ts), with a fake
// ttrpc server and fake tasks, no containerd and no re-exec: `prepareUpgrade` runs while
// requests are held and its failure or timeout refuses the upgrade; `upgradeCancelled` follows
// whenever prepare ran and the upgrade did not happen; `carryUpgrade` is asked for the state
// (its descriptors are among `stateDescriptors`). The installed launcher is a shell script that
// passes or fails its check; the re-exec itself fails (a passing check removes the launcher), so
// this process is never replaced. The real upgrade: tests/integration/shim/server/upgrade_test.ts.
import assert from "node:assert/strict";
import {
  registerUpgradeService,
  stateDescriptors,
  type UpgradeDeps,
} from "../../../../sdk/shim/server/upgrade.ts";
import { LAUNCHER_ENV } from "../../../../sdk/shim/contract/launcher_env.ts";
import type { UpgradeReport, UpgradeState } from "../../../../sdk/shim/contract/upgrade.ts";
import { UPGRADE_CHECK_FLAG, UPGRADE_STATE_SUFFIX } from "../../../../sdk/shim/contract/upgrade.ts";
import { Code } from "../../../../sdk/ttrpc/status_error.ts";
import { close, O, open, preloadLibc } from "../../../../sdk/linux/libc.ts";
import { closeOnExec, setCloseOnExec } from "../../../../sdk/linux/descriptors.ts";
import type { TtrpcServer, WireMethod } from "../../../../sdk/ttrpc/server.ts";
import { Logger } from "../../../../sdk/shim/logger.ts";
import type { RuntimeCarry } from "../../../../sdk/shim/runtime.ts";
import type { ContainerCarry } from "../../../../sdk/shim/server/carry.ts";

preloadLibc(); // bound once per file, so resource sanitizers see no new library

const state = (extra: Partial<UpgradeState> = {}): UpgradeState => ({
  format: "skiff.upgrade/1",
  token: "t",
  from: { code: "a", version: "0.1.0" },
  heldAt: 0,
  socket: "/s",
  bundle: "/b",
  listener: 3,
  connections: [{ fd: 4, lastStreamId: 0, replay: [], partial: "" }],
  containers: [],
  sandboxes: [],
  inheritedOptions: null,
  ...extra,
});

Deno.test("stateDescriptors() lists the listener, the connections, the containers' and the shim's own descriptors", () => {
  assert.deepEqual(stateDescriptors(state()), [3, 4]);
  const stdio = { stdin: "", stdout: "", stderr: "", terminal: false };
  const container: ContainerCarry = {
    id: "web",
    namespace: "default",
    bundle: "/b",
    options: {},
    rootfsMounted: false,
    init: {
      execId: "",
      stdio,
      pid: 1,
      state: "running",
      io: { stdout: { sink: 20, pipe: 22 } },
      runtimeCarry: { descriptors: { agent: 30 } },
    },
    execs: [],
  };
  assert.deepEqual(
    stateDescriptors(state({
      containers: [container],
      runtime: { descriptors: { console: 9, vsock: 11 }, data: { pid: 77 } },
    })).sort((a, b) => a - b),
    [3, 4, 9, 11, 20, 22, 30],
  );
  // Plain data only: no descriptor.
  assert.deepEqual(stateDescriptors(state({ runtime: { data: { pid: 77 } } })), [3, 4]);
});

/** A stand-in for the ttrpc server: records holds and releases; always quiet. */
class FakeServer {
  method: WireMethod | undefined;
  held = 0;
  released = 0;
  quiet = true;
  connectionCount = 0;
  registerWire(_service: string, methods: WireMethod[]): void {
    this.method = methods[0];
  }
  hold(): void {
    this.held++;
  }
  release(): void {
    this.released++;
  }
  carry(): unknown[] {
    return [];
  }
}

/** The shim's hooks, each call recorded in order. */
class FakeShimHooks {
  readonly calls: string[] = [];
  prepare: () => Promise<void> = () => Promise.resolve();
  carried: RuntimeCarry | undefined;
  carryError: string | undefined;
  constructor(readonly server: FakeServer) {}
  prepareUpgrade(): Promise<void> {
    this.calls.push(`prepare (held ${this.server.held > this.server.released})`);
    return this.prepare();
  }
  upgradeCancelled(): void {
    this.calls.push(`cancelled (held ${this.server.held > this.server.released})`);
  }
  carryUpgrade(): RuntimeCarry | undefined {
    this.calls.push("carry");
    if (this.carryError) throw new Error(this.carryError);
    return this.carried;
  }
}

interface Rig {
  dir: string;
  launcher: string;
  socket: string;
  server: FakeServer;
  hooks: FakeShimHooks;
  tasks: { settled: boolean; carried: number; carryError?: string };
  /** `reason` set says the server is shutting down (what the pod's `shutdown.reason` gives). */
  shutdown: { reason?: string };
  upgrade(req: { settleTimeoutMs?: number; force?: boolean }): Promise<UpgradeReport>;
}

/**
 * Runs `fn` with an installed launcher, the launcher environment set as a bundle launcher sets
 * it, and the Upgrade method registered on fakes. The launcher is a script whose check exits
 * `checkExit`; a check that passes removes the script, so that a re-exec, should the upgrade
 * get that far, fails (ENOENT) instead of replacing this process. Run in any other way (this
 * process replaced after all), it fails loudly.
 */
async function withRig(checkExit: number, fn: (r: Rig) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "skiff-upgrade-unit-" });
  const launcher = `${dir}/launcher`;
  await Deno.writeTextFile(
    launcher,
    [
      "#!/bin/sh",
      `${LAUNCHER_ENV.code}=bbbb`,
      `if [ "$1" = "-${UPGRADE_CHECK_FLAG}" ]; then`,
      checkExit === 0 ? '  rm -f "$0"' : '  echo "check: no such format" >&2',
      `  exit ${checkExit}`,
      "fi",
      'echo "upgrade_test.ts: the test process was re-executed into the launcher" >&2',
      "exit 97",
      "",
    ].join("\n"),
  );
  await Deno.chmod(launcher, 0o755);
  const saved = {
    launcher: Deno.env.get(LAUNCHER_ENV.launcher),
    code: Deno.env.get(LAUNCHER_ENV.code),
  };
  Deno.env.set(LAUNCHER_ENV.launcher, launcher);
  Deno.env.set(LAUNCHER_ENV.code, "aaaa"); // the code running: not the installed one
  const server = new FakeServer();
  const hooks = new FakeShimHooks(server);
  const tasks = { settled: true, carried: 0, carryError: undefined as string | undefined };
  const shutdown: { reason?: string } = {};
  const socket = `${dir}/shim.sock`;
  const deps: UpgradeDeps = {
    flags: {
      namespace: "ns",
      id: "c1",
      address: "/run/containerd.sock",
      publishBinary: "/bin/containerd",
      debug: false,
    } as UpgradeDeps["flags"],
    socket,
    bundle: dir,
    server: server as unknown as TtrpcServer,
    tasks: {
      containers: new Map(),
      get settled() {
        return tasks.settled;
      },
      carry: () => {
        tasks.carried++;
        if (tasks.carryError) throw new Error(tasks.carryError);
        return [];
      },
      adopt: () => Promise.resolve(),
    },
    publisher: { stats: { queued: 0 } } as unknown as UpgradeDeps["publisher"],
    carrySandboxes: () => [],
    inheritedOptions: () => undefined,
    logger: new Logger({ sink: () => {} }),
    shim: hooks,
    ending: () => shutdown.reason,
  };
  registerUpgradeService(deps);
  const method = server.method!;
  assert.ok(method, "the Upgrade method is registered");
  try {
    await fn({
      shutdown,
      dir,
      launcher,
      socket,
      server,
      hooks,
      tasks,
      upgrade: async (req) =>
        (await method.impl({ token: crypto.randomUUID(), ...req }, {} as never)) as UpgradeReport,
    });
  } finally {
    const restore: [string, string | undefined][] = [
      [LAUNCHER_ENV.launcher, saved.launcher],
      [LAUNCHER_ENV.code, saved.code],
    ];
    for (const [k, v] of restore) {
      if (v === undefined) Deno.env.delete(k);
      else Deno.env.set(k, v);
    }
    await Deno.remove(dir, { recursive: true });
  }
}

/** Rejects like the Upgrade method's refusals: a status error with `code`, matching `message`. */
async function refused(p: Promise<unknown>, code: number, message: RegExp): Promise<void> {
  await assert.rejects(p, (e: unknown) => {
    const err = e as { code?: number; rawMessage?: string };
    assert.equal(err.code, code, `status code of: ${err.rawMessage}`);
    assert.match(err.rawMessage ?? "", message);
    return true;
  });
}

Deno.test("Upgrade refuses when prepareUpgrade rejects, and tells the shim the upgrade was cancelled", async () => {
  await withRig(0, async (r) => {
    r.hooks.prepare = () => Promise.reject(new Error("the agent did not release its polls"));
    await refused(
      r.upgrade({ force: true }),
      Code.FailedPrecondition,
      /^refused: the shim could not prepare for the upgrade: the agent did not release its polls/,
    );
    // prepare ran while requests were held, cancelled before they were released.
    assert.deepEqual(r.hooks.calls, ["carry", "prepare (held true)", "cancelled (held true)"]);
    assert.equal(r.server.held, 1);
    assert.equal(r.server.released, 1, "requests are served again");
  });
});

Deno.test("Upgrade refuses when prepareUpgrade does not finish within the settle timeout", async () => {
  await withRig(0, async (r) => {
    const never = Promise.withResolvers<void>();
    r.hooks.prepare = () => never.promise;
    await refused(
      r.upgrade({ force: true, settleTimeoutMs: 50 }),
      Code.FailedPrecondition,
      /^refused: the shim could not prepare for the upgrade: not done within 50 ms/,
    );
    assert.deepEqual(r.hooks.calls, ["carry", "prepare (held true)", "cancelled (held true)"]);
    assert.equal(r.server.released, 1);
    never.resolve();
  });
});

Deno.test("Upgrade calls upgradeCancelled when, after prepare, the shim does not settle", async () => {
  await withRig(0, async (r) => {
    r.tasks.settled = false; // a stdio chunk mid-way, for ever
    await refused(
      r.upgrade({ force: true, settleTimeoutMs: 50 }),
      Code.FailedPrecondition,
      /^refused: not settled within 50 ms \(an exit or a stdio chunk is mid-way\)/,
    );
    assert.deepEqual(r.hooks.calls, ["carry", "prepare (held true)", "cancelled (held true)"]);
    assert.equal(r.server.released, 1);
  });
});

Deno.test("Upgrade does not prepare the shim when it refuses before holding requests", async () => {
  // The installed code fails its check.
  await withRig(1, async (r) => {
    await refused(r.upgrade({ force: true }), Code.FailedPrecondition, /failed its check/);
    assert.deepEqual(r.hooks.calls, ["carry"]); // asked whether it could carry, nothing more
    assert.equal(r.server.held, 0);
  });
  // A container cannot be carried.
  await withRig(0, async (r) => {
    r.tasks.carryError = 'container "web" is being created';
    await refused(r.upgrade({ force: true }), Code.FailedPrecondition, /being created/);
    assert.deepEqual(r.hooks.calls, []);
    assert.equal(r.server.held, 0);
  });
  // The installed code is the code running: nothing to do.
  await withRig(0, async (r) => {
    Deno.env.set(LAUNCHER_ENV.code, "bbbb");
    const report = await r.upgrade({});
    assert.equal(report.upgraded, false);
    assert.deepEqual(r.hooks.calls, []);
  });
});

Deno.test("Upgrade hands on carryUpgrade's descriptors once settled; a failed re-exec cancels", async () => {
  await withRig(0, async (r) => {
    // The real listener the state hands on.
    const listener = Deno.listen({ transport: "unix", path: r.socket });
    const fd = open(r.launcher, O.RDONLY); // the shim's own descriptor (a VM's console, say)
    try {
      setCloseOnExec(fd, false);
      r.hooks.carried = { descriptors: { console: fd }, data: { pid: 77 } };
      // Checked (the launcher removed itself: the rig's guard), execve fails and the old code
      // serves on.
      await refused(
        r.upgrade({ force: true }),
        Code.Internal,
        /^live upgrade failed, still serving the old code: execve .*ENOENT/,
      );
      assert.deepEqual(r.hooks.calls, [
        "carry",
        "prepare (held true)",
        "carry",
        "cancelled (held true)",
      ]);
      assert.equal(r.server.released, 1);
      // The state was written and removed again.
      await assert.rejects(Deno.stat(`${r.socket}${UPGRADE_STATE_SUFFIX}`), Deno.errors.NotFound);
      // Its close-on-exec was cleared for the execve and set again after it failed: it was
      // among the descriptors handed on.
      assert.equal(closeOnExec(fd), true);
    } finally {
      close(fd);
      listener.close();
    }
  });
});

Deno.test("Upgrade fails before the re-exec when a descriptor carryUpgrade names is not open", async () => {
  await withRig(0, async (r) => {
    const listener = Deno.listen({ transport: "unix", path: r.socket });
    try {
      r.hooks.carried = { descriptors: { console: 99_999 } };
      await refused(
        r.upgrade({ force: true }),
        Code.Internal,
        /^live upgrade failed, still serving the old code: fcntl F_SETFD fd 99999/,
      );
      assert.deepEqual(r.hooks.calls, [
        "carry",
        "prepare (held true)",
        "carry",
        "cancelled (held true)",
      ]);
      await assert.rejects(Deno.stat(`${r.socket}${UPGRADE_STATE_SUFFIX}`), Deno.errors.NotFound);
    } finally {
      listener.close();
    }
  });
});

Deno.test("Upgrade refuses, holding nothing, when carryUpgrade refuses", async () => {
  await withRig(0, async (r) => {
    r.hooks.carryError = "the VM's console cannot be handed on";
    await refused(
      r.upgrade({ force: true }),
      Code.FailedPrecondition,
      /^refused: the VM's console cannot be handed on/,
    );
    // Asked before anything was held: nothing to prepare or cancel.
    assert.deepEqual(r.hooks.calls, ["carry"]);
    assert.equal(r.server.held, 0);
  });
});

Deno.test("Upgrade refuses a shim that is shutting down: before holding, and when Shutdown came while it settled", async () => {
  await withRig(0, async (r) => {
    r.shutdown.reason = "Shutdown";
    await refused(
      r.upgrade({ force: true }),
      Code.Unavailable,
      /^ended: the shim is shutting down \(Shutdown\); nothing is left to upgrade/,
    );
    assert.equal(r.server.held, 0, "nothing held");
  });
  await withRig(0, async (r) => {
    // Settling (a chunk mid-way) when containerd's Shutdown is answered: no re-exec follows.
    r.tasks.settled = false;
    setTimeout(() => {
      r.shutdown.reason = "Shutdown";
      r.tasks.settled = true;
    }, 20);
    await refused(r.upgrade({ force: true, settleTimeoutMs: 2_000 }), Code.Unavailable, /^ended:/);
    assert.deepEqual(r.hooks.calls, ["carry", "prepare (held true)", "cancelled (held true)"]);
    assert.equal(r.server.released, 1, "the held requests run (Shutdown's own among them)");
  });
});
