/**
 * Go-style command-line flags, as containerd passes them to a shim binary
 * (`-namespace x -address y -id z start`). Both `-flag value` and `-flag=value`
 * work, one or two dashes, and boolean flags take no value (`-debug`) or `=true|false`.
 *
 * @module
 */

/** The action a shim binary was asked to perform. */
export type ShimAction = "start" | "delete" | "serve";

/** Parsed shim command line. */
export interface ShimFlags {
  /** containerd namespace (`-namespace`). */
  namespace: string;
  /** containerd's gRPC socket address (`-address`). */
  address: string;
  /** containerd binary used to publish events in 1.2-era shims (`-publish-binary`). */
  publishBinary: string;
  /** container or sandbox id (`-id`). */
  id: string;
  /** bundle path (`-bundle`, given to `delete`; otherwise the working directory). */
  bundle: string;
  /** debug logging (`-debug`). */
  debug: boolean;
  /** socket to serve on, set by `start` when it spawns the server (`-socket`). */
  socket: string;
  /** print the version and exit (`-v`). */
  version: boolean;
  /** print a RuntimeInfo message and exit (`-info`). */
  info: boolean;
  /**
   * run as a warm spare server (`-spare`, skiff's own flag, set by `start`): load the server,
   * then wait on `-socket` for a `start` to hand it a container.
   */
  spare: boolean;
  /** the positional action; a missing one means "serve". */
  action: ShimAction;
  /**
   * `-upgrade-check <format>`: installed code asked, before a live upgrade, whether it can take
   * that state format (it loads the server and answers); "" otherwise.
   */
  upgradeCheck: string;
}

const stringFlags = [
  "namespace",
  "address",
  "publish-binary",
  "id",
  "bundle",
  "socket",
  "upgrade-check",
] as const;
const boolFlags = ["debug", "v", "info", "spare"] as const;

/**
 * Parses a shim's argv the way Go's `flag` package does for the Go shims.
 *
 * @param argv the arguments after the program name
 * @returns the parsed flags; throws a TypeError naming an unknown flag or a missing value
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { parseShimFlags } from "./flags.ts";
 * const f = parseShimFlags(["-namespace", "k8s.io", "-id", "abc", "-debug", "start"]);
 * strictEqual(f.namespace, "k8s.io");
 * strictEqual(f.debug, true);
 * strictEqual(f.action, "start");
 * ```
 */
export function parseShimFlags(argv: readonly string[]): ShimFlags {
  const flags: ShimFlags = {
    namespace: "",
    address: "",
    publishBinary: "",
    id: "",
    bundle: "",
    debug: false,
    socket: "",
    version: false,
    info: false,
    spare: false,
    action: "serve",
    upgradeCheck: "",
  };
  let i = 0;
  for (; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === "--") {
      i++;
      break;
    }
    if (!arg.startsWith("-") || arg === "-") break;
    const body = arg.replace(/^--?/, "");
    const eq = body.indexOf("=");
    const name = eq >= 0 ? body.slice(0, eq) : body;
    const inline = eq >= 0 ? body.slice(eq + 1) : undefined;
    if ((boolFlags as readonly string[]).includes(name)) {
      let value = true;
      if (inline !== undefined) {
        if (!/^(1|0|t|f|true|false|TRUE|FALSE|True|False)$/.test(inline)) {
          throw new TypeError(`invalid boolean value "${inline}" for flag -${name}`);
        }
        value = /^(1|t|true|TRUE|True)$/.test(inline);
      }
      if (name === "debug") flags.debug = value;
      else if (name === "v") flags.version = value;
      else if (name === "spare") flags.spare = value;
      else flags.info = value;
      continue;
    }
    if (!(stringFlags as readonly string[]).includes(name)) {
      throw new TypeError(`flag provided but not defined: -${name}`);
    }
    let value = inline;
    if (value === undefined) {
      if (i + 1 >= argv.length) throw new TypeError(`flag needs an argument: -${name}`);
      value = argv[++i];
    }
    switch (name) {
      case "namespace":
        flags.namespace = value;
        break;
      case "address":
        flags.address = value;
        break;
      case "publish-binary":
        flags.publishBinary = value;
        break;
      case "id":
        flags.id = value;
        break;
      case "bundle":
        flags.bundle = value;
        break;
      case "socket":
        flags.socket = value;
        break;
      case "upgrade-check":
        flags.upgradeCheck = value;
        break;
    }
  }
  const action = argv[i];
  if (action === undefined) flags.action = "serve";
  else if (action === "start" || action === "delete") flags.action = action;
  else throw new TypeError(`unknown action "${action}": expected start or delete`);
  return flags;
}
