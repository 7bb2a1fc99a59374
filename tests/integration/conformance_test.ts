// `deno task conformance` and runConformance, validated against real shims: containerd's Go
// runc shim (each containerd's own) and skiff's runc example pass every scenario they support,
// and a deliberately broken shim (tests/fixtures/conformance) fails exactly the scenarios its
// defects touch, so no scenario can pass by accident. The Go shim runs the catalogue on 1.6
// (where `info` and `sandbox-api` must be skipped, not passed), 2.1 and 2.4; skiff's runc
// example on every version (1.6, 1.7, 2.1, 2.2, 2.3, 2.4) and a subset on 1.6 through the CLI;
// skiff's runsc example on 2.1 and 2.4. skiff's runc example with shared servers
// (SKIFF_SHARED_PODS=4), each scenario beside a neighbour container in the same server process,
// passes every scenario the per-pod example passes in the same run on 1.6, 2.1 and 2.4, but
// `live-upgrade` (not applicable: a shared server refuses it by design); two extra scenarios
// show that the neighbour checks fail a pod served elsewhere and a neighbour that ended.
import assert from "node:assert/strict";
import { integrationTest } from "../_integration.ts";
import { containerdVersions } from "../../sdk/testing/containerd.ts";
import { installExampleShims } from "../../sdk/install/examples.ts";
import { runConformance, SHARED_NO_UPGRADE } from "../../sdk/testing/conformance/runner.ts";
import { CATALOGUE } from "../../sdk/testing/conformance/catalogue.ts";
import { shimBinaryName } from "../../sdk/testing/conformance/kit.ts";
import { probeHost, type Scenario, unmet } from "../../sdk/testing/conformance/scenario.ts";
import {
  compareReports,
  type ConformanceReport,
  hasFailures,
  markdownReport,
} from "../../sdk/testing/conformance/report.ts";

const ALL = CATALOGUE.map((s) => s.id);
const v16 = containerdVersions().find((v) => v.version.startsWith("1.6."));
const v21 = containerdVersions().find((v) => v.version.startsWith("2.1."));
const v24 = containerdVersions().find((v) => v.version.startsWith("2.4."));
const REQ = {
  root: true,
  binaries: ["runc", "/bin/busybox"],
  check: () =>
    v16 && v21 && v24 ? undefined : "containerd 1.6, 2.1 and 2.4 (run tests/setup/prepare.sh)",
};
/** What a shim serving everything skips under `version`: nothing from 2.0 on. */
function skippedOn(version: string): string[] {
  return version.startsWith("1.") ? ["info", "sandbox-api"] : [];
}
const CLI = new URL("../../sdk/testing/conformance/cli.ts", import.meta.url).pathname;

/** Scenario ids by status under one containerd version. */
function byStatus(r: ConformanceReport, version: string, status: string): string[] {
  return r.results.filter((x) => x.containerd === version && x.status === status)
    .map((x) => x.scenario);
}

function describe(r: ConformanceReport): string {
  return markdownReport(r);
}

Deno.test("conformance: every scenario is described and its id is unique", () => {
  assert.equal(new Set(ALL).size, ALL.length);
  for (const s of CATALOGUE) {
    assert.match(s.id, /^[a-z0-9-]+$/, s.id);
    assert.ok(s.title && s.standsFor.length > 20, `${s.id} says what it stands for`);
  }
  for (
    const id of [
      "run-exit-code",
      "stdio-eof",
      "stdin-closeio",
      "exec-stdio",
      "exec-tty",
      "kill-signals",
      "pause-resume",
      "pids",
      "metrics",
      "oom",
      "events-order",
      "containerd-restart",
      "shim-killed",
      "grouping",
      "info",
      "sandbox-api",
      "cri-pod",
    ]
  ) assert.ok(ALL.includes(id), `the catalogue has ${id}`);
});

