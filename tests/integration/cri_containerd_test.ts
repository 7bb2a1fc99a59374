/**
 * The Kubernetes path: kubelet's calls through CRI (`runtime.v1` on containerd's socket) to a
 * private containerd 1.6, 1.7 and 2.1 whose runtime handlers are containerd's Go runc shim
 * (`runc`, the reference, run first in the same test), skiff's runc example (`skiff-runc`) and
 * skiff's runsc example (`skiff-runsc`; CRI's containers are gVisor sub-containers there).
 *
 * Per handler, one host-network pod (no hostname, as kubelet sends it): a long-running container
 * with `ExecSync` (exit code and output), the CRI log file of a container, a container that
 * exits 7 on its own, `StopContainer` delivering SIGTERM to a container that traps it, then stop
 * and remove everything and check that no shim of this containerd serves the pod any more and no
 * mount of it remains. Every CRI call has a deadline, so a hang fails the step and never the run.
 *
 * The Kubernetes section of docs/containerd-config.md is checked against the same config here.
 */
import assert from "node:assert/strict";
import { integrationTest } from "../_integration.ts";
import {
  containerdVersions,
  type PrivateContainerd,
  type RuntimeConfig,
  startContainerd,
} from "../../sdk/testing/containerd.ts";
import { CRI_NAMESPACE, type CriClient, criClient } from "../../sdk/testing/cri_client.ts";
import { type CriHandler, criPlugins, criRuntimePlugin } from "../../sdk/testing/cri_config.ts";
import { installExampleShims } from "../../sdk/install/examples.ts";
import { BUSYBOX_IMAGE_REF, PAUSE_IMAGE_REF } from "../../sdk/testing/image.ts";
import { criContainerConfig, criPodConfig } from "../../sdk/testing/cri_container.ts";
import { parse as parseToml } from "smol-toml";
import {
  ContainerState,
  type ContainerStatus,
  NamespaceMode,
} from "../../proto/gen/runtime/v1/api_pb.ts";
import { upgradeShim } from "../../sdk/shim/boot/upgrade.ts";
import { socketPath } from "../../sdk/shim/contract/socket_address.ts";

/** Deadline of each CRI call: generous, only there so that a hang fails instead of wedging. */
const CALL_MS = 60_000;
/** Bound for things that must happen eventually (never a timing assertion). */
const EVENTUALLY_MS = 60_000;

const dec = new TextDecoder();

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Runs one CRI call with a deadline; a failure names the call and the handler. */
async function call<T>(what: string, f: (opts: { timeoutMs: number }) => Promise<T>): Promise<T> {
  try {
    return await f({ timeoutMs: CALL_MS });
  } catch (e) {
    throw new Error(`CRI ${what} failed: ${(e as Error).message}`);
  }
}

/** Polls `probe` until it returns a value other than undefined; fails after a long bound. */
async function eventually<V>(
  what: string,
  probe: () => Promise<V | undefined>,
  last: () => string = () => "",
): Promise<V> {
  const until = Date.now() + EVENTUALLY_MS;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > until) throw new Error(`gave up waiting for ${what}${last()}`);
    await sleep(100);
  }
}

/** Where the skiff handlers keep their state and option files. */
interface HandlerPaths {
  /** runc's state root (`--root` is `<runcRoot>/<namespace>`). */
  runcRoot: string;
  /** runsc's state root. */
  runscRoot: string;
  /** Where 1.6's `ConfigPath` option files live. */
  configDir: string;
}

/** The paths docs/containerd-config.md shows (skiff's defaults, /etc/containerd). */
const DOC_PATHS: HandlerPaths = {
  runcRoot: "/run/containerd/runc",
  runscRoot: "/run/containerd/runsc",
  configDir: "/etc/containerd",
};

/** A private containerd's paths for the same handlers. */
function privatePaths(c: PrivateContainerd): HandlerPaths {
  return { runcRoot: c.runcRoot, runscRoot: `${c.dir}/runsc`, configDir: c.dir };
}

