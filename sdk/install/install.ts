/**
 * Installs shims written with skiff as small `#!/bin/sh` launchers in `<prefix>/bin`, so
 * containerd finds e.g. `containerd-shim-mine-v1` on its PATH.
 *
 * By default each shim is first bundled with `deno bundle --code-splitting` into
 * `<prefix>/lib/skiff/<name>/<content hash>/` (an entry file plus the chunks its dynamic imports
 * load: the short-lived actions parse only the small entry chunk, the server loads its own). The
 * launcher runs that bundle: it needs neither the checkout nor deno's dependency cache at run
 * time, and a changed source changes nothing installed until the shim is installed again (a new
 * hash directory; an old one is removed at a later install once no running process uses it).
 * `mode: "source"` (or `SKIFF_INSTALL_MODE=source`) writes launchers that run the project's
 * sources instead.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { installShims } from "@skiff/shim/install";
 *
 * // A runtime author's project: its deno.json and the shim's main module.
 * const root = await Deno.realPath(await Deno.makeTempDir());
 * await Deno.writeTextFile(`${root}/deno.json`, "{}");
 * await Deno.writeTextFile(`${root}/main.ts`, "// await runShim(new MyShim());\n");
 * // Source launchers are quick to write; the default (bundle) runs `deno bundle` per shim.
 * const [launcher] = await installShims({
 *   prefix: `${root}/usr`, // e.g. /usr/local
 *   root,
 *   shims: { "containerd-shim-mine-v1": "main.ts" },
 *   mode: "source",
 * });
 * strictEqual(launcher, `${root}/usr/bin/containerd-shim-mine-v1`);
 * // then: containerd with `${root}/usr/bin` on its PATH runs runtime "io.containerd.mine.v1"
 * await Deno.remove(root, { recursive: true });
 * ```
 *
 * @module
 */
// long: over 500 lines with its runnable JSDoc examples; the code (~290 lines) is one concept,
// writing the launchers

import { sha256Hex } from "../shim/contract/sha256.ts";
import { RUNTIME_DELETED_FILE } from "../shim/contract/bundle_files.ts";
import {
  ADDRESS_FILE,
  DEFAULT_SOCKET_DIR,
  OPS_SOCKET_SUFFIX,
} from "../shim/contract/socket_address.ts";
import { UPGRADE_STATE_SUFFIX } from "../shim/contract/upgrade.ts";
import { LAUNCHER_ENV as E } from "../shim/contract/launcher_env.ts";
import { CREATE_WAIT_MS, LOADING_WAIT_MS, MAX_SHARED_PODS } from "../shim/spare/config.ts";

/**
 * Options of {@linkcode installShims}.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import type { InstallShimsOptions } from "@skiff/shim/install";
 * const opts: InstallShimsOptions = {
 *   prefix: "/opt/skiff",
 *   root: "/src/mine", // the runtime author's project: its deno.json and main.ts
 *   shims: { "containerd-shim-mine-v1": "main.ts" },
 * };
 * strictEqual(opts.mode, undefined); // bundle, unless SKIFF_INSTALL_MODE says otherwise
 * ```
 */
export interface InstallShimsOptions {
  /** Install prefix; launchers go to `<prefix>/bin`. */
  prefix: string;
  /**
   * The project holding `deno.json` (its import map) and the entry points. Default: the
   * current directory.
   */
  root?: string;
  /**
   * Launchers to write: the name containerd runs (`containerd-shim-<name>-<version>`, for the
   * runtime `io.containerd.<name>.<version>`) → the shim's main module, relative to `root`.
   */
  shims: Record<string, string>;
  /** The deno binary the launchers exec. Default: the running one (`Deno.execPath()`). */
  deno?: string;
  /**
   * DENO_DIR pinned in the launchers. Default: source mode, the running deno's cache dir (it
   * holds the dependencies); bundle mode, `<prefix>/lib/skiff/cache` (Deno's module analysis caches; launchers run with `--no-code-cache`).
   */
  denoDir?: string;
  /**
   * `"bundle"` (default, or `SKIFF_INSTALL_MODE`): run a bundle made at install time;
   * `"source"`: run the checkout's sources through deno's cache.
   */
  mode?: InstallMode;
  /** V8 flags the bundle launchers pass. Default {@linkcode DEFAULT_SHIM_V8_FLAGS}. */
  v8Flags?: readonly string[];
  /**
   * Bundle mode: split dynamic imports into chunks (default true), or inline everything into
   * one file. Splitting measured cheaper for the short-lived actions (docs/performance.md).
   */
  codeSplitting?: boolean;
  /**
   * Bundle mode: minify the bundle (names kept, `--keep-names`), default true. Each server
   * holds its modules' source text in its heap; minified, 10 runc shim servers measured about
   * 6 MiB less PSS on containerd 2.1.9 (sdk/install/install.ts, `DEFAULT_SHIM_V8_FLAGS`).
   */
  minify?: boolean;
  /**
   * Bundle mode: the warm spare server (docs/performance.md, "Warm spare server"). `false`
   * installs launchers that never use one; `idleSeconds` is how long an unused spare waits
   * (default 600). containerd's environment (`SKIFF_SPARE`, `SKIFF_SPARE_IDLE_SECONDS`) wins
   * over both.
   */
  spare?: boolean | { idleSeconds?: number };
  /**
   * Shared servers: the most pods one server process serves (2 or more; default:
   * one pod per server). Written into the launchers as `SKIFF_SHARED_PODS` (containerd's
   * environment wins); install the shared launchers under their own names or prefix, so that
   * one runtime handler gets them (docs/containerd-config.md, "Shared servers").
   */
  sharedPods?: number;
}

