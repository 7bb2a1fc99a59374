/**
 * `deno task example`: the runc example shim driven end to end by skiff's testing harness,
 * which plays containerd. It builds a busybox bundle, runs the shim's `start`, creates and
 * starts a container, runs an exec in it, waits for both, deletes, shuts down, and prints the
 * container's output and the events the shim published.
 */
import { installShims } from "@skiff/shim/install";
import { createBusyboxBundle, findBusybox, ShimHarness } from "@skiff/shim/testing";

/** `key=value` pairs of an event, without protobuf bookkeeping. */
function summary(message: unknown): string {
  return Object.entries(message as Record<string, unknown>)
    .filter(([k, v]) => !k.startsWith("$") && v !== "" && typeof v !== "object")
    .map(([k, v]) => `${k}=${v}`)
    .join(" ");
}

function which(bin: string): string | undefined {
  for (const dir of (Deno.env.get("PATH") ?? "").split(":")) {
    try {
      if (Deno.statSync(`${dir}/${bin}`).isFile) return `${dir}/${bin}`;
    } catch { /* next */ }
  }
  return undefined;
}

const missing = [
  ...(Deno.uid() === 0 ? [] : ["root (runc needs uid 0: run as root)"]),
  ...(which("runc") ? [] : ["runc (apt-get install runc)"]),
  ...(findBusybox() ? [] : ["a static busybox (apt-get install busybox-static)"]),
];
if (missing.length > 0) {
  console.error(`deno task example needs: ${missing.join("; ")}`);
  Deno.exit(1);
}

const prefix = await Deno.makeTempDir({ prefix: "skiff-demo-" });
const [runcShim] = await installShims({
  prefix,
  root: new URL("..", import.meta.url).pathname,
  shims: { "containerd-shim-skiff-runc-v2": "examples/runc/main.ts" },
});
const { bundle, cleanup } = await createBusyboxBundle({
  args: ["sh", "-c", "echo hello from a skiff-managed container; sleep 1; exit 3"],
});
const out = `${bundle}/stdout.log`;
const h = await ShimHarness.start({ shim: runcShim, bundle, id: "demo" });
try {
  console.log(`shim started: ${h.address} (task API v${h.version})`);
  const { pid } = await h.task.create({
    id: h.id,
    bundle,
    stdout: `file://${out}`,
    stderr: `file://${out}`,
  });
  console.log(`created container "${h.id}", init pid ${pid}`);
  await h.task.start({ id: h.id });
  await h.task.exec({
    id: h.id,
    execId: "greet",
    stdout: out,
    stderr: out,
    spec: {
      typeUrl: "types.containerd.io/opencontainers/runtime-spec/1/Process",
      value: new TextEncoder().encode(JSON.stringify({
        args: ["sh", "-c", "echo hello from an exec; exit 7"],
        cwd: "/",
        env: ["PATH=/bin:/usr/bin:/sbin:/usr/sbin"],
        user: { uid: 0, gid: 0 },
      })),
    },
  });
  await h.task.start({ id: h.id, execId: "greet" });
  const exec = await h.task.wait({ id: h.id, execId: "greet" });
  await h.task.delete({ id: h.id, execId: "greet" });
  const init = await h.task.wait({ id: h.id });
  await h.task.delete({ id: h.id });
  await h.waitForEvent("/tasks/delete");
  console.log(`exec exit status ${exec.exitStatus}, container exit status ${init.exitStatus}`);
  console.log("--- container output ---");
  console.log((await Deno.readTextFile(out)).trimEnd());
  console.log("--- events ---");
  for (const e of h.events) console.log(`${e.topic.padEnd(20)} ${summary(e.message)}`);
} finally {
  await h.close();
  await cleanup();
  await Deno.remove(prefix, { recursive: true });
}