/** The option files 1.6's handlers point at: file name → TOML. */
function optionFiles(paths: HandlerPaths): Record<string, string> {
  return {
    "skiff-runc.toml": `Root = "${paths.runcRoot}"\n`,
    "skiff-runsc.toml": `root = "${paths.runscRoot}"\n`,
  };
}

/**
 * The skiff handlers, as documented and as tested. 1.6's CRI sends a runtime other than
 * `io.containerd.runc.v2` only `TypeUrl`/`ConfigPath`; 1.7+ also the whole options table as a
 * TOML body: the file on 1.6, the inline table after.
 */
function skiffHandlers(version: string, paths: HandlerPaths): Record<string, CriHandler> {
  const old = version.startsWith("1.6.");
  return {
    "skiff-runc": {
      runtimeType: "io.containerd.skiff-runc.v2",
      options: old ? { ConfigPath: `${paths.configDir}/skiff-runc.toml` } : {
        Root: paths.runcRoot,
      },
    },
    "skiff-runsc": {
      runtimeType: "io.containerd.skiff-runsc.v2",
      options: old ? { ConfigPath: `${paths.configDir}/skiff-runsc.toml` } : {
        root: paths.runscRoot,
      },
    },
  };
}

/** The handlers under test: the Go shim (`runc`, the reference) first, then skiff's. */
function handlers(version: string): Record<string, RuntimeConfig> {
  const out: Record<string, RuntimeConfig> = {
    // The Go shim reads runc's own keys: keep its runc state in the instance's private root.
    "runc": {
      runtimeType: "io.containerd.runc.v2",
      options: (p: PrivateContainerd) => ({ Root: p.runcRoot }),
    },
  };
  for (const [name, h] of Object.entries(skiffHandlers(version, DOC_PATHS))) {
    out[name] = {
      runtimeType: h.runtimeType,
      options: (p: PrivateContainerd) => skiffHandlers(version, privatePaths(p))[name]!.options!,
    };
  }
  return out;
}

/** Writes the ConfigPath files 1.6's handlers point at (harmless on other versions). */
async function writeOptionFiles(c: PrivateContainerd): Promise<void> {
  for (const [name, text] of Object.entries(optionFiles(privatePaths(c)))) {
    await Deno.writeTextFile(`${c.dir}/${name}`, text);
  }
}

/** CRI log lines (`<time> <stream> <P|F> <text>`) of a file, as [stream, text]. */
async function criLogLines(path: string): Promise<[string, string][]> {
  const text = await Deno.readTextFile(path).catch(() => "");
  const out: [string, string][] = [];
  for (const line of text.split("\n")) {
    if (line === "") continue;
    const m = line.match(/^(\S+) (stdout|stderr) ([PF]) (.*)$/);
    assert.ok(m, `not a CRI log line in ${path}: ${JSON.stringify(line)}`);
    assert.ok(!Number.isNaN(Date.parse(m[1]!)), `bad timestamp in ${JSON.stringify(line)}`);
    out.push([m[2]!, m[4]!]);
  }
  return out;
}

function describeStatus(s: ContainerStatus | undefined): string {
  if (!s) return "no status";
  return `state ${ContainerState[s.state]}, exit code ${s.exitCode}, reason "${s.reason}", ` +
    `message "${s.message}"`;
}

/** Waits until the container is CONTAINER_EXITED and returns its status. */
async function exited(cri: CriClient, id: string, what: string): Promise<ContainerStatus> {
  let last: ContainerStatus | undefined;
  return await eventually(
    `${what} to be CONTAINER_EXITED`,
    async () => {
      last = (await call(
        `ContainerStatus(${what})`,
        (o) => cri.runtime.containerStatus({ containerId: id }, o),
      )).status;
      return last?.state === ContainerState.CONTAINER_EXITED ? last : undefined;
    },
    () => ` (last: ${describeStatus(last)})`,
  );
}

