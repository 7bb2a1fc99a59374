/**
 * A small seeded PRNG (mulberry32) for the fuzzers: the same seed gives the same bytes, so a
 * failing run is reproduced by passing its seed again.
 *
 * @example Usage
 * ```ts
 * import { Rng } from "./rng.ts";
 * const a = new Rng(7), b = new Rng(7);
 * console.assert(a.int(1000) === b.int(1000));
 * ```
 *
 * @module
 */

/** Deterministic random numbers from a 32-bit seed. */
export class Rng {
  #state: number;

  /** @param seed any integer; only its low 32 bits count */
  constructor(seed: number) {
    this.#state = seed >>> 0;
  }

  /** A uniform u32. */
  u32(): number {
    let t = (this.#state = (this.#state + 0x6d2b79f5) >>> 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  }

  /** A uniform integer in [0, n). */
  int(n: number): number {
    return Math.floor((this.u32() / 0x1_0000_0000) * n);
  }

  /** A uniform integer in [lo, hi]. */
  range(lo: number, hi: number): number {
    return lo + this.int(hi - lo + 1);
  }

  /** True with probability `p`. */
  chance(p: number): boolean {
    return this.u32() / 0x1_0000_0000 < p;
  }

  /** One of `items`. */
  pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)]!;
  }

  /** `n` random bytes. */
  bytes(n: number): Uint8Array {
    const out = new Uint8Array(n);
    for (let i = 0; i < n; i += 4) {
      const v = this.u32();
      for (let j = 0; j < 4 && i + j < n; j++) out[i + j] = (v >>> (8 * j)) & 0xff;
    }
    return out;
  }
}
