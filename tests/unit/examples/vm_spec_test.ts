// The VM example's spec rewrite (examples/vm/spec.ts) for the namespaces CRI names: on the
// podsandbox path `/proc/<pause pid>/ns/*` are guest pids and stay; on the `shim` sandboxer's
// path the pod's pid is the VM's (QEMU's), so those entries go and runc keeps the guest's own
// namespace; a host file (a netns bind) becomes a new namespace.
import assert from "node:assert/strict";
import { guestSpec } from "../../../examples/vm/spec.ts";

const namespaces = (vmPid?: number) =>
  guestSpec(
    {
      root: { path: "rootfs" },
      linux: {
        namespaces: [
          { type: "pid" },
          { type: "ipc", path: "/proc/4242/ns/ipc" },
          { type: "uts", path: "/proc/4242/ns/uts" },
          { type: "pid", path: "/proc/17/ns/pid" },
          { type: "network", path: "/var/run/netns/cni-1" },
        ],
      },
    },
    "c1",
    "/run/bundle",
    "/skiff/c1",
    vmPid,
  ).spec.linux?.namespaces;

Deno.test("guestSpec: namespaces named by the VM's pid are the guest's own", () => {
  assert.deepEqual(namespaces(4242), [
    { type: "pid" },
    { type: "pid", path: "/proc/17/ns/pid" },
    { type: "network" },
  ]);
});

Deno.test("guestSpec: without a VM pid (podsandbox), guest pids' namespaces stay", () => {
  assert.deepEqual(namespaces(), [
    { type: "pid" },
    { type: "ipc", path: "/proc/4242/ns/ipc" },
    { type: "uts", path: "/proc/4242/ns/uts" },
    { type: "pid", path: "/proc/17/ns/pid" },
    { type: "network" },
  ]);
});