/** Shims of this containerd serving one of `ids` (CRI groups a pod's containers by pod id). */
function shimsOf(c: PrivateContainerd, ids: string[]): { pid: number; argv: string[] }[] {
  return c.shims().filter((s) => ids.some((id) => s.argv.includes(id)));
}

/** One pod's whole life through CRI, with `handler`. */
async function podScenario(
  c: PrivateContainerd,
  cri: CriClient,
  handler: string,
): Promise<void> {
  const config = criPodConfig(c, `pod-${handler}`, { labels: { "skiff.test/handler": handler } });
  await Deno.mkdir(config.logDirectory, { recursive: true });
  const ids: string[] = [];
  let podId = "";
  try {
    podId = (await call(`RunPodSandbox(${handler})`, (o) =>
      cri.runtime.runPodSandbox({ config, runtimeHandler: handler }, o))).podSandboxId;
    ids.push(podId);
    const pod = await call("PodSandboxStatus", (o) =>
      cri.runtime.podSandboxStatus({ podSandboxId: podId }, o));
    assert.equal(pod.status?.runtimeHandler, handler, "the pod records its runtime handler");
    assert.equal(
      pod.status?.linux?.namespaces?.options?.network,
      NamespaceMode.NODE,
      "host network",
    );

    const create = async (name: string, script: string): Promise<string> => {
      const id = (await call(`CreateContainer(${name})`, (o) =>
        cri.runtime.createContainer({
          podSandboxId: podId,
          config: criContainerConfig(name, ["sh", "-c", script]),
          sandboxConfig: config,
        }, o))).containerId;
      ids.push(id);
      await call(`StartContainer(${name})`, (o) =>
        cri.runtime.startContainer({ containerId: id }, o));
      return id;
    };

    // A long-running container: ExecSync and its CRI log.
    const svc = await create(
      "svc",
      "echo hello-from-svc; echo warn-from-svc >&2; exec sleep 600",
    );
    const ex = await call("ExecSync", (o) =>
      cri.runtime.execSync({
        containerId: svc,
        cmd: ["sh", "-c", "echo exec-out; echo exec-err >&2; exit 3"],
        timeout: 30n,
      }, o));
    assert.equal(ex.exitCode, 3, "ExecSync's exit code");
    assert.equal(dec.decode(ex.stdout), "exec-out\n", "ExecSync's stdout");
    assert.equal(dec.decode(ex.stderr), "exec-err\n", "ExecSync's stderr");
    const ok = await call("ExecSync(true)", (o) =>
      cri.runtime.execSync({ containerId: svc, cmd: ["true"], timeout: 30n }, o));
    assert.equal(ok.exitCode, 0);
    if (handler.startsWith("skiff-")) {
      // The pod's shim (pod sandbox and containers: one group) re-executed in place twice: the
      // rest of the pod's life (new containers, exits, stop) runs on the upgraded code.
      // `start` ran for the pod's sandbox: its bundle has the server's address and pid (2.x
      // reaches the pod's containers through the sandbox's endpoint, without a `start`).
      const bundle = `${c.state}/io.containerd.runtime.v2.task/k8s.io/${podId}`;
      const socket = socketPath(Deno.readTextFileSync(`${bundle}/address`).trim());
      const pid = Number(Deno.readTextFileSync(`${bundle}/shim.pid`).trim());
      for (let i = 0; i < 2; i++) {
        const r = await upgradeShim(socket, { token: crypto.randomUUID(), force: true });
        assert.equal(r.upgraded, true, JSON.stringify(r));
        assert.equal(r.pid, pid, "the pod's shim process is the same");
        assert.ok(r.containers >= 2, `the pod sandbox and svc carried: ${JSON.stringify(r)}`);
      }
      const after = await call("ExecSync after the upgrades", (o) =>
        cri.runtime.execSync({ containerId: svc, cmd: ["sh", "-c", "exit 6"], timeout: 30n }, o));
      assert.equal(after.exitCode, 6);
    }

    const svcStatus = (await call("ContainerStatus(svc)", (o) =>
      cri.runtime.containerStatus({ containerId: svc }, o))).status;
    assert.equal(svcStatus?.state, ContainerState.CONTAINER_RUNNING, describeStatus(svcStatus));
    const logPath = svcStatus!.logPath;
    assert.equal(logPath, `${config.logDirectory}/svc/0.log`);
    const lines = await eventually(
      `both lines in ${logPath}`,
      async () => {
        const l = await criLogLines(logPath);
        return l.length >= 2 ? l : undefined;
      },
      () =>
        `: ${Deno.readTextFileSync(logPath)}`,
    );
    assert.deepEqual(
      lines.sort(),
      [["stderr", "warn-from-svc"], ["stdout", "hello-from-svc"]],
      `CRI log lines of ${logPath}`,
    );

    // A container that exits on its own with 7.
    const seven = await create("seven", "echo bye; exit 7");
    const s7 = await exited(cri, seven, "container exiting 7");
    assert.equal(s7.exitCode, 7, describeStatus(s7));
    assert.ok(s7.finishedAt > 0n, "finished_at is set");
    assert.deepEqual(await criLogLines(s7.logPath), [["stdout", "bye"]]);

    // StopContainer sends SIGTERM first: the trap writes to the log and exits 43 (a SIGKILL
    // after the grace period would be 137). The trap is set before /ready is written.
    const term = await create(
      "term",
      "trap 'echo got-term; exit 43' TERM; echo ready; echo ready >/ready; " +
        "while :; do sleep 1 & wait $!; done",
    );
    const termLog = `${config.logDirectory}/term/0.log`;
    await eventually("the TERM-trapping container to be ready", async () => {
      const r = await call("ExecSync(cat /ready)", (o) =>
        cri.runtime.execSync({ containerId: term, cmd: ["cat", "/ready"], timeout: 30n }, o));
      return r.exitCode === 0 ? true : undefined;
    });
    await call("StopContainer(term)", (o) =>
      cri.runtime.stopContainer({ containerId: term, timeout: 30n }, o));
    const st = await exited(cri, term, "container stopped with SIGTERM");
    assert.equal(st.exitCode, 43, `the TERM trap's exit code: ${describeStatus(st)}`);
    assert.deepEqual(await criLogLines(termLog), [["stdout", "ready"], ["stdout", "got-term"]]);

    // Stop and remove everything, as kubelet does when the pod is deleted.
    await call("StopContainer(svc)", (o) =>
      cri.runtime.stopContainer({ containerId: svc, timeout: 0n }, o));
    const sv = await exited(cri, svc, "svc after StopContainer");
    assert.equal(sv.exitCode, 137, `sleep ignores nothing: SIGKILL: ${describeStatus(sv)}`);
    for (const id of [svc, seven, term]) {
      await call(`RemoveContainer(${id})`, (o) =>
        cri.runtime.removeContainer({ containerId: id }, o));
    }
    await call("StopPodSandbox", (o) =>
      cri.runtime.stopPodSandbox({ podSandboxId: podId }, o));
    await call("RemovePodSandbox", (o) =>
      cri.runtime.removePodSandbox({ podSandboxId: podId }, o));
    const left = await call("ListContainers", (o) =>
      cri.runtime.listContainers({ filter: { podSandboxId: podId } }, o));
    assert.deepEqual(
      left.containers.map((x) =>
        x.id
      ),
      [],
      "containers left in the pod",
    );
    const pods = await call("ListPodSandbox", (o) =>
      cri.runtime.listPodSandbox({ filter: { id: podId } }, o));
    assert.deepEqual(
      pods.items.map((x) =>
        x.id
      ),
      [],
      "pod left",
    );

    // Nothing left behind: the pod's shim exits and its mounts are gone.
    await eventually(
      "the pod's shim to exit",
      () =>
        Promise.resolve(shimsOf(c, ids).length === 0 ? true : undefined),
      () =>
        `: ${JSON.stringify(shimsOf(c, ids))}`,
    );
    const mounts = (await c.mounts()).filter((m) =>
      ids.some((id) =>
        m.includes(id)
      )
    );
    assert.deepEqual(mounts, [], "mounts of the pod left under containerd's dirs");
    podId = "";
  } finally {
    // After a failure: best effort, bounded, so the next handler starts clean; stop() of the
    // containerd kills whatever still hangs.
    if (podId) {
      const quick = { timeoutMs: 15_000 };
      await cri.runtime.stopPodSandbox({ podSandboxId: podId }, quick).catch(() => {});
      await cri.runtime.removePodSandbox({ podSandboxId: podId }, quick).catch(() => {});
    }
  }
}