Deno.test("conformance: requirements skip with a reason", () => {
  const info = CATALOGUE.find((s) => s.id === "info")!;
  const host = { cgroup: true, "cgroup-freezer": true };
  assert.equal(unmet(info, { containerd: "1.7.24", host, traits: {} }), "needs containerd >= 2.0");
  assert.equal(unmet(info, { containerd: "2.1.9", host, traits: {} }), undefined);
  const grouping = CATALOGUE.find((s) => s.id === "grouping")!;
  assert.equal(
    unmet(grouping, { containerd: "2.1.9", host, traits: { grouping: false } }),
    "runtime declared without grouping",
  );
  const pause = CATALOGUE.find((s) => s.id === "pause-resume")!;
  const noFreezer = { cgroup: true, "cgroup-freezer": false };
  assert.equal(
    unmet(pause, { containerd: "2.1.9", host: noFreezer, traits: {} }),
    "host lacks cgroup-freezer",
  );
  // A trait declared not applicable skips every scenario needing it, naming the reason.
  const tty = CATALOGUE.find((s) => s.id === "exec-tty")!;
  const vm = { terminals: { notApplicable: "no terminals in the guest" } };
  assert.equal(
    unmet(tty, { containerd: "2.4.2", host, traits: vm }),
    "not applicable: no terminals in the guest",
  );
  assert.equal(unmet(tty, { containerd: "2.4.2", host, traits: {} }), undefined);
  assert.equal(unmet(info, { containerd: "2.4.2", host, traits: vm }), undefined);
  assert.equal(typeof probeHost().cgroup, "boolean");
  assert.equal(shimBinaryName("io.containerd.runc.v2"), "containerd-shim-runc-v2");
  assert.throws(() => shimBinaryName("runc"), /not like io\.containerd\.X\.v2/);
});

Deno.test("conformance: the Markdown matrix and the baseline comparison", () => {
  const report = (statuses: Record<string, "pass" | "fail" | "skip">): ConformanceReport => ({
    runtime: "io.containerd.x.v2",
    shim: "/x",
    date: "",
    containerd: ["1.6.20", "2.1.9"],
    scenarios: [{ id: "a", title: "A", standsFor: "" }, { id: "b", title: "B", standsFor: "" }],
    results: Object.entries(statuses).map(([k, status]) => {
      const [scenario, containerd] = k.split("@") as [string, string];
      return { scenario, containerd, status, ...(status === "pass" ? {} : { reason: "why|not" }) };
    }),
    notCovered: ["c"],
  });
  const base = report({
    "a@1.6.20": "pass",
    "a@2.1.9": "pass",
    "b@1.6.20": "skip",
    "b@2.1.9": "pass",
  });
  const now = report({
    "a@1.6.20": "pass",
    "a@2.1.9": "fail",
    "b@1.6.20": "skip",
    "b@2.1.9": "skip",
  });
  const md = markdownReport(now);
  assert.match(md, /\| scenario \| containerd 1\.6\.20 \| containerd 2\.1\.9 \|/);
  assert.match(md, /\| `a` A \| pass \| \*\*FAIL\*\*: why\\\|not \|/);
  assert.match(md, /\| `b` B \| skip: why\\\|not \| skip: why\\\|not \|/);
  assert.match(md, /1 passed, 1 failed, 2 skipped/);
  const na = { ...now, results: [{ ...now.results[3]!, reason: "not applicable: a VM" }] };
  assert.match(markdownReport(na), /\| `b` B \| – \| not applicable: a VM \|/);
  assert.ok(hasFailures(now) && !hasFailures(base));
  assert.deepEqual(compareReports(base, now), [
    { scenario: "a", containerd: "2.1.9", was: "pass", now: "fail", reason: "why|not" },
    { scenario: "b", containerd: "2.1.9", was: "pass", now: "skip", reason: "why|not" },
  ]);
  assert.deepEqual(compareReports(base, base), []);
});

Deno.test("conformance CLI: --help, and bad usage exits 2", async () => {
  const run = (...args: string[]) =>
    new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", CLI, ...args],
      stdout: "piped",
      stderr: "piped",
    })
      .output();
  const help = await run("--help");
  assert.equal(help.code, 0);
  assert.match(new TextDecoder().decode(help.stdout), /--runtime TYPE/);
  assert.match(new TextDecoder().decode(help.stdout), /--neighbour /);
  assert.equal((await run()).code, 2);
  assert.equal((await run("--bogus")).code, 2);
  const na = ["--runtime", "io.containerd.x.v2"];
  assert.equal((await run(...na, "--not-applicable", "bogus=why")).code, 2);
  assert.equal((await run(...na, "--not-applicable", "terminals")).code, 2);
});

