/**
 * OCI runtime adapters: {@link OciRuntimeCli} drives runc-compatible command lines (runc,
 * runsc, crun) the way the runc shim does.
 *
 * ## Observed runtime differences (Debian runc 1.1.5, runsc release 20221219, crun 1.8.1)
 *
 * The adapter does not branch on the binary name; it tolerates the following instead, and the
 * runsc-specific global flags come in through `globalArgs`:
 *
 * - runsc refuses to start a container outside a network namespace it manages unless given
 *   `--network=none` or `--network=host`: `create` succeeds, then `start` fails with "cannot
 *   run with network enabled in root network namespace". The default `runc spec` config.json
 *   needs no other change for runsc. `--platform=ptrace` is that release's default and works
 *   on a VM; `--platform=kvm` hung in `create` with the sandbox spinning a CPU (nested KVM).
 *   `--debug --debug-log=<dir>/` writes per-command debug files there; `--log` keeps errors.
 * - runsc writes its `--log-format json` entries without a newline between them, with `msg`
 *   before `level`; the log parser (runtime_log.ts) scans concatenated JSON objects rather than
 *   lines. It also reads text-format `level=error msg="..."` lines.
 * - runsc exits 128 on failure (runc and crun exit 1).
 * - runsc `state` has no `rootfs`, `created` or `owner` fields; only id, pid, status, bundle.
 * - runsc `ps --format json` lists sandbox-internal pids (the init is `[1]`), not host pids.
 * - runsc `kill` of a container whose sandbox has exited fails with "connecting to control
 *   server at PID <n>: connection refused"; `kill()` confirms with `state()` that the
 *   container is stopped and then reports NotFound, for any runtime whose wording differs.
 * - A missing container is "container does not exist" for runc, `loading container "<id>":
 *   file does not exist` for runsc, and "error opening file `<root>/<id>/status`: No such file
 *   or directory" for crun; `isNotExist()` accepts all three.
 * - runsc without `--log` writes its internal log to stdout, which for `create`/`exec` with
 *   stdio attached would end up in the container's output: always set `log`.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { OciRuntimeCli } from "./mod.ts";
 * // A stand-in for runc that answers `state` with runsc's shorter document.
 * const bin = await Deno.makeTempFile();
 * const state = '{"ociVersion":"1.0.2","id":"web","pid":42,"status":"created","bundle":"/b"}';
 * await Deno.writeTextFile(bin, `#!/bin/sh\necho '${state}'\n`);
 * await Deno.chmod(bin, 0o755);
 * const cli = new OciRuntimeCli({ binary: bin, root: "/run/containerd/runc/default" });
 * const { status } = await cli.state("web");
 * strictEqual(status, "created");
 * await Deno.remove(bin);
 * ```
 *
 * @module
 */
export * from "./cli.ts";
export * from "./errors.ts";
export * from "./features.ts";
export * from "./shim.ts";
export type * from "./options.ts";
export { readPidFile, type ReadPidFileOptions } from "../linux/pid_file.ts";
