/**
 * skiff-vm-agent: the guest side of the VM runtime (examples/vm). It serves
 * `skiff.agent.v1.Agent` over ttrpc and runs the pod's containers in the guest with runc.
 *
 * In the guest it is PID 1 (the initramfs's init ends in it) and serves on the virtio-serial
 * port named `skiff.agent`, which the init opened as its stdin and stdout; so nothing may be
 * written to stdout but ttrpc frames: messages go to stderr (the console). Elsewhere (tests on
 * the host) `--listen PATH` serves on a unix socket instead.
 *
 * usage: agent [--listen PATH] [--state DIR] [--runc PATH]
 *
 * It is bundled into one file (`deno bundle`, see examples/vm/image.ts) so that its start under
 * TCG costs one module load.
 *
 * @module
 */

import { TtrpcServer } from "@skiff/shim/ttrpc";
import { Reaper } from "@skiff/shim/linux";
import { Agent } from "../proto/agent_pb.ts";
import { createServiceImplSpec } from "@connectrpc/connect";
import { Containers } from "./containers.ts";
import { ExitTable } from "./exits.ts";
import { LongPolls } from "./long_polls.ts";
import { servePort } from "./port.ts";
import { agentService, OomQueue } from "./service.ts";

/** The agent's command line. */
interface Flags {
  listen?: string;
  state: string;
  runc: string;
}

function parseFlags(args: string[]): Flags {
  const flags: Flags = { state: "/run/skiff-agent", runc: "runc" };
  for (let i = 0; i < args.length; i++) {
    const value = args[i + 1];
    if (value === undefined) throw new Error(`skiff-agent: ${args[i]} needs a value`);
    if (args[i] === "--listen") flags.listen = value;
    else if (args[i] === "--state") flags.state = value;
    else if (args[i] === "--runc") flags.runc = value;
    else throw new Error(`skiff-agent: unknown flag ${args[i]}`);
    i++;
  }
  return flags;
}

/** Powers the guest off: PID 1 must not just exit (the kernel would panic). */
async function powerOff(): Promise<void> {
  await new Deno.Command("/bin/busybox", { args: ["sync"] }).output().catch(() => {});
  await new Deno.Command("/bin/busybox", { args: ["poweroff", "-f"] }).output().catch(() => {});
}

async function main(): Promise<void> {
  // stdout is the port in the guest: a stray console.log must not corrupt the ttrpc stream.
  console.log = console.error;
  const flags = parseFlags(Deno.args);
  await Deno.mkdir(`${flags.state}/runc`, { recursive: true });
  const reaper = Reaper.start();
  const exits = new ExitTable(reaper);
  const oomEvents = new OomQueue();
  const containers = new Containers(reaper, exits, {
    stateDir: flags.state,
    runc: flags.runc,
    onOom: (id) => oomEvents.push(id),
  });
  const server = new TtrpcServer({
    onError: (e) => console.error(`skiff-agent: ${e instanceof Error ? e.message : e}`),
    // The host may connect long after the guest booted, and stay idle between calls.
    frameTimeoutMs: 60_000,
  });
  const stop = new AbortController();
  const shutdown = () => {
    stop.abort();
    if (flags.listen) {
      void server.close({ timeoutMs: 1000 }).then(() => {
        reaper.close();
        Deno.exit(0);
      });
    } else {
      void powerOff();
    }
  };
  server.register(
    createServiceImplSpec<typeof Agent>(
      Agent,
      agentService(containers, { shutdown, oomEvents, longPolls: new LongPolls() }),
    ),
  );
  const uptime = Deno.readTextFileSync("/proc/uptime").split(" ")[0];
  if (flags.listen) {
    await server.listen(flags.listen);
    console.error(`skiff-agent: serving on ${flags.listen} (guest uptime ${uptime} s)`);
    return;
  }
  console.error(`skiff-agent: serving on the virtio-serial port (guest uptime ${uptime} s)`);
  const port = {
    read: (p: Uint8Array) => Deno.stdin.read(p),
    write: (p: Uint8Array) => Deno.stdout.write(p),
  };
  await servePort(server, port, stop.signal, (event) => {
    console.error(`skiff-agent: host ${event}`);
  });
}

if (import.meta.main) await main();