integrationTest(
  "conformance: containerd's Go runc shim passes the whole catalogue on 2.4, 2.1 and 1.6",
  REQ,
  async () => {
    const report = await runConformance({
      runtime: "io.containerd.runc.v2",
      containerd: [v24!.version, v21!.version, v16!.version],
      // The Go runc shim serves no Sandbox API (its own declaration, not a finding).
      traits: { sandboxApi: false },
    });
    const md = describe(report);
    // No live upgrade either: the Go shim runs its code until its last container exits.
    for (const v of [v24!, v21!]) {
      assert.deepEqual(byStatus(report, v.version, "fail"), [], md);
      assert.deepEqual(byStatus(report, v.version, "skip"), ["sandbox-api", "live-upgrade"], md);
    }
    assert.deepEqual(byStatus(report, v16!.version, "fail"), [], md);
    assert.deepEqual(
      byStatus(report, v16!.version, "skip"),
      ["info", "sandbox-api", "live-upgrade"],
      md,
    );
    assert.match(
      report.results.find((x) => x.scenario === "live-upgrade")!.reason!,
      /^not applicable: the shim serves no live upgrade/,
    );
    assert.match(
      report.results.find((x) => x.scenario === "info" && x.containerd === v16!.version)!.reason!,
      /needs containerd >= 2\.0/,
    );
  },
);

integrationTest(
  "conformance: skiff's runc example passes the whole catalogue on every containerd, and through the CLI on 1.6",
  REQ,
  async () => {
    const prefix = await Deno.makeTempDir({ prefix: "skiff-conf-test-" });
    try {
      await installExampleShims({ prefix });
      const report = await runConformance({
        runtime: "io.containerd.skiff-runc.v2",
        shimDir: `${prefix}/bin`,
      });
      const md = describe(report);
      assert.deepEqual(report.containerd, containerdVersions().map((v) => v.version));
      for (const v of report.containerd) {
        assert.deepEqual(byStatus(report, v, "fail"), [], md);
        assert.deepEqual(byStatus(report, v, "skip"), skippedOn(v), md);
      }

      // The command line: a subset on 1.6, JSON out, and a baseline with no regression.
      const json = `${prefix}/matrix.json`;
      const cli = await new Deno.Command(Deno.execPath(), {
        args: [
          "run",
          "-A",
          CLI,
          "--runtime",
          "io.containerd.skiff-runc.v2",
          "--shim",
          `${prefix}/bin`,
          "--containerd",
          "1.6",
          "--only",
          "^(run-exit-code|events-order|info)$",
          "--json",
          json,
        ],
        stdout: "piped",
        stderr: "piped",
      }).output();
      const out = new TextDecoder().decode(cli.stdout);
      assert.equal(cli.code, 0, out + new TextDecoder().decode(cli.stderr));
      assert.match(out, /\| `run-exit-code` run, exit code \| pass \|/);
      assert.match(out, /\| `info` `-info`: RuntimeInfo \| skip: needs containerd >= 2\.0 \|/);
      const written: ConformanceReport = JSON.parse(await Deno.readTextFile(json));
      assert.deepEqual(written.containerd, [v16!.version]);
      assert.deepEqual(written.scenarios.map((s) => s.id), [
        "run-exit-code",
        "events-order",
        "info",
      ]);
      assert.deepEqual(compareReports(written, written), []);
    } finally {
      await Deno.remove(prefix, { recursive: true });
    }
  },
);