/** How installed launchers run a shim. */
export type InstallMode = "bundle" | "source";

/**
 * V8 flags of bundled shim launchers, chosen by measurement (docs/performance.md, "Bundled
 * launchers"): lite mode (no optimising compiler, lazy feedback) and a 1 MiB young generation
 * cut a long-running server's private memory, and a shim does little compute. `--expose-gc`
 * lets the server run one memory-reducing collection when it turns idle (the warm spare before
 * it waits, a server 1 s after it listens: sdk/linux/memory_trim.ts); with
 * {@linkcode SHIM_MALLOC_ARENA_MAX} it took the PSS of 10 one-container runc shim servers on
 * containerd 2.1.9 from 194 to 167 MiB (Go's shim: 57 MiB; 161 MiB with the minified bundle
 * of `installShims`), the waiting spare's from 18.0 to 15.8 MiB, with no slower `ctr run`
 * (p50 218 → 172 ms, within this loaded machine's noise); those runs kept other variants'
 * spares alive, so shared pages split further. `bench/shim_bench.ts --containerd 2.1` then
 * gave 173.8 MiB against Go's 56.5 (3.07x), the spare 16.5 MiB.
 */
export const DEFAULT_SHIM_V8_FLAGS: readonly string[] = [
  "--lite-mode",
  "--max-semi-space-size=1",
  "--expose-gc",
];

/**
 * `MALLOC_ARENA_MAX` of bundled launchers unless containerd's environment sets one: glibc gives
 * each thread that allocates (Deno's and V8's worker threads) its own malloc arena, whose
 * touched pages a mostly idle shim server keeps; one arena saved about 0.5 MiB of PSS per
 * server. Only the shim's processes read it: runc inherits it (its Go code does not use glibc's
 * malloc), and a container's environment is its spec's `process.env`, not the shim's.
 */
export const SHIM_MALLOC_ARENA_MAX = 1;

/**
 * What one launcher runs, for {@linkcode launcherScript}.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { launcherScript, type LauncherSpec } from "./install.ts";
 * const spec: LauncherSpec = {
 *   deno: "/usr/bin/deno",
 *   denoDir: "/root/.cache/deno",
 *   config: "/src/deno.json",
 *   entry: "/src/main.ts",
 * };
 * const text = launcherScript(spec);
 * strictEqual(text.includes("DENO_DIR='/root/.cache/deno'"), true);
 * strictEqual(text.includes("--cached-only --config '/src/deno.json'"), true); // never the network
 * ```
 */
export interface LauncherSpec {
  /** Absolute path of the deno binary. */
  deno: string;
  /** Absolute DENO_DIR holding the cached dependencies. */
  denoDir: string;
  /** Absolute path of the `deno.json` (import map and lock file). */
  config: string;
  /** Absolute path of the shim's entry point. */
  entry: string;
  /** Shared servers: the most pods one server process serves (`SKIFF_SHARED_PODS`), 2 or more. */
  sharedPods?: number;
}

/**
 * What one bundle launcher runs, for {@linkcode bundleLauncherScript}.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { type BundleLauncherSpec, bundleLauncherScript } from "./install.ts";
 * const spec: BundleLauncherSpec = {
 *   deno: "/usr/bin/deno",
 *   denoDir: "/opt/lib/skiff/cache",
 *   entry: "/opt/lib/skiff/x/0123/main.js",
 *   v8Flags: ["--max-semi-space-size=1"],
 * };
 * strictEqual(bundleLauncherScript(spec).includes("'--v8-flags=--max-semi-space-size=1'"), true);
 * ```
 */
export interface BundleLauncherSpec {
  /** Absolute path of the deno binary. */
  deno: string;
  /** Absolute DENO_DIR (module analysis caches only; nothing is fetched). */
  denoDir: string;
  /** Absolute path of the bundle's entry file. */
  entry: string;
  /** V8 flags. */
  v8Flags: readonly string[];
  /** The warm spare: on (default), off, or on with an idle time in seconds. */
  spare?: boolean | { idleSeconds?: number };
  /** Shared servers: the most pods one server process serves (`SKIFF_SHARED_PODS`), 2 or more. */
  sharedPods?: number;
}

/**
 * The launcher's answer to containerd's common `delete`, without starting deno. containerd runs
 * `<shim> … -bundle B delete` every time a shim's connection closes, and waits for it before
 * the task delete returns. After a clean Task `Delete` the server has left the answer in the
 * bundle ({@linkcode RUNTIME_DELETED_FILE}, a marshalled `DeleteResponse`) and removed its
 * socket: there is nothing to clean, so the launcher prints that file. Anything else (no answer,
 * the socket still there: a live group server or a dead one's leftover) runs the `delete` action
 * as before. The file names are the TypeScript constants the actions use; the shell is tested
 * against the `delete` action itself (tests/unit/install/install_test.ts: wherever it answers, the
 * action would print the same bytes and run nothing).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { deleteFastPath } from "./install.ts";
 * strictEqual(deleteFastPath().some((line) => line.includes("skiff-runtime-deleted")), true);
 * ```
 */
