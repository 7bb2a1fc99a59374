// The #9736/#12986/#13360 scenario on the releases that carry the fix (containerd 2.3.7, 2.4.2),
// driven by containerd's own Go client of that release (tests/fixtures/go-client, built by
// tests/setup/build_go_client.sh): a pod through the `shim` sandboxer with one container per
// way of carrying the sandbox's task-API endpoint:
//   request: CreateTaskRequest.task_api_address/version (fields 11/12) only;
//   client:  client.WithTaskAPIEndpoint as released (fields 11/12, and runc options 12/13 when
//            the container's runtime options are runc's);
//   legacy:  runc options carrying only the endpoint (12/13) as the task options.
// For the skiff runc and runsc examples: the runtime keeps its own options (a private runtime
// root), each task reaches the sandbox shim (no shim of its own), exit codes and stdout/stderr
// pass through. Which carrier the daemon took is measured through its deprecation warnings.
// The Go runc shim, side by side: the `shim` sandboxer cannot use it (no Sandbox API).
import assert from "node:assert/strict";
import { exists, findExecutable, integrationTest } from "../_integration.ts";
import {
  containerdVersions,
  skiffCacheDir,
  startContainerd,
} from "../../sdk/testing/containerd.ts";
import { createBusyboxBundle, mountsUnder } from "../../sdk/testing/bundle.ts";
import { installExampleShims } from "../../sdk/install/examples.ts";
import { shimSocketAddress, socketPath } from "../../sdk/shim/contract/socket_address.ts";

const NS = "skiff-go";
const SANDBOX = "pod";
const MODES = ["request", "client", "legacy"] as const;
/** Emitted by the daemon when it took the endpoint from runc options (2.3.1+). */
const LEGACY_DEPRECATION = "io.containerd.deprecation/runc-options-task-api-address";
/** skiff's own warning when a task's options are runc options with only the endpoint. */
const SKIFF_CARRIER_WARNING = /runc options carrying only task_api_address\/task_api_version/g;

interface GoContainer {
  id: string;
  mode: string;
  pid: number;
  deprecations: string[];
  exitStatus: number;
  stdout: string;
  stderr: string;
}

interface GoReport {
  step?: "created" | "done";
  error?: string;
  version: string;
  sandboxPid: number;
  endpoint: string;
  containers: GoContainer[];
}

/** The Go client built for `version`, building it when missing or stale (cached). */
async function goClient(version: string): Promise<string> {
  const out = await new Deno.Command("bash", {
    args: [new URL("../setup/build_go_client.sh", import.meta.url).pathname, version],
    env: { SKIFF_CACHE: skiffCacheDir() },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const dec = new TextDecoder();
  if (!out.success) {
    throw new Error(`build_go_client.sh ${version} failed: ${dec.decode(out.stderr)}`);
  }
  return dec.decode(out.stdout).trim().split(" ")[1]!;
}

/** Shim server processes (not `start`) whose command line has `-id <id>`. */
function shimServers(id: string): number[] {
  const pids: number[] = [];
  for (const e of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(e.name)) continue;
    try {
      const argv = Deno.readTextFileSync(`/proc/${e.name}/cmdline`).split("\0");
      const i = argv.indexOf("-id");
      if (i >= 0 && argv[i + 1] === id && !argv.includes("start") && !argv.includes("delete")) {
        pids.push(Number(e.name));
      }
    } catch { /* gone */ }
  }
  return pids;
}

function parentOf(pid: number): number {
  const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
  return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
}

/** True when `pid` is `ancestor` or one of its descendants. */
function descendsFrom(pid: number, ancestor: number): boolean {
  for (let p = pid; p > 1; p = parentOf(p)) if (p === ancestor) return true;
  return false;
}

/** Reads JSON lines from the Go client's stdout. */
async function* jsonLines(stream: ReadableStream<Uint8Array>): AsyncGenerator<GoReport> {
  const dec = new TextDecoder();
  let buf = "";
  for await (const chunk of stream) {
    buf += dec.decode(chunk, { stream: true });
    let nl;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      if (line.trim()) yield JSON.parse(line) as GoReport;
    }
  }
  if (buf.trim()) yield JSON.parse(buf) as GoReport;
}

interface Case {
  runtime: string;
  /** The go client's -options kind and extra TOML (cri). */
  options: "runc" | "cri";
  toml?: string;
}