integrationTest(
  "conformance: a broken shim fails exactly the scenarios its defects touch",
  REQ,
  async (t) => {
    const prefix = await Deno.makeTempDir({ prefix: "skiff-conf-broken-" });
    try {
      await installExampleShims({
        prefix,
        shims: { "containerd-shim-skiff-broken-v2": "tests/fixtures/conformance/broken_shim.ts" },
      });
      const cases: { defects: string; fail: string[] }[] = [
        {
          defects: "kill,pause,ps,exec-exit",
          fail: [
            "exec-stdio", // exec exit 5, not 4
            "exec-tty", // terminal exec exit 6, not 5
            "kill-signals", // SIGTERM delivered as SIGKILL: 137, not 143
            "pause-resume", // status PAUSED but the cgroup is not frozen
            "pids", // ListPids has only the init
            "events-order", // /tasks/exit(x)=3
            "containerd-restart", // exec after restart exits 9
            "cri-pod", // ExecSync exit code 4
            "live-upgrade", // the exec after the upgrades exits 3, not 2
          ],
        },
        {
          defects: "init-exit,info,no-group,cleanup",
          fail: [
            "run-exit-code", // 4, not 3
            "stdio-eof", // exit status 4
            "stdin-closeio", // cat's 0 becomes 1
            "pids", // the init is a shell with the real process as its child
            "oom", // 138, not 137
            "shim-killed", // `<shim> delete` leaves the init running
            "grouping", // two shims for the group
            "info", // RuntimeInfo without a name
            "sandbox-api", // the sandboxed container exits 5
            "live-upgrade", // Wait across the upgrades: 7, not 6
          ],
        },
      ];
      for (const tc of cases) {
        await t.step(`defects ${tc.defects}`, async () => {
          const report = await runConformance({
            runtime: "io.containerd.skiff-broken.v2",
            shimDir: `${prefix}/bin`,
            containerd: [v21!.version],
            env: { SKIFF_BROKEN_DEFECTS: tc.defects },
            // The cleanup defect leaves an init that never dies: fail that wait sooner.
            stepMs: 15_000,
          });
          const md = describe(report);
          assert.deepEqual(
            byStatus(report, v21!.version, "fail"),
            tc.fail.sort(
              (a, b) => ALL.indexOf(a) - ALL.indexOf(b),
            ),
            md,
          );
          assert.deepEqual(
            byStatus(report, v21!.version, "pass"),
            ALL.filter((id) => !tc.fail.includes(id)),
            md,
          );
          // Against a clean baseline, exactly the failures are regressions.
          const clean: ConformanceReport = {
            ...report,
            results: report.results.map((r) => ({
              scenario: r.scenario,
              containerd: r.containerd,
              status: "pass",
            })),
          };
          assert.deepEqual(
            compareReports(clean, report).map((g) => g.scenario).sort(),
            [...tc.fail].sort(),
          );
        });
      }
    } finally {
      await Deno.remove(prefix, { recursive: true });
    }
  },
);

Deno.test("docs/conformance.md describes every scenario and shows full matrices", async () => {
  const doc = await Deno.readTextFile(new URL("../../docs/conformance.md", import.meta.url));
  for (const s of CATALOGUE) {
    assert.match(doc, new RegExp(`^\\| \`${s.id}\` +\\| `, "m"), `${s.id} in the scenario table`);
    // One matrix row per shim (Go runc, skiff runc, skiff runsc, rust-extensions' Rust runc,
    // skiff's VM example).
    const rows = doc.split("\n").filter((l) =>
      new RegExp(`^\\| \`${s.id}\` ${RegExp.escape(s.title)} +\\|`).test(l)
    );
    assert.equal(rows.length, 5, `${s.id}: matrix rows`);
  }
  assert.ok(!/_MATRIX/.test(doc), "every matrix is pasted");
});

integrationTest(
  "conformance: skiff's runsc example passes the whole catalogue on 2.1 and 2.4",
  { ...REQ, binaries: [...REQ.binaries, "runsc"] },
  async () => {
    const prefix = await Deno.makeTempDir({ prefix: "skiff-conf-runsc-" });
    try {
      await installExampleShims({ prefix });
      const report = await runConformance({
        runtime: "io.containerd.skiff-runsc.v2",
        shimDir: `${prefix}/bin`,
        containerd: [v21!.version, v24!.version],
        runcOptions: false,
      });
      const md = describe(report);
      for (const v of [v21!, v24!]) {
        assert.deepEqual(byStatus(report, v.version, "fail"), [], md);
        assert.deepEqual(byStatus(report, v.version, "pass"), ALL, md);
      }
    } finally {
      await Deno.remove(prefix, { recursive: true });
    }
  },
);

/** Scenarios that start no task of their own containerd's: nothing of theirs joins a server. */
const NO_TASK = ["info", "cri-pod"];