export function deleteFastPath(): string[] {
  const answer = `"$b/${bundleFileName(RUNTIME_DELETED_FILE)}"`;
  const address = `"$b/${bundleFileName(ADDRESS_FILE)}"`;
  return [
    'for a in "$@"; do last=$a; done',
    'if [ "${last-}" = delete ]; then',
    "  b= prev=",
    '  for a in "$@"; do',
    "    case $prev in -bundle|--bundle) b=$a ;; esac",
    "    case $a in -bundle=*|--bundle=*) b=${a#*=} ;; esac",
    "    prev=$a",
    "  done",
    `  if [ -n "$b" ] && [ -s ${answer} ] &&`,
    `    { read -r addr < ${address} || [ -n "\${addr-}" ]; } 2>/dev/null &&`,
    '    [ -n "$addr" ] && [ ! -e "${addr#unix://}" ] &&',
    // What the delete action would also remove: the ops socket, a half-done upgrade's files.
    `    [ ! -e "\${addr#unix://}${OPS_SOCKET_SUFFIX}" ] &&`,
    `    [ ! -e "\${addr#unix://}${UPGRADE_STATE_SUFFIX}" ] && [ ! -e "\${addr#unix://}.next" ]; then`,
    `    exec cat ${answer}`,
    "  fi",
    "fi",
  ];
}

/** The fd on which a launcher's shell hands the `create` lock to Deno's `start`. */
const CREATE_FD = 9;
/** Seconds a launcher's shell waits for a shared server to take its knock before it goes on. */
const SHARED_DOOR_WAIT_S = 5;
/** Seconds between a shell's looks for a loading spare's door (for `LOADING_WAIT_MS` at most). */
const SPARE_LOOK_S = 0.1;
/** Rounds of knocking (and waiting on `create`) before a shell runs Deno's `start` anyway. */
const DOOR_PASSES = 8;
/** Seconds between a waiting shell's looks at its knock (each forks a `sleep`). */
const DOOR_TICK_S = 0.2;
/** A waiting shell's looks at its knock per second. */
const DOOR_TICKS_PER_S = Math.round(1 / DOOR_TICK_S);

/**
 * The launcher's `start` through a door, without starting deno: a shared server's that takes
 * pods (`SKIFF_SHARED_PODS`, sdk/shim/spare/shared.ts) first, then a waiting warm spare's. The
 * shell knocks (its pid into `spare-<code>.door`, a token `start-<pid>` beside it) and waits for the
 * spare, which runs `start` in its place, leaves the answer beside the token and signals how it
 * went (`sdk/shim/spare/door.ts`: `SIGUSR1` answered, `SIGHUP` failed, `SIGUSR2` not taken); the
 * shell prints the answer itself. With no live spare at the door
 * (`flock` finds its lock free), no word within a second (a shared server: five), or its knock
 * lost (the door removed or replaced since, the lock let go) while its token is still its own,
 * the shell runs Deno's `start` as before; containerd's stdin is untouched until the spare takes
 * the start. A taker that is gone before it said how it went (the token names it) fails the start
 * at once. With shared servers, while another start brings the next server up (holding
 * `shared-<…>.create`), the shell waits on that lock and knocks once more, rather than boot a
 * Deno `start` only to wait; holding the lock itself, it waits for a spare still loading to open
 * its door (at most 2 s) and knocks there. The spare's directory is the default socket directory's (a containerd 2.3+ that
 * names another one in `start`'s stdin gets Deno's `start`, which reads it).
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { startDoorPath } from "./install.ts";
 * strictEqual(startDoorPath().some((line) => line.includes(".door")), true);
 * ```
 */
