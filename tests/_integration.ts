/**
 * Gate for tests that need root, real binaries or a real containerd.
 *
 * A missing requirement skips the test with a message that says exactly what is missing;
 * with SKIFF_REQUIRE_INTEGRATION=1 (as CI sets it) the same condition fails the test instead,
 * so CI can never pass on skipped integration tests.
 */
export interface Requirements {
  /** Needs uid 0. */
  root?: boolean;
  /** Executables that must be found on PATH or at the given absolute paths. */
  binaries?: string[];
  /** Extra checks: return a message when unmet, undefined when met. */
  check?: () => string | undefined;
}

/** Returns what is missing, or an empty list. */
export function missing(req: Requirements): string[] {
  const out: string[] = [];
  if (req.root && Deno.uid() !== 0) out.push("root (uid 0)");
  for (const bin of req.binaries ?? []) {
    if (!findExecutable(bin)) out.push(`executable "${bin}"`);
  }
  const extra = req.check?.();
  if (extra) out.push(extra);
  return out;
}

/** Finds an executable on PATH (or checks an absolute path). */
export function findExecutable(name: string): string | undefined {
  const candidates = name.includes("/")
    ? [name]
    : (Deno.env.get("PATH") ?? "").split(":").filter(Boolean).map((d) => `${d}/${name}`);
  for (const c of candidates) {
    try {
      const st = Deno.statSync(c);
      if (st.isFile && ((st.mode ?? 0) & 0o111) !== 0) return c;
    } catch { /* not here */ }
  }
  return undefined;
}

/** True when skips must become failures. */
export const requireIntegration: boolean = Deno.env.get("SKIFF_REQUIRE_INTEGRATION") === "1";

/**
 * Registers an integration test. Unmet requirements skip it (printing why), or fail it
 * when SKIFF_REQUIRE_INTEGRATION=1.
 */
export function integrationTest(
  name: string,
  req: Requirements,
  fn: (t: Deno.TestContext) => Promise<void>,
  opts: { sanitizeOps?: boolean; sanitizeResources?: boolean } = {},
): void {
  const lacking = missing(req);
  if (lacking.length > 0 && !requireIntegration) {
    console.warn(`SKIP ${name}: needs ${lacking.join(", ")}`);
    Deno.test({ name: `${name} (skipped: needs ${lacking.join(", ")})`, ignore: true, fn() {} });
    return;
  }
  Deno.test({
    name,
    sanitizeOps: opts.sanitizeOps ?? false,
    sanitizeResources: opts.sanitizeResources ?? false,
    async fn(t) {
      if (lacking.length > 0) {
        throw new Error(
          `SKIFF_REQUIRE_INTEGRATION=1 but this test needs ${lacking.join(", ")}`,
        );
      }
      await fn(t);
    },
  });
}

/** True when something (file, socket, dir, dangling link) exists at `path`. */
export async function exists(path: string): Promise<boolean> {
  return await Deno.lstat(path).then(() => true, () => false);
}
