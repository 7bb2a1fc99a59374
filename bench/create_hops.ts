/**
 * How far a Create travels: the call stack at the moment the runtime's `create` command is
 * spawned, in a real server (the runc example over a real ttrpc socket; a fake runc script that
 * fails, since only the path matters), with the folders it crosses counted. Run as root:
 * `deno run -A bench/create_hops.ts`.
 *
 * @module
 */
import { relative } from "node:path";
import { fileURLToPath as fromFileUrl } from "node:url";
import { TtrpcServer } from "../sdk/ttrpc/server.ts";
import { Reaper } from "../sdk/linux/reaper.ts";
import { linuxPlatform } from "../sdk/shim/server/linux_platform.ts";
import { registerServices } from "../sdk/shim/server/services.ts";
import { EventPublisher } from "../sdk/shim/server/events.ts";
import { Logger } from "../sdk/shim/logger.ts";
import { RuncShim } from "../examples/runc/main.ts";
import { TtrpcWireClient } from "../sdk/ttrpc/wire_client.ts";
import { shimCodec } from "../proto/shim_wire.ts";

Error.stackTraceLimit = 200;
const root = fromFileUrl(new URL("../", import.meta.url));
const dir = await Deno.makeTempDir({ prefix: "skiff-hops-" });
const bundle = `${dir}/bundle`;
await Deno.mkdir(`${bundle}/rootfs`, { recursive: true });
await Deno.writeTextFile(`${bundle}/config.json`, JSON.stringify({ process: { args: ["true"] } }));
const fakeRunc = `${dir}/runc`;
await Deno.writeTextFile(fakeRunc, "#!/bin/sh\nexit 1\n");
await Deno.chmod(fakeRunc, 0o755);
await Deno.writeTextFile(`${bundle}/options.json`, JSON.stringify({ binaryName: fakeRunc }));

const reaper = Reaper.start();
const base = linuxPlatform(reaper);
let stack: string | undefined;
const platform = {
  ...base,
  spawn(cmd: Deno.Command) {
    stack ??= new Error("spawn").stack;
    return base.spawn(cmd);
  },
};
const logger = new Logger();
const server = new TtrpcServer({});
const socket = `${dir}/s.sock`;
const flags = { namespace: "default", id: "c1", address: `${dir}/containerd.sock` } as never;
registerServices(server, {
  shim: new RuncShim(),
  flags,
  logger,
  bundle,
  endpoint: { address: `unix://${socket}`, version: 3, protocol: "ttrpc" } as never,
  socket,
  platform,
  events: new EventPublisher({ address: `${dir}/none`, namespace: "default", logger }),
  shutdown: () => {},
});
await server.listen(socket);
const client = new TtrpcWireClient({ path: socket });
await client.call(
  "containerd.task.v2.Task",
  "Create",
  shimCodec("containerd.task.v2.CreateTaskRequest"),
  shimCodec("containerd.task.v2.CreateTaskResponse"),
  {
    id: "c1",
    bundle,
  },
).catch((e) => console.error(`Create: ${e.message}`));
await client.close();
await server.close();
reaper.close();
await Deno.remove(dir, { recursive: true });

const frames = (stack ?? "").split("\n").slice(1).map((l) =>
  l.match(/\((file:\/\/[^)]+?):\d+:\d+\)|at (?:async )?(file:\/\/\S+?):\d+:\d+/)
)
  .filter((m): m is RegExpMatchArray => m !== null)
  .map((m) => relative(root, fromFileUrl(m[1] ?? m[2])));
// Innermost first: reverse to read from the socket down to the spawn.
const path = frames.reverse();
let crossings = 0;
const rows: string[] = [];
for (let i = 0; i < path.length; i++) {
  const folder = path[i].slice(0, path[i].lastIndexOf("/"));
  const prev = i > 0 ? path[i - 1].slice(0, path[i - 1].lastIndexOf("/")) : folder;
  if (folder !== prev) crossings++;
  rows.push(`${folder === prev ? "  " : "->"} ${path[i]}`);
}
console.log(rows.join("\n"));
console.log(`\n${path.length} frames, ${new Set(path).size} files, ${crossings} folder crossings`);