integrationTest(
  "conformance: skiff's runc example with shared servers passes, beside a neighbour in each server, every scenario the per-pod example passes (1.6, 2.1, 2.4)",
  REQ,
  async (t) => {
    const perPod = await Deno.makeTempDir({ prefix: "skiff-conf-perpod-" });
    const shared = await Deno.makeTempDir({ prefix: "skiff-conf-shared-" });
    const runtime = "io.containerd.skiff-runc.v2";
    const versions = [v16!.version, v21!.version, v24!.version];
    try {
      await installExampleShims({ prefix: perPod });
      await installExampleShims({ prefix: shared, sharedPods: 4 });
      const launcher = await Deno.readTextFile(`${shared}/bin/${shimBinaryName(runtime)}`);
      assert.match(launcher, /SKIFF_SHARED_PODS:=4/, "the shared install's launcher");
      const base = await runConformance({
        runtime,
        shimDir: `${perPod}/bin`,
        containerd: versions,
      });
      const report = await runConformance({
        runtime,
        shimDir: `${shared}/bin`,
        containerd: versions,
        neighbour: true,
      });
      const md = `per pod:\n${describe(base)}\nshared:\n${describe(report)}`;
      assert.deepEqual(report.containerd, versions);
      for (const v of versions) {
        // The baseline passes what the per-pod test above says, live upgrade included.
        assert.deepEqual(byStatus(base, v, "skip"), skippedOn(v), md);
        const passed = byStatus(base, v, "pass");
        assert.ok(passed.includes("live-upgrade"), md);
        // Shared: the same, but live upgrade, not applicable and saying why.
        assert.deepEqual(byStatus(report, v, "fail"), [], md);
        assert.deepEqual(byStatus(report, v, "pass"), passed.filter((id) => id !== "live-upgrade"));
        assert.deepEqual(byStatus(report, v, "skip"), [...skippedOn(v), "live-upgrade"], md);
        const upgrade = report.results.find((r) =>
          r.containerd === v && r.scenario === "live-upgrade"
        );
        assert.equal(upgrade!.reason, `not applicable: ${SHARED_NO_UPGRADE}`);
        // Every passing scenario ran beside its neighbour, in a server of its own namespace
        // (sharing is per namespace); each that starts a task had it served there.
        const servers = new Set<number>();
        for (const r of report.results.filter((r) => r.containerd === v && r.status === "pass")) {
          assert.ok(r.shared, `${r.scenario} on ${v} ran beside a neighbour`);
          servers.add(r.shared.server);
          if (NO_TASK.includes(r.scenario)) assert.equal(r.shared.joined, 0, r.scenario);
          else assert.ok(r.shared.joined >= 1, `${r.scenario} on ${v}: a task joined the server`);
        }
        assert.equal(servers.size, byStatus(report, v, "pass").length, "a server per scenario");
        // No per-pod run reports sharing.
        assert.ok(base.results.every((r) => r.shared === undefined));
      }

      // The neighbour checks can fail: a pod beyond the limit is served by another process, and a
      // neighbour that ends during the check (its server not killed) fails the scenario.
      await t.step("a pod served elsewhere, a neighbour gone: both fail", async () => {
        const overflow: Scenario = {
          id: "overflow",
          title: "four pods beside the neighbour",
          standsFor: "a shared server takes at most SKIFF_SHARED_PODS pods",
          async check(ctx) {
            for (let i = 0; i < 4; i++) await ctx.run(["sleep", "600"]);
          },
        };
        const gone: Scenario = {
          id: "neighbour-gone",
          title: "the neighbour killed",
          standsFor: "a neighbour that ends fails the scenario",
          async check(ctx) {
            await ctx.run(["sleep", "600"]);
            await ctx.client.tasks.kill({ containerId: ctx.neighbour!.id, signal: 9 });
            await ctx.wait(ctx.neighbour!.id);
          },
        };
        const report = await runConformance({
          runtime,
          shimDir: `${shared}/bin`,
          containerd: [v24!.version],
          neighbour: true,
          catalogue: [overflow, gone],
        });
        const md = describe(report);
        assert.deepEqual(
          byStatus(report, v24!.version, "fail"),
          ["overflow", "neighbour-gone"],
          md,
        );
        const reason = (id: string) => report.results.find((r) => r.scenario === id)!.reason!;
        assert.match(
          reason("overflow"),
          /^neighbour: conf-overflow-\d+ was served by pid \d+, not the neighbour's \d+$/,
          md,
        );
        assert.match(
          reason("neighbour-gone"),
          /^neighbour: conf-neighbour-gone-neighbour is (STOPPED|gone)/,
          md,
        );
      });
    } finally {
      await Deno.remove(perPod, { recursive: true });
      await Deno.remove(shared, { recursive: true });
    }
  },
);
