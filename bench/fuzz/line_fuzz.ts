import type { TtrpcFuzzStats } from "./ttrpc_fuzz.ts";
export function fuzzLines(
  _o: { path: string; chunks: number; seed: number; http: boolean; log?: (l: string) => void },
): Promise<TtrpcFuzzStats> {
  throw new Error("todo");
}