/** Logs each handler's features from `Status` (2.x reports them); asserts only their names. */
async function handlerFeatures(
  c: PrivateContainerd,
  cri: CriClient,
  names: string[],
): Promise<void> {
  const s = await call("Status", (o) => cri.runtime.status({ verbose: false }, o));
  const ready = s.status?.conditions.find((x) => x.type === "RuntimeReady");
  assert.equal(ready?.status, true, `RuntimeReady: ${JSON.stringify(s.status?.conditions)}`);
  if (c.major < 2) {
    assert.deepEqual(s.runtimeHandlers, [], `containerd ${c.version} reports no handlers`);
    return;
  }
  const reported = new Map(s.runtimeHandlers.map((h) => [h.name, h.features]));
  for (const n of names) {
    assert.ok(reported.has(n), `Status lists handler "${n}": ${[...reported.keys()]}`);
    const f = reported.get(n);
    // Informational: 2.1's CRI introspects (`-info`) only runtime_type io.containerd.runc.v2,
    // and the answer depends on the host's runc and kernel.
    console.log(
      `containerd ${c.version} handler ${n}: recursive_read_only_mounts=${f?.recursiveReadOnlyMounts}` +
        ` user_namespaces=${f?.userNamespaces}`,
    );
  }
}

for (const v of containerdVersions().filter((v) => /^(1\.6|1\.7|2\.4)\./.test(v.version))) {
  integrationTest(
    `CRI on containerd ${v.version}: a host-network pod's life on the Go runc shim and on skiff`,
    { root: true, binaries: ["runc", "runsc", "busybox", "mount", "umount"] },
    async (t) => {
      const prefix = await Deno.makeTempDir({ prefix: "skiff-cri-" });
      let c: PrivateContainerd | undefined;
      try {
        await installExampleShims({ prefix });
        c = await startContainerd({
          binDir: v.binDir,
          extraPath: [`${prefix}/bin`],
          runtimes: handlers(v.version),
          cri: { defaultHandler: "runc" },
        });
        await writeOptionFiles(c);
        // CRI is on, and everything it keeps stays in the instance's dir.
        const cfg = JSON.parse(JSON.stringify(parseToml(await Deno.readTextFile(c.configPath))));
        assert.ok(!cfg.disabled_plugins.includes("io.containerd.grpc.v1.cri"), "CRI enabled");
        assert.equal(
          cfg.plugins[criRuntimePlugin(v.version)].cni.conf_dir,
          `${c.dir}/cni/net.d`,
          "CNI's conf dir is private",
        );
        const cri = criClient(c.address);
        const version = await call("Version", (o) => cri.runtime.version({ version: "v1" }, o));
        assert.equal(version.runtimeName, "containerd");
        assert.equal(version.runtimeApiVersion, "v1");
        // The pause image was imported, never pulled; pinned where CRI pins it (1.7+).
        const images = await call("ListImages", (o) => cri.images.listImages({}, o));
        assert.ok(
          images.images.some((i) => i.repoTags.includes(PAUSE_IMAGE_REF)),
          `pause image listed: ${JSON.stringify(images.images.map((i) => i.repoTags))}`,
        );
        await c.importBusyboxImage(CRI_NAMESPACE);
        await eventually("CRI to list the busybox image", async () => {
          const s = await call(
            "ImageStatus",
            (o) => cri.images.imageStatus({ image: { image: BUSYBOX_IMAGE_REF } }, o),
          );
          return s.image ? true : undefined;
        });

        await t.step("Status: RuntimeReady, handlers and their features", async () => {
          await handlerFeatures(c!, cri, Object.keys(handlers(v.version)));
        });
        for (const handler of Object.keys(handlers(v.version))) {
          await t.step(
            `handler ${handler}: pod, ExecSync, logs, exit 7, SIGTERM, cleanup`,
            () => podScenario(c!, cri, handler),
          );
        }
      } finally {
        if (c) {
          const shims = c.shims();
          await c.stop();
          if (shims.length > 0) {
            console.warn(`containerd ${v.version}: stop() killed shims ${JSON.stringify(shims)}`);
          }
        }
        await Deno.remove(prefix, { recursive: true }).catch(() => {});
      }
    },
  );
}

