/**
 * Lean service descriptors: what ttrpc handler contexts and interceptors read of a method (its
 * names, kind and message type names), for services served from wire codecs. The server path
 * must not load protobuf-es's reflection (`tests/unit/project/lean_graph_test.ts`), so these are
 * built from names alone; they are the only hand-built descriptors in the tree, and
 * `tests/unit/ttrpc/lean_descriptor_test.ts` checks them field by field against protobuf-es's
 * real descriptors of every service skiff serves this way.
 *
 * @module
 */

import type { DescMethod, DescService } from "@bufbuild/protobuf";

/** A method as the wire tables name it. */
export interface LeanMethodNames {
  /** The method's wire name (`Create`). */
  name: string;
  /** The request's full type name. */
  input: string;
  /** The response's full type name. */
  output: string;
}

/**
 * A service descriptor carrying names only, and its methods by wire name.
 *
 * @param typeName the service's full name (`containerd.task.v2.Task`)
 * @param methods its unary methods
 * @returns the descriptor and each method's descriptor by wire name
 * @example Usage
 * ```ts
 * import { strictEqual } from "node:assert/strict";
 * import { leanService } from "./lean_descriptor.ts";
 * const { service, methods } = leanService("containerd.task.v2.Task", [
 *   { name: "Create", input: "containerd.task.v2.CreateTaskRequest", output: "containerd.task.v2.CreateTaskResponse" },
 * ]);
 * strictEqual(service.name, "Task");
 * strictEqual(methods.get("Create")?.localName, "create");
 * strictEqual(methods.get("Create")?.parent, service);
 * ```
 */
export function leanService(
  typeName: string,
  methods: readonly LeanMethodNames[],
): { service: DescService; methods: Map<string, DescMethod> } {
  const service = {
    kind: "service",
    typeName,
    name: typeName.slice(typeName.lastIndexOf(".") + 1),
    methods: [] as unknown[],
    method: {} as Record<string, unknown>,
    toString: () => `service ${typeName}`,
  };
  const byName = new Map<string, DescMethod>();
  for (const m of methods) {
    const method = {
      kind: "rpc",
      name: m.name,
      localName: m.name.charAt(0).toLowerCase() + m.name.slice(1),
      parent: service,
      methodKind: "unary",
      input: { kind: "message", typeName: m.input },
      output: { kind: "message", typeName: m.output },
      toString: () => `rpc ${typeName}.${m.name}`,
    };
    service.methods.push(method);
    service.method[method.localName] = method;
    // Names only: the schema fields (file, fields, options) are what this leaves out on purpose.
    byName.set(m.name, method as unknown as DescMethod);
  }
  return { service: service as unknown as DescService, methods: byName };
}
