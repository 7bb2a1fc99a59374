/**
 * `deno task guest -- COMMAND [ARG...]`: runs one command of the checkout inside the cgroup v2
 * test guest ({@linkcode runInGuest}), streaming its output, and exits with its status (124
 * when the time bound killed the guest, 2 on bad usage or a missing guest image).
 *
 * ```sh
 * deno task guest -- cat /sys/fs/cgroup/cgroup.controllers
 * deno task guest --timeout 1800 -- deno task conformance --runtime io.containerd.runc.v2
 * ```
 *
 * @module
 */

import { parseArgs } from "node:util";
import { guestUnavailable, runInGuest } from "./guest.ts";

const USAGE =
  `usage: deno task guest [--timeout SECONDS] [--memory MIB] [--cpus N] [--init systemd] -- COMMAND [ARG...]

Boots the cgroup v2 test guest (QEMU, TCG; tests/setup/guest.sh prepares it), runs COMMAND as
root in the current directory there (the host's root is seen read-only, with a throw-away
overlay on top) and exits with its status. Files the command writes to $SKIFF_GUEST_OUT
are copied to --out DIR.

options:
  --timeout SECONDS  bound on the whole run, boot included (default 1800)
  --memory MIB       guest memory (default 3072)
  --cpus N           virtual CPUs (default 1)
  --out DIR          copy the files the command wrote to $SKIFF_GUEST_OUT here
  --init shell|systemd  the guest's PID 1: a shell script (default) or the host's systemd,
                     running COMMAND as a unit (for runc's --systemd-cgroup)
  --help             this text
`;

/**
 * Parses the command line and runs the command in the guest.
 *
 * @param args command-line arguments
 * @returns the exit status
 *
 * @example Usage
 * ```ts ignore
 * Deno.exit(await main(["--", "uname", "-r"]));
 * ```
 */
export async function main(args: string[]): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      args,
      allowPositionals: true,
      options: {
        timeout: { type: "string" },
        memory: { type: "string" },
        cpus: { type: "string" },
        out: { type: "string" },
        init: { type: "string" },
        help: { type: "boolean", short: "h" },
      },
    });
  } catch (e) {
    console.error(`${(e as Error).message}\n\n${USAGE}`);
    return 2;
  }
  const v = parsed.values;
  if (v.help) {
    console.log(USAGE);
    return 0;
  }
  if (parsed.positionals.length === 0) {
    console.error(`no command given\n\n${USAGE}`);
    return 2;
  }
  if (v.init !== undefined && v.init !== "shell" && v.init !== "systemd") {
    console.error(`--init must be shell or systemd, not "${v.init}"\n\n${USAGE}`);
    return 2;
  }
  const why = guestUnavailable();
  if (why) {
    console.error(`guest: cannot run here: needs ${why}`);
    return 2;
  }
  const encoder = new TextEncoder();
  const r = await runInGuest({
    command: parsed.positionals,
    timeoutMs: Number(v.timeout ?? 1800) * 1000,
    ...(v.memory ? { memoryMiB: Number(v.memory) } : {}),
    ...(v.cpus ? { cpus: Number(v.cpus) } : {}),
    ...(v.init ? { init: v.init as "shell" | "systemd" } : {}),
    onOutput: (text) => Deno.stdout.writeSync(encoder.encode(text)),
  });
  if (v.out) {
    await Deno.mkdir(v.out, { recursive: true });
    for (const [name, text] of Object.entries(r.files)) {
      await Deno.writeTextFile(`${v.out}/${name}`, text);
    }
  }
  console.error(`guest: exit ${r.code} after ${r.seconds.toFixed(1)} s`);
  if (r.timedOut) {
    console.error(`guest: killed after the ${v.timeout ?? 1800} s bound`);
    return 124;
  }
  if (r.wedged) {
    console.error(`guest: killed, its kernel wedged: ${r.wedged}`);
    return 1;
  }
  if (r.code < 0) {
    console.error(`guest: ended without an exit status; its console:\n${r.console}`);
    return 1;
  }
  return r.code;
}

if (import.meta.main) Deno.exit(await main(Deno.args));