export function startDoorPath(): string[] {
  const dir = `${DEFAULT_SOCKET_DIR}/skiff-`;
  if (!/^[A-Za-z0-9/._-]+$/.test(dir)) throw new Error(`socket dir "${dir}" needs quoting`);
  return [
    // A server spawned by a `start` that held the `create` lock: the lock is start's, not ours.
    `if [ -n "\${${E.createFd}-}" ]; then exec ${CREATE_FD}>&-; unset ${E.createFd}; fi`,
    `if [ "\${last-}" = start ] && [ "\${${E.spareDoor}-}" != 0 ]; then`,
    "  a= ns= prev=",
    '  for x in "$@"; do',
    "    case $prev in -address|--address) a=$x ;; -namespace|--namespace) ns=$x ;; esac",
    "    case $x in -address=*|--address=*) a=${x#*=} ;; -namespace=*|--namespace=*) ns=${x#*=} ;; esac",
    "    prev=$x",
    "  done",
    // The key: the first 16 hex digits of this launcher's code identity.
    `  k=\${${E.code}#????????????????}; k=\${${E.code}%"$k"}; d=`,
    // Whether a live process holds the lock $1: the pid its holder wrote into it lives (no
    // exec), else flock(1) finds it taken. A pid reused after its holder died sends a knock
    // into a dead door; the wait below finds the lock free within a second and goes on.
    '  held() { { read -r o <"$1" && [ -n "$o" ] && kill -0 "$o"; } 2>/dev/null ||',
    '    ! flock -n "$1" true 2>/dev/null; }',
    // The spares' directory is named by the address's SHA-256 (spareDir in
    // sdk/shim/spare/config.ts). A `sha256sum` costs forks and an exec in every start, so its
    // first 12 digits are kept beside the directory in a file named by the address itself
    // ('/' as '%', for an address of plain characters only: one name per address), and read
    // back with the shell's own `read`. What a file holds is checked, never trusted.
    "  e=; case $a in /*[!A-Za-z0-9/._-]*) ;; /*) x=$a; while :; do",
    "    case $x in */*) e=$e${x%%/*}%; x=${x#*/} ;; *) e=$e$x; break ;; esac; done ;; esac",
    `  h= hn=; [ -n "$e" ] && { read -r h <"${dir}address-$e"; } 2>/dev/null`,
    "  case $h in ????????????) case $h in *[!0-9a-f]*) h= ;; esac ;; *) h= ;; esac",
    '  [ -z "$h" ] && [ -n "$a" ] && h=$(printf %s "$a" | sha256sum 2>/dev/null) &&',
    '    h=${h%"${h#????????????}"} && hn=1',
    `  [ \${#k} = 16 ] && [ \${#h} = 12 ] && d=${dir}$h`,
    `  [ -n "$hn" ] && [ -n "$e" ] && [ -d "$d" ] && { printf '%s\\n' "$h" >"${dir}address-$e"; } 2>/dev/null`,
    // A shared server of this namespace that takes pods first (sdk/shim/spare/shared.ts: its
    // name has the namespace's hash, kept the same way in `ns-<namespace>` in the directory:
    // containerd's namespace names are plain characters), then the spare; one that does not
    // take this start (full) sends the shell on to the next.
    `  m=; if [ -n "\${${E.sharedPods}-}" ]; then`,
    '    f=; [ -n "$d" ] && case $ns in ""|*[!A-Za-z0-9._-]*) ;; *) f="$d/ns-$ns" ;; esac',
    '    [ -n "$f" ] && { read -r m <"$f"; } 2>/dev/null',
    "    case $m in ????????) case $m in *[!0-9a-f]*) m= ;; esac ;; *) m= ;; esac",
    '    if [ -z "$m" ] && m=$(printf %s "$ns" | sha256sum 2>/dev/null); then',
    '      m=${m%"${m#????????}"}',
    `      [ -n "$f" ] && [ -d "$d" ] && { printf '%s\\n' "$m" >"$f"; } 2>/dev/null`,
    "    fi",
    "  fi",
    '  c="$d/shared-$k-$m.create"',
    // Passes: a burst's knocks are lost as servers fill up and spares become servers; each
    // pass ends in a knock answered, in Deno's start, or waiting on `create`.
    `  for p in ${Array.from({ length: DOOR_PASSES }, (_, i) => i + 1).join(" ")}; do`,
    '  for s in "shared-$k-$m" "spare-$k"; do',
    '  if [ -n "$d" ] && [ -p "$d/$s.door" ] && held "$d/$s.lock" &&',
    '    : 2>/dev/null >"$d/start-$$"; then',
    "    r=",
    "    trap 'r=0' USR1",
    "    trap 'r=cold' USR2",
    "    trap 'r=1' HUP",
    // Read-write: the open never waits, whether or not the server still reads. Held while the
    // shell waits: the door is then known to be the FIFO its knock went into. A door removed
    // since the look above is made a regular file by this open: removed again, and on.
    `    { command exec 3<>"$d/$s.door"; } 2>/dev/null || { rm -f "$d/start-$$"; continue; }`,
    "    if [ ! -p /proc/$$/fd/3 ]; then",
    '      [ -f "$d/$s.door" ] && [ "$d/$s.door" -ef /proc/$$/fd/3 ] && rm -f "$d/$s.door"',
    '      exec 3>&-; rm -f "$d/start-$$"; continue',
    "    fi",
    // On fd 3, then the pid: the server writes the answer into this shell's fd 1 as soon as it
    // reads the pid, and the shell's own redirection of a builtin's fd 1 could be in place then.
    "    { printf '%s\\n' $$ >&3; } 2>/dev/null",
    "    n=0",
    '    while [ -z "$r" ]; do',
    // Not holding containerd's pipes: containerd reads this start's output to its end.
    `      sleep ${DOOR_TICK_S} </dev/null >/dev/null 2>&1 3>&- & w=$!`,
    '      [ -n "$r" ] || wait $w',
    "      kill $w 2>/dev/null",
    "      n=$((n + 1))",
    '      [ -n "$r" ] && break',
    '      if [ -e "$d/start-$$" ]; then',
    // Not taken yet. The knock is lost once the door is not the FIFO it went into (a shared
    // server that filled up removed it), or no server holds the lock (it died): go on at once.
    // A live server that has not taken it is busy, not gone (it serves pods at normal priority,
    // and bringing another server up would load the node more): a shared server gets
    // ${SHARED_DOOR_WAIT_S} s, a spare (at low priority) one.
    `        l=${DOOR_TICKS_PER_S}; case $s in shared-*) l=${
      SHARED_DOOR_WAIT_S * DOOR_TICKS_PER_S
    } ;; esac`,
    '        if [ $n -ge $l ] || [ ! "$d/$s.door" -ef /proc/$$/fd/3 ] ||',
    `          { [ $((n % ${DOOR_TICKS_PER_S})) = 0 ] && flock -n "$d/$s.lock" true 2>/dev/null; }; then`,
    '          rm "$d/start-$$" 2>/dev/null && r=cold',
    "        fi",
    // Taken: the taker wrote its pid into the token. One that is gone before saying how it
    // went (./door.ts: it left its word first) failed this start; what it read is not there
    // for Deno's start.
    '      elif read -r t <"$d/taken-$$" 2>/dev/null && [ -n "$t" ] && ! kill -0 "$t" 2>/dev/null; then',
    '        if [ -e "$d/answer-$$" ]; then r=0; elif [ -e "$d/error-$$" ]; then r=1; else',
    '          echo "skiff: the server $t at $d/$s.door took this start and exited without answering" >&2; r=1',
    "        fi",
    "      fi",
    `      if [ -z "$r" ] && [ $n -ge ${60 * DOOR_TICKS_PER_S} ]; then`,
    '        echo "skiff: the server at $d/$s.door took this start and did not answer within 60 s" >&2; r=1',
    "      fi",
    "    done",
    "    exec 3>&-",
    "    trap - USR1 USR2 HUP",
    // The server's answer (or why it failed), printed on this shell's own stdout (stderr).
    "    case $r in",
    // With the shell's own read and printf (a `cat` is a fork and an exec); a last line
    // without a newline is printed as it is.
    `      0) { while IFS= read -r x; do printf '%s\\n' "$x"; done; printf %s "$x"; } <"$d/answer-$$" || r=1 ;;`,
    '      1) cat "$d/error-$$" >&2 2>/dev/null ;;',
    "    esac",
    '    rm -f "$d/start-$$" "$d/taken-$$" "$d/answer-$$" "$d/error-$$"',
    "    case $r in 0) exit 0 ;; 1) exit 1 ;; esac",
    "  fi",
    "  done",
    // Shared servers: no server took the start. Either this start brings the next one up,
    // holding `create` for Deno's `start` (which inherits the fd and so holds the lock until it
    // exits, joinOrCreate in sdk/shim/spare/join.ts), or another start does: then wait on
    // the lock until its server takes pods, and knock again. So the starts of a burst run one
    // Deno process per server brought up, not one each.
    `  [ -n "$m" ] && [ -d "$d" ] && { command exec ${CREATE_FD}>>"$c"; } 2>/dev/null || break`,
    `  if flock -n -x ${CREATE_FD} 2>/dev/null; then`,
    // Taken: no server is being brought up now. One may have opened since this pass looked at
    // its door (it lets `create` go once it takes pods): knock there. A spare on its way
    // (spawned: its loading marker names a live process; or loading: its lock held, no door
    // yet) brings the server up sooner than a Deno `start` booting now would (which waits for
    // it too): wait for its door, holding `create` so that the burst waits behind, then let
    // `create` go and knock on it.
    '    i=0; while [ ! -p "$d/spare-$k.door" ] && [ ! -p "$d/shared-$k-$m.door" ] &&',
    `      [ $i -lt ${
      Math.round(LOADING_WAIT_MS / 1000 / SPARE_LOOK_S)
    } ] && { { read -r t x <"$d/spare-$k.loading" && kill -0 "$t"; } 2>/dev/null ||`,
    '      held "$d/spare-$k.lock"; }; do',
    `      sleep ${SPARE_LOOK_S}; i=$((i + 1))`,
    "    done",
    `    if [ $p != ${DOOR_PASSES} ] && { [ $i != 0 ] && [ -p "$d/spare-$k.door" ] ||`,
    '      { [ -p "$d/shared-$k-$m.door" ] && ! flock -n "$d/shared-$k-$m.lock" true 2>/dev/null; }; }; then',
    `      exec ${CREATE_FD}>&-; continue`,
    "    fi",
    `    ${E.createFd}=${CREATE_FD}; export ${E.createFd}; break`,
    "  fi",
    // Waits on the lock through the descriptor already open (no `true` to exec), then lets go.
    `  [ $p != ${DOOR_PASSES} ] && flock -s -w ${
      CREATE_WAIT_MS / 1000
    } ${CREATE_FD} 2>/dev/null || { exec ${CREATE_FD}>&-; break; }`,
    `  exec ${CREATE_FD}>&-`,
    "  done",
    "fi",
  ];
}

