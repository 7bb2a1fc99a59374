/**
 * Generates `gen/wire/shim_wire.ts`: the wire tables (`WireMessageSpec`, wire_table.ts) of every message
 * the shim server decodes or encodes (the Task API, the task events and the envelope they travel
 * in, ttrpc's own request and response, `google.rpc.Status`, the cgroup metrics `Stats`
 * returns, runc's `ProcessDetails` and `CheckpointOptions`), read from the descriptors protobuf-es generated from the same `.proto` sources. Run
 * by `proto/gen.sh` after protoc, with the generated directory as its argument; the output is
 * deterministic, so `gen.sh --check` catches a stale table.
 *
 * @module
 */

import type { DescEnum, DescField, DescMessage, DescService } from "@bufbuild/protobuf";
import type { WireFieldSpec } from "./wire_table.ts";

/** Writes `<dir>/wire/shim_wire.ts` from the protobuf-es files generated into `dir`. */
async function generate(dir: string): Promise<void> {
  const gen = (p: string) => import(`${new URL(`file://${dir}/`).href}${p}`);

  const [taskV2, events, eventsService, request, status, cgv1, cgv2, runc, task] = await Promise
    .all([
      gen("containerd/task/v2/shim_pb.ts"),
      gen("containerd/events/task_pb.ts"),
      gen("containerd/services/events/ttrpc/v1/events_pb.ts"),
      gen("ttrpc/request_pb.ts"),
      gen("google/rpc/status_pb.ts"),
      gen("io/containerd/cgroups/v1/metrics_pb.ts"),
      gen("io/containerd/cgroups/v2/metrics_pb.ts"),
      gen("containerd/runc/v1/oci_pb.ts"),
      gen("containerd/types/task/task_pb.ts"),
    ]);
  // Enums the server writes, as value tables: the generated enum lives in a descriptor module
  // the server does not load, and a number copied by hand could drift from the .proto.
  const enums: [string, DescEnum][] = [["TASK_STATUS", task.StatusSchema]];

  const services: [string, DescService][] = [
    ["TASK_SERVICE", taskV2.Task],
    ["EVENTS_SERVICE", eventsService.Events],
  ];
  const roots: DescMessage[] = [
    ...Object.values(events).filter((x) => (x as DescMessage).kind === "message") as DescMessage[],
    request.RequestSchema,
    request.ResponseSchema,
    status.StatusSchema,
    cgv1.MetricsSchema,
    cgv2.MetricsSchema,
    // Pids' exec details and Checkpoint's options (runc's, which containerd sends every shim).
    runc.ProcessDetailsSchema,
    runc.CheckpointOptionsSchema,
  ];

  const messages = new Map<string, DescMessage>();
  function walk(m: DescMessage): void {
    if (messages.has(m.typeName)) return;
    if (m.oneofs.length > 0) {
      throw new Error(`${m.typeName}: oneofs are not supported by wire_table`);
    }
    messages.set(m.typeName, m);
    for (const f of m.fields) {
      if (f.fieldKind === "message" || (f.fieldKind === "list" && f.listKind === "message")) {
        walk(f.message);
      } else if (f.fieldKind === "map" && f.mapKind === "message") walk(f.message);
    }
  }
  for (const [, s] of services) for (const m of s.methods) walk(m.input), walk(m.output);
  for (const m of roots) walk(m);

  function field(f: DescField): WireFieldSpec {
    // WireRegistry.fieldNames derives the proto name from the local name.
    if (f.localName.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`) !== f.name) {
      throw new Error(
        `${f.parent.typeName}.${f.name}: its local name ${f.localName} does not map back`,
      );
    }
    if (f.presence === 1 && f.fieldKind !== "message") {
      throw new Error(`${f.parent.typeName}.${f.name}: explicit presence is not supported`);
    }
    switch (f.fieldKind) {
      case "scalar":
        return [f.number, f.localName, "s", f.scalar];
      case "enum":
        return [f.number, f.localName, "s", 5];
      case "message":
        return [f.number, f.localName, "m", f.message.typeName];
      case "list":
        if (f.listKind === "message") return [f.number, f.localName, "lm", f.message.typeName];
        return [f.number, f.localName, "ls", f.listKind === "enum" ? 5 : f.scalar, f.packed];
      case "map":
        if (f.mapKind === "message") {
          return [f.number, f.localName, "mm", f.mapKey, f.message.typeName];
        }
        return [f.number, f.localName, "ms", f.mapKey, f.mapKind === "enum" ? 5 : f.scalar];
    }
  }

  /** Import path → alias of the module protobuf-es generated a message's type in. */
  const files = new Map<string, string>();
  /** The TypeScript type protobuf-es generated for a message, as `alias.Name`. */
  function tsType(m: DescMessage): string {
    const from = importOf(m.file.name);
    let alias = files.get(from);
    if (alias === undefined) files.set(from, alias = `p${files.size}`);
    const pkg = m.file.proto.package;
    const local = pkg ? m.typeName.slice(pkg.length + 1) : m.typeName;
    return `${alias}.${local.replaceAll(".", "_")}`;
  }
  function importOf(file: string): string {
    return file.startsWith("google/protobuf/") ? "@bufbuild/protobuf/wkt" : `../${file}_pb.ts`;
  }

  const sorted = [...messages.values()].sort((a, b) => a.typeName < b.typeName ? -1 : 1);
  const out: string[] = [];
  const types = sorted.flatMap((m) => [
    `  /** \`${m.typeName}\` */`,
    `  "${m.typeName}": ${tsType(m)};`,
  ]);
  out.push(
    "// Code generated by proto/gen_wire.ts from the descriptors in this directory. DO NOT EDIT.",
    "// The wire tables of every message the shim server decodes or encodes (see wire_table.ts).",
    "",
    `import type { WireMessageSpec } from "../../wire_table.ts";`,
    ...[...files].map(([from, alias]) => `import type * as ${alias} from "${from}";`),
    "",
    "/** Every message with a table, by full type name, and its protobuf-es type. */",
    "export interface ShimWireTypes {",
    ...types,
    "}",
    "",
    "/** The tables, sorted by type name. */",
    "export const SHIM_WIRE_TABLES: readonly WireMessageSpec[] = [",
  );
  for (const m of sorted) {
    const fields = [...m.fields].sort((a, b) => a.number - b.number).map(field);
    out.push(`  {`, `    typeName: "${m.typeName}",`, `    fields: [`);
    for (const f of fields) out.push(`      ${JSON.stringify(f).replaceAll(",", ", ")},`);
    out.push(`    ],`, `  },`);
  }
  out.push("];", "");
  for (const [name, s] of services) {
    out.push(
      `/** \`${s.typeName}\`: each method's wire name and its request and response types. */`,
      `export const ${name} = {`,
      `  typeName: "${s.typeName}",`,
      `  methods: {`,
    );
    for (const m of s.methods) {
      out.push(
        `    /** \`${m.name}\` */`,
        `    ${m.localName}: { name: "${m.name}", input: "${m.input.typeName}", output: "${m.output.typeName}" },`,
      );
    }
    out.push(`  },`, `} as const;`, "");
  }
  for (const [name, e] of enums) {
    out.push(
      `/** \`${e.typeName}\`: each value's number, as on the wire. */`,
      `export const ${name} = {`,
      ...e.values.map((v) => `  ${v.localName}: ${v.number},`),
      `} as const;`,
      "",
    );
  }
  await Deno.mkdir(`${dir}/wire`, { recursive: true });
  await Deno.writeTextFile(`${dir}/wire/shim_wire.ts`, out.join("\n"));
}

if (import.meta.main) {
  if (!Deno.args[0]) throw new Error("usage: deno run -A proto/gen_wire.ts <generated dir>");
  await generate(Deno.args[0]);
}
