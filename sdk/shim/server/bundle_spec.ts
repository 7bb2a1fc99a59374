/**
 * What the base class reads from a bundle's OCI `config.json` itself.
 *
 * @module
 */

/**
 * Whether the container has no pid namespace of its own (it shares the host's, or joins
 * another's by path). Its processes then do not die with its init, so the shim kills them when
 * the init exits, as the Go runc shim does. An unreadable spec counts as shared: killing what is
 * already dead is harmless, leaving processes behind is not.
 *
 * @param bundle the bundle directory
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { sharesPidNamespace } from "./bundle_spec.ts";
 * const bundle = Deno.makeTempDirSync();
 * const spec = (namespaces: object[]) => JSON.stringify({ linux: { namespaces } });
 * Deno.writeTextFileSync(`${bundle}/config.json`, spec([{ type: "pid" }]));
 * strictEqual(await sharesPidNamespace(bundle), false); // its own: the init's exit ends them all
 * Deno.writeTextFileSync(`${bundle}/config.json`, spec([{ type: "pid", path: "/proc/1/ns/pid" }]));
 * strictEqual(await sharesPidNamespace(bundle), true); // then: runtime.kill(id, 9, { all: true })
 * Deno.removeSync(bundle, { recursive: true });
 * ```
 */
export async function sharesPidNamespace(bundle: string): Promise<boolean> {
  try {
    const spec = JSON.parse(await Deno.readTextFile(`${bundle}/config.json`)) as {
      linux?: { namespaces?: { type?: string; path?: string }[] };
    };
    const own = spec.linux?.namespaces?.some((ns) => ns.type === "pid" && !ns.path);
    return !own;
  } catch {
    return true;
  }
}