/** A launcher's `SKIFF_SHARED_PODS`, checked: a whole number from 2 (1 is the default, per pod). */
function checkSharedPods(n: number): number {
  if (!Number.isInteger(n) || n < 2 || n > MAX_SHARED_PODS) {
    throw new TypeError(
      `sharedPods ${n}: expected the most pods one shim server serves, a whole number from 2 to ${MAX_SHARED_PODS}`,
    );
  }
  return n;
}

/** A bundle file's name, checked to need no quoting inside the launcher's double quotes. */
function bundleFileName(name: string): string {
  if (!/^[A-Za-z0-9._-]+$/.test(name)) throw new Error(`bundle file name "${name}" needs quoting`);
  return name;
}

/**
 * The `#!/bin/sh` text of a launcher that runs an installed bundle.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { bundleLauncherScript } from "./install.ts";
 * const text = bundleLauncherScript({ deno: "/usr/bin/deno", denoDir: "/c", entry: "/b/main.js", v8Flags: [] });
 * strictEqual(text.includes("'/b/main.js' \"$@\""), true);
 * ```
 */
export function bundleLauncherScript(spec: BundleLauncherSpec): string {
  const v8 = spec.v8Flags.length > 0 ? ` ${sq(`--v8-flags=${spec.v8Flags.join(",")}`)}` : "";
  const spare = spec.spare ?? true;
  const idle = typeof spare === "object" ? spare.idleSeconds : undefined;
  const shared = spec.sharedPods === undefined ? undefined : checkSharedPods(spec.sharedPods);
  const lines = [
    "#!/bin/sh",
    "# Generated by skiff's installShims: runs the bundle made at install time; reinstall to update.",
    `DENO_DIR=${sq(spec.denoDir)}`,
    "DENO_NO_UPDATE_CHECK=1",
    // One malloc arena: see SHIM_MALLOC_ARENA_MAX in skiff's sdk/install/install.ts.
    `: "\${MALLOC_ARENA_MAX:=${SHIM_MALLOC_ARENA_MAX}}"`,
    // `start` re-runs this launcher to spawn the long-running server with the same flags.
    `${E.launcher}="$0"`,
    // The bundle's content-hashed path, part of the code identity below.
    `${E.bundle}=${sq(spec.entry)}`,
    ...(spare === false ? [`: "\${${E.spare}:=0}"`] : []),
    ...(idle !== undefined
      ? [`: "\${${E.spareIdleSeconds}:=${Math.max(1, Math.round(idle))}}"`]
      : []),
    `export DENO_DIR DENO_NO_UPDATE_CHECK MALLOC_ARENA_MAX ${E.launcher} ${E.bundle}`,
    `export ${E.code}`,
    ...(spare === false || idle !== undefined ? [`export ${E.spare} ${E.spareIdleSeconds}`] : []),
    ...(shared !== undefined
      ? [`: "\${${E.sharedPods}:=${shared}}"`, `export ${E.sharedPods}`]
      : []),
    ...deleteFastPath(),
    ...(spare === false && shared === undefined ? [] : startDoorPath()),
    `exec ${
      sq(spec.deno)
    } run -A --quiet --no-prompt --no-config --no-lock --cached-only --no-code-cache${v8} ${
      sq(spec.entry)
    } "$@"`,
    "",
  ];
  // The code identity a warm spare is keyed on (sdk/shim/spare/config.ts, launcherCodeId): the hash of
  // everything else here, including the bundle's content-hashed path, stated so that `start`
  // reads it from its environment instead of hashing this file.
  const code = sha256Hex(new TextEncoder().encode(lines.join("\n")));
  lines.splice(lines.indexOf(`export ${E.code}`), 0, `${E.code}=${code}`);
  return lines.join("\n");
}

