/**
 * Sets a server's extensions up and joins their hooks into one set, so that the server calls
 * each hook once, whatever the number of extensions (`./extension.ts`).
 *
 * @module
 */

import type { ServerExtension, ServerHooks, ServerSetup, ServerState } from "./extension.ts";

/** The joined hooks: every part present, each calling the extensions' in their order. */
export interface ComposedHooks {
  /** Every extension's interceptors, in order. */
  interceptors: NonNullable<ServerHooks["interceptors"]>;
  /** Every extension's event observer. */
  onEvent: NonNullable<ServerHooks["onEvent"]>;
  /** Every extension's `onServing`, one after the other. */
  onServing(state: ServerState): Promise<void>;
  /** Every extension's `onShutdown`; a failure is logged and the next still runs. */
  onShutdown(): Promise<void>;
}

/**
 * Sets each extension up, in order. An extension whose setup fails is logged and left out: a
 * feature that cannot start must not keep the shim from serving its containers.
 *
 * @example Usage
 * ```ts ignore
 * const hooks = await composeExtensions(options.extensions ?? [], setup);
 * const server = new TtrpcServer({ interceptors: hooks.interceptors });
 * ```
 */
export async function composeExtensions(
  extensions: readonly ServerExtension[],
  setup: ServerSetup,
): Promise<ComposedHooks> {
  const all: { name: string; hooks: ServerHooks }[] = [];
  for (const ext of extensions) {
    try {
      const hooks = await ext.setup(setup);
      if (hooks) all.push({ name: ext.name, hooks });
    } catch (e) {
      setup.logger.warn("server extension failed to set up", {
        extension: ext.name,
        error: (e as Error).message,
      });
    }
  }
  const observers = all.flatMap((a) => a.hooks.onEvent ? [a.hooks.onEvent] : []);
  const each = async (call: (h: ServerHooks) => Promise<void> | void, what: string) => {
    for (const { name, hooks } of all) {
      try {
        await call(hooks);
      } catch (e) {
        setup.logger.warn(`server extension failed ${what}`, {
          extension: name,
          error: (e as Error).message,
        });
      }
    }
  };
  return {
    interceptors: all.flatMap((a) => a.hooks.interceptors ?? []),
    onEvent: (event) => {
      for (const observe of observers) observe(event);
    },
    onServing: (state) => each((h) => h.onServing?.(state), "once serving"),
    onShutdown: () => each((h) => h.onShutdown?.(), "on shutdown"),
  };
}