const cases: Case[] = [
  { runtime: "io.containerd.skiff-runc.v2", options: "runc" },
  {
    runtime: "io.containerd.skiff-runsc.v2",
    options: "cri",
    toml: '[runsc_config]\nnetwork = "none"\nplatform = "ptrace"',
  },
];

const versions = containerdVersions().filter((v) => /^2\.([3-9]|\d\d)\./.test(v.version));
// Go builds the client (prepare.sh does it; the test rebuilds a stale one), found on PATH or in
// /usr/local/go/bin.
const NEEDS = {
  root: true,
  binaries: ["runc", "runsc"],
  check: () =>
    findExecutable("go") || findExecutable("/usr/local/go/bin/go") ? undefined : "go (Go 1.26)",
};

integrationTest("the Go client pod scenario runs on containerd 2.3 and 2.4", {
  check: () => {
    const have = versions.map((v) => v.version);
    const lacking = ["2.3", "2.4"].filter((p) => !have.some((h) => h.startsWith(`${p}.`)));
    return lacking.length > 0
      ? `containerd ${lacking.join(", ")} (run tests/setup/prepare.sh as root)`
      : undefined;
  },
}, () => Promise.resolve());

for (const v of versions) {
  for (const tc of cases) {
    integrationTest(
      `containerd ${v.version} Go client, shim sandboxer, ${tc.runtime}: the endpoint in ` +
        "CreateTaskRequest or in runc options, the runtime keeps its options",
      NEEDS,
      async () => {
        const bin = await goClient(v.version);
        const tmp = await Deno.makeTempDir({ prefix: "skiff-goclient-" });
        const [runcShim] = await installExampleShims({ prefix: tmp });
        const shimDir = runcShim!.slice(0, runcShim!.lastIndexOf("/"));
        const c = await startContainerd({ binDir: v.binDir, extraPath: [shimDir] });
        const rootfs = await createBusyboxBundle({ args: ["true"] });
        const runtimeRoot = `${tmp}/runtime-root`;
        let child: Deno.ChildProcess | undefined;
        try {
          child = new Deno.Command(bin, {
            args: [
              ...["-address", c.address, "-state", c.state, "-namespace", NS],
              ...["-runtime", tc.runtime, "-options", tc.options, "-root", runtimeRoot],
              ...(tc.toml ? ["-toml", tc.toml] : []),
              ...["-rootfs", `${rootfs.bundle}/rootfs`, "-cgroup-parent", c.cgroupParent],
              ...["-fifo-dir", c.fifoDir, "-sandbox", SANDBOX, "-modes", MODES.join(",")],
            ],
            stdin: "piped",
            stdout: "piped",
            stderr: "piped",
          }).spawn();
          const stderr = new Response(child.stderr).text();
          const lines = jsonLines(child.stdout);
          /** Fails with the client's report and stderr (read only then: it closes at exit). */
          const expectStep = async (r: GoReport | undefined, step: string): Promise<GoReport> => {
            if (r?.step !== step) {
              child!.kill("SIGKILL");
              assert.fail(`go client, expected "${step}": ${JSON.stringify(r)} ${await stderr}`);
            }
            return r;
          };
          const first = await expectStep((await lines.next()).value, "created");
          assert.equal(first.version.replace(/\+.*/, ""), v.version);

          // The sandbox runs in one skiff shim server; every task went to it.
          const [sandboxShim] = shimServers(SANDBOX);
          assert.ok(sandboxShim, "a shim server runs for the sandbox");
          assert.equal(first.sandboxPid, sandboxShim, "the sandbox pid is its shim's");
          assert.match(first.endpoint, /^ttrpc\+unix:\/\/\/run\/containerd\/s\/[0-9a-f]{64}$/);
          assert.deepEqual(first.containers.map((x) => x.mode), [...MODES]);
          const state = [...Deno.readDirSync(`${runtimeRoot}/${NS}`)].map((e) => e.name);
          for (const ctr of first.containers) {
            assert.deepEqual(shimServers(ctr.id), [], `no shim server of its own for ${ctr.id}`);
            const own = socketPath(shimSocketAddress(c.address, NS, ctr.id));
            assert.equal(await exists(own), false, `no socket of its own for ${ctr.id}`);
            assert.ok(descendsFrom(ctr.pid, sandboxShim), `${ctr.id}'s pid is the sandbox shim's`);
            // The runtime's own options are in effect: its private root holds the container
            // (runc keeps `<root>/<ns>/<id>/`, runsc `<root>/<ns>/<id>_sandbox:<id>.state`).
            assert.ok(
              state.some((n) => n === ctr.id || n.startsWith(`${ctr.id}_`)),
              `${ctr.id} in the runtime root: ${state}`,
            );
          }
          // What the daemon took the endpoint from: fields 11/12 for request and client (the
          // release's WithTaskAPIEndpoint also fills runc options 12/13 for runc, which the
          // daemon then ignores), runc options 12/13 (deprecated) for legacy.
          const [request, client, legacy] = first.containers;
          assert.ok(
            !request!.deprecations.includes(LEGACY_DEPRECATION),
            request!.deprecations.join(),
          );
          assert.ok(
            !client!.deprecations.includes(LEGACY_DEPRECATION),
            client!.deprecations.join(),
          );
          assert.ok(legacy!.deprecations.includes(LEGACY_DEPRECATION), legacy!.deprecations.join());

          const w = child.stdin.getWriter();
          await w.write(new TextEncoder().encode("go\n"));
          await w.close();
          const done = await expectStep((await lines.next()).value, "done");
          assert.equal((await child.status).code, 0);
          done.containers.forEach((ctr, i) => {
            assert.equal(ctr.exitStatus, 3 + i, `exit status of ${ctr.id}`);
            assert.equal(ctr.stdout, `out-${ctr.id}\n`, `stdout of ${ctr.id}`);
            assert.equal(ctr.stderr, `err-${ctr.id}\n`, `stderr of ${ctr.id}`);
          });
          // skiff saw the endpoint-only runc options once (the legacy task) and kept its own.
          const log = await c.logs();
          assert.equal(log.match(SKIFF_CARRIER_WARNING)?.length, 1, "skiff's carrier warning");

          // Stop and Shutdown took the sandbox down: its shim, socket and mounts are gone.
          for (let i = 0; i < 100 && shimServers(SANDBOX).length > 0; i++) {
            await new Promise((r) => setTimeout(r, 100));
          }
          assert.deepEqual(shimServers(SANDBOX), [], "the sandbox shim exited");
          const sock = first.endpoint.replace(/^ttrpc\+unix:\/\//, "");
          assert.equal(await exists(sock), false, "the sandbox socket is gone");
          assert.deepEqual(await mountsUnder(c.state), []);
        } finally {
          try {
            child?.kill("SIGKILL");
          } catch { /* exited */ }
          await child?.status.catch(() => undefined);
          await c.stop();
          await rootfs.cleanup();
          await Deno.remove(tmp, { recursive: true }).catch(() => {});
        }
      },
    );
  }

  integrationTest(
    `containerd ${v.version} Go client, shim sandboxer, the Go runc shim: no Sandbox API`,
    NEEDS,
    async () => {
      const bin = await goClient(v.version);
      const c = await startContainerd({ binDir: v.binDir });
      const rootfs = await createBusyboxBundle({ args: ["true"] });
      try {
        const out = await new Deno.Command(bin, {
          args: [
            ...["-address", c.address, "-state", c.state, "-namespace", NS],
            ...["-runtime", "io.containerd.runc.v2", "-options", "runc", "-root", c.runcRoot],
            ...["-rootfs", `${rootfs.bundle}/rootfs`, "-fifo-dir", c.fifoDir],
          ],
          stdin: "null",
          stdout: "piped",
          stderr: "piped",
        }).output();
        const report = JSON.parse(new TextDecoder().decode(out.stdout)) as GoReport;
        assert.equal(out.code, 1);
        // NewSandbox → the controller's Create → CreateSandbox on the Go shim, whose ttrpc
        // server answers Unimplemented "service <name>". containerd then asks the shim to shut
        // the sandbox down and runs its `delete`; the Go shim's server was seen to stay running
        // (2.3.7, 2.4.2) and once to exit (2.4.2): c.stop() kills a survivor.
        assert.match(
          report.error ?? "",
          /^NewSandbox\(pod, runtime io\.containerd\.runc\.v2\): .*failed to create sandbox pod: service containerd\.runtime\.sandbox\.v1\.Sandbox$/,
        );
      } finally {
        await c.stop();
        await rootfs.cleanup();
      }
    },
  );
}