/**
 * Bundles one shim entry with `deno bundle --code-splitting` into `<dir>/<content hash>/` and
 * returns the entry file's path. Same sources, same directory: reinstalling unchanged sources
 * rewrites nothing a running server may still load.
 *
 * @param deno the deno binary
 * @param root the project root (its `deno.json` is the import map)
 * @param entry the shim's entry point, absolute
 * @param dir where this shim's bundles live
 * @param codeSplitting chunks for dynamic imports (default), or one inlined file
 * @param minify minify, keeping function and class names (default false)
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { bundleShim } from "./install.ts";
 * const src = await Deno.realPath(await Deno.makeTempDir()); // a tiny project
 * await Deno.writeTextFile(`${src}/main.ts`, 'console.log("shim");\n');
 * const lib = `${src}/lib`;
 * const main = await bundleShim(Deno.execPath(), src, `${src}/main.ts`, lib);
 * strictEqual(main.startsWith(`${lib}/`) && main.endsWith("/main.js"), true);
 * // Same sources, same directory:
 * strictEqual(await bundleShim(Deno.execPath(), src, `${src}/main.ts`, lib), main);
 * const out = await new Deno.Command(Deno.execPath(), { args: ["run", main] }).output();
 * strictEqual(new TextDecoder().decode(out.stdout), "shim\n");
 * await Deno.remove(src, { recursive: true });
 * ```
 */
