/**
 * The shim's OOM score, as containerd's shims set it: one above containerd's own
 * (`oom_score_adj` of `start`'s parent), so that under memory pressure the kernel kills a shim
 * before containerd, and containers (which CRI scores higher still) before their shim.
 *
 * @module
 */

/** The largest `oom_score_adj` the kernel takes. */
export const OOM_SCORE_ADJ_MAX = 1000;

/**
 * `oom_score_adj` of process `pid`.
 *
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { oomScoreAdj } from "./oom_score.ts";
 * strictEqual(Number.isInteger(oomScoreAdj("self")), true);
 * ```
 */
export function oomScoreAdj(pid: number | "self"): number {
  const text = Deno.readTextFileSync(`/proc/${pid}/oom_score_adj`).trim();
  const n = Number(text);
  if (!Number.isInteger(n)) throw new Error(`/proc/${pid}/oom_score_adj: not a number: "${text}"`);
  return n;
}

/**
 * The score a shim server takes: its containerd's plus one, at most {@linkcode OOM_SCORE_ADJ_MAX}.
 *
 * @param containerdPid the process that ran `start` (default: our parent)
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { shimOomScore } from "./oom_score.ts";
 * strictEqual(shimOomScore() <= 1000, true);
 * ```
 */
export function shimOomScore(containerdPid: number = Deno.ppid): number {
  return Math.min(oomScoreAdj(containerdPid) + 1, OOM_SCORE_ADJ_MAX);
}

/**
 * Sets `oom_score_adj` of `pid`. Like containerd's Go code, a permission error is ignored only
 * when we are not root (an unprivileged or user-namespaced containerd cannot lower scores);
 * as root it is an error that names the process and the score.
 *
 * @example Usage
 * ```ts ignore
 * setOomScoreAdj(child.pid, shimOomScore());
 * ```
 */
export function setOomScoreAdj(pid: number | "self", score: number): void {
  try {
    Deno.writeTextFileSync(`/proc/${pid}/oom_score_adj`, String(score));
  } catch (e) {
    if (e instanceof Deno.errors.PermissionDenied && Deno.uid() !== 0) return;
    throw new Error(`set OOM score of pid ${pid} to ${score}: ${(e as Error).message}`);
  }
}