/** The body of the fenced block in `doc` whose text starts with `first`. */
function docBlock(doc: string, lang: string, first: string): string {
  for (const m of doc.matchAll(new RegExp("```" + lang + "\\n([\\s\\S]*?)```", "g"))) {
    if (m[1]!.startsWith(first)) return m[1]!;
  }
  throw new Error(`docs/containerd-config.md has no ${lang} block starting with "${first}"`);
}

Deno.test("docs/containerd-config.md: the Kubernetes section shows the CRI tests' config", async () => {
  const doc = await Deno.readTextFile(new URL("../../docs/containerd-config.md", import.meta.url));
  const kube = doc.slice(doc.indexOf("## Kubernetes (CRI)"));
  assert.ok(kube.length < doc.length, "the doc has a Kubernetes (CRI) section");
  // One block per config dialect; each must be exactly what criPlugins builds for the test's
  // skiff handlers with the documented paths.
  for (const [label, version] of [["1.6", "1.6.20"], ["1.7", "1.7.24"], ["2.x", "2.1.9"]]) {
    const text = docBlock(kube, "toml", `# containerd ${label}\n`);
    const expected = {
      version: version.startsWith("2.") ? 3 : 2,
      plugins: criPlugins(version, {
        sandboxImage: PAUSE_IMAGE_REF,
        handlers: skiffHandlers(version, DOC_PATHS),
      }),
    };
    // smol-toml builds null-prototype objects; compare plain data.
    const parsed = JSON.parse(JSON.stringify(parseToml(text)));
    assert.deepEqual(parsed, expected, `the containerd ${label} snippet`);
  }
  for (const [name, text] of Object.entries(optionFiles(DOC_PATHS))) {
    assert.ok(kube.includes(`\`/etc/containerd/${name}\`:\n\n\`\`\`toml\n${text}\`\`\``), name);
  }
  const rc = parseYamlish(docBlock(kube, "yaml", "apiVersion: node.k8s.io/v1\n"));
  assert.deepEqual(rc, {
    apiVersion: "node.k8s.io/v1",
    kind: "RuntimeClass",
    name: "skiff-runc",
    handler: "skiff-runc",
  });
  assert.ok(Object.keys(skiffHandlers("2.1.9", DOC_PATHS)).includes(rc.handler!));
});

/** The scalar `key: value` lines of a small YAML document (nesting flattened). */
function parseYamlish(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const m of text.matchAll(/^\s*([A-Za-z]+): (\S+)$/gm)) out[m[1]!] = m[2]!;
  return out;
}