export async function bundleShim(
  deno: string,
  root: string,
  entry: string,
  dir: string,
  codeSplitting = true,
  minify = false,
): Promise<string> {
  await Deno.mkdir(dir, { recursive: true });
  const part = await Deno.makeTempDir({ dir, prefix: ".part-" });
  try {
    const out = await new Deno.Command(deno, {
      args: [
        "bundle",
        "--quiet",
        "--platform",
        "deno",
        ...(codeSplitting ? ["--code-splitting"] : []),
        // Smaller source text in every server's heap; names kept for errors and logs.
        ...(minify ? ["--minify", "--keep-names"] : []),
        "--outdir",
        part,
        ...(await exists(`${root}/deno.json`) ? ["--config", `${root}/deno.json`] : []),
        entry,
      ],
      cwd: root,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).output();
    const base = entry.slice(entry.lastIndexOf("/") + 1).replace(/\.[cm]?[jt]sx?$/, "");
    if (!out.success || !(await exists(`${part}/${base}.js`))) {
      throw new Error(
        `deno bundle of "${entry}" failed (exit ${out.code}): ${
          new TextDecoder().decode(out.stderr).trim()
        }`,
      );
    }
    if (codeSplitting) await deferChunkLoading(part);
    const hash = await treeHash(part);
    const final = `${dir}/${hash}`;
    if (await exists(final)) {
      await Deno.remove(part, { recursive: true });
    } else {
      await Deno.rename(part, final);
    }
    await pruneBundles(dir, hash);
    return `${final}/${base}.js`;
  } catch (e) {
    await Deno.remove(part, { recursive: true }).catch(() => {});
    throw e;
  }
}

/**
 * Rewrites a split bundle's `import("./chunk.js")` calls so that Deno loads each chunk only when
 * the call runs. Deno's module graph otherwise reads (and keeps in memory) every chunk a literal
 * dynamic import names before the entry runs: every action and every server would load the whole
 * tree, which the split exists to avoid (docs/performance.md, "Deferred chunks").
 *
 * @param dir a `deno bundle --code-splitting` output directory, rewritten in place
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { deferChunkLoading } from "./install.ts";
 * const dir = await Deno.makeTempDir(); // stands in for a bundle's output directory
 * await Deno.writeTextFile(`${dir}/main.js`, 'await import("./chunk-ab12.js");\n');
 * await deferChunkLoading(dir);
 * strictEqual(await Deno.readTextFile(`${dir}/main.js`), 'await import(String("./chunk-ab12.js"));\n');
 * await Deno.remove(dir, { recursive: true });
 * ```
 */
export async function deferChunkLoading(dir: string): Promise<void> {
  for await (const e of Deno.readDir(dir)) {
    if (!e.isFile || !e.name.endsWith(".js")) continue;
    const path = `${dir}/${e.name}`;
    const text = await Deno.readTextFile(path);
    // A non-literal specifier is resolved when the call runs, against this module's URL, just
    // like the literal; only the graph's eager pre-load no longer sees it.
    const out = text.replace(DYNAMIC_CHUNK_IMPORT, (_m, spec: string) => `import(String(${spec}))`);
    if (out !== text) await Deno.writeTextFile(path, out);
  }
}

/** `import("./x.js")` as `deno bundle` writes it for a chunk of the same bundle. */
const DYNAMIC_CHUNK_IMPORT = /\bimport\(\s*("\.\/[^"\\]+\.js")\s*\)/g;

/**
 * Removes this shim's older bundles that no running process uses: a server started from an old
 * bundle still imports chunks from it (e.g. the Sandbox API on first use), so a directory named
 * on some process's command line stays until that process is gone and the shim is reinstalled.
 */
async function pruneBundles(dir: string, keep: string): Promise<void> {
  const inUse = new Set<string>();
  for await (const e of Deno.readDir("/proc")) {
    if (!/^\d+$/.test(e.name)) continue;
    try {
      for (const arg of (await Deno.readTextFile(`/proc/${e.name}/cmdline`)).split("\0")) {
        if (arg.startsWith(`${dir}/`)) inUse.add(arg.slice(dir.length + 1).split("/")[0]!);
      }
    } catch { /* exited, or not ours to read */ }
  }
  for await (const e of Deno.readDir(dir)) {
    if (!e.isDirectory || e.name === keep || e.name.startsWith(".part-") || inUse.has(e.name)) {
      continue;
    }
    await Deno.remove(`${dir}/${e.name}`, { recursive: true }).catch(() => {});
  }
}

async function exists(path: string): Promise<boolean> {
  return await Deno.stat(path).then(() => true, () => false);
}

/** SHA-256 over every file's name and content, first 16 hex digits. */
async function treeHash(dir: string): Promise<string> {
  const names = [...Deno.readDirSync(dir)].filter((e) => e.isFile).map((e) => e.name).sort();
  const enc = new TextEncoder();
  const parts: Uint8Array[] = [];
  for (const n of names) {
    parts.push(enc.encode(`${n}\0`), await Deno.readFile(`${dir}/${n}`), enc.encode("\0"));
  }
  const all = new Uint8Array(parts.reduce((a, p) => a + p.length, 0));
  let off = 0;
  for (const p of parts) {
    all.set(p, off);
    off += p.length;
  }
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", all));
  return Array.from(digest.slice(0, 8), (b) => b.toString(16).padStart(2, "0")).join("");
}

function sq(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`;
}

/**
 * The text of a launcher script. containerd runs shims with its own environment and with the
 * bundle as cwd, so everything the script needs is absolute: deno, the config (for the import
 * map and lock), the entry point, and DENO_DIR (so the cache that `deno install` filled is
 * used, with `--cached-only`: a shim must never reach for the network).
 *
 * @param spec absolute paths
 * @returns the script, ending in a newline
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { launcherScript } from "./install.ts";
 * const s = launcherScript({ deno: "/usr/bin/deno", denoDir: "/d", config: "/r/deno.json", entry: "/r/m.ts" });
 * strictEqual(s.startsWith("#!/bin/sh\n"), true);
 * ```
 */
export function launcherScript(spec: LauncherSpec): string {
  return [
    "#!/bin/sh",
    "# Generated by skiff's installer; install again after moving the project.",
    `DENO_DIR=${sq(spec.denoDir)}`,
    "DENO_NO_UPDATE_CHECK=1",
    // `start` re-runs this launcher to spawn the long-running server with the same flags.
    `${E.launcher}="$0"`,
    `export DENO_DIR DENO_NO_UPDATE_CHECK ${E.launcher}`,
    ...(spec.sharedPods !== undefined
      ? [`: "\${${E.sharedPods}:=${checkSharedPods(spec.sharedPods)}}"`, `export ${E.sharedPods}`]
      : []),
    ...deleteFastPath(),
    `exec ${sq(spec.deno)} run -A --quiet --no-prompt --cached-only --config ${sq(spec.config)} ${
      sq(spec.entry)
    } "$@"`,
    "",
  ].join("\n");
}

/**
 * The DENO_DIR the running deno uses (`$DENO_DIR`, else what `deno info --json` reports).
 *
 * @param deno the deno binary to ask. Default: the running one
 * @returns an absolute path
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { currentDenoDir } from "./install.ts";
 * const dir = await currentDenoDir(); // e.g. /root/.cache/deno
 * strictEqual(dir.startsWith("/"), true);
 * ```
 */
export async function currentDenoDir(deno: string = Deno.execPath()): Promise<string> {
  const env = Deno.env.get("DENO_DIR");
  if (env) return await Deno.realPath(env).catch(() => env);
  const out = await new Deno.Command(deno, {
    args: ["info", "--json"],
    stdout: "piped",
    stderr: "null",
    env: { NO_COLOR: "1" },
  }).output();
  const dir = out.success
    ? (JSON.parse(new TextDecoder().decode(out.stdout)) as { denoDir?: string }).denoDir
    : undefined;
  if (!dir) throw new Error("cannot determine DENO_DIR: set it explicitly");
  return dir;
}

/**
 * Writes one launcher per shim into `<prefix>/bin` (mode 0755, replaced atomically so a
 * running containerd never sees a half-written file). In bundle mode (the default) each shim is
 * bundled first ({@linkcode bundleShim}); a runtime author calls this from their own project
 * with `root` and `shims` naming their entry points.
 *
 * @param opts where to install and what
 * @returns the absolute paths of the launchers written
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { installShims } from "@skiff/shim/install";
 * // A runtime author's own project, installed under a temporary prefix (e.g. /usr/local):
 * const root = await Deno.realPath(await Deno.makeTempDir());
 * await Deno.writeTextFile(`${root}/main.ts`, "// the shim\n");
 * const [mine] = await installShims({
 *   prefix: `${root}/prefix`,
 *   root,
 *   mode: "source",
 *   shims: { "containerd-shim-mine-v1": "main.ts" },
 * });
 * strictEqual(mine, `${root}/prefix/bin/containerd-shim-mine-v1`);
 * strictEqual(Deno.statSync(mine).mode! & 0o777, 0o755);
 * strictEqual(Deno.readTextFileSync(mine).includes(`'${root}/main.ts'`), true);
 * await Deno.remove(root, { recursive: true });
 * ```
 */
export async function installShims(opts: InstallShimsOptions): Promise<string[]> {
  const root = opts.root ?? Deno.cwd();
  const deno = opts.deno ?? Deno.execPath();
  const mode = opts.mode ?? installModeFromEnv();
  const prefix = opts.prefix.replace(/\/$/, "");
  const bin = `${prefix}/bin`;
  await Deno.mkdir(bin, { recursive: true });
  const absBin = await Deno.realPath(bin);
  const absRoot = await Deno.realPath(root);
  const lib = `${await Deno.realPath(prefix)}/lib/skiff`;
  const denoDir = opts.denoDir ??
    (mode === "source" ? await currentDenoDir(deno) : `${lib}/cache`);
  const written: string[] = [];
  for (const [name, entry] of Object.entries(opts.shims)) {
    if (name.includes("/")) throw new TypeError(`invalid launcher name: "${name}"`);
    const path = `${absBin}/${name}`;
    const absEntry = entry.startsWith("/") ? entry : `${absRoot}/${entry}`;
    const text = mode === "source"
      ? launcherScript({
        deno,
        denoDir,
        config: `${absRoot}/deno.json`,
        entry: absEntry,
        ...(opts.sharedPods !== undefined ? { sharedPods: opts.sharedPods } : {}),
      })
      : bundleLauncherScript({
        deno,
        denoDir,
        entry: await bundleShim(
          deno,
          absRoot,
          absEntry,
          `${lib}/${name}`,
          opts.codeSplitting ?? true,
          opts.minify ?? true,
        ),
        v8Flags: opts.v8Flags ?? DEFAULT_SHIM_V8_FLAGS,
        spare: opts.spare,
        ...(opts.sharedPods !== undefined ? { sharedPods: opts.sharedPods } : {}),
      });
    if (mode === "bundle") await Deno.mkdir(denoDir, { recursive: true });
    const part = `${path}.${Deno.pid}.part`;
    await Deno.writeTextFile(part, text, { mode: 0o755 });
    await Deno.chmod(part, 0o755);
    await Deno.rename(part, path);
    written.push(path);
  }
  return written;
}

/**
 * The install mode `SKIFF_INSTALL_MODE` asks for (`bundle` or `source`), default `bundle`.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { installModeFromEnv } from "./install.ts";
 * strictEqual(["bundle", "source"].includes(installModeFromEnv()), true);
 * ```
 */
export function installModeFromEnv(): InstallMode {
  const v = Deno.env.get("SKIFF_INSTALL_MODE") ?? "bundle";
  if (v !== "bundle" && v !== "source") {
    throw new TypeError(`SKIFF_INSTALL_MODE="${v}": expected "bundle" or "source"`);
  }
  return v;
}
