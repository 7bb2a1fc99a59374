/**
 * The Prometheus material in docs/operations.md is checked with promtool: the scrape config,
 * every example query, and the alert rule, which must fire for a runtime whose creates succeed
 * less often than runc's and stay quiet for an equal one or one with too few creates to judge.
 */
import assert from "node:assert/strict";
import { integrationTest } from "../_integration.ts";

const DOC = new URL("../../docs/operations.md", import.meta.url);

function block(doc: string, lang: string, startsWith: string): string {
  const re = new RegExp("```" + lang + "\\n([\\s\\S]*?)```", "g");
  for (const m of doc.matchAll(re)) if (m[1]!.startsWith(startsWith)) return m[1]!;
  throw new Error(`docs/operations.md has no ${lang} block starting with "${startsWith}"`);
}

async function promtool(dir: string, ...args: string[]): Promise<void> {
  const out = await new Deno.Command("promtool", {
    args,
    cwd: dir,
    stdout: "piped",
    stderr: "piped",
  })
    .output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  assert.ok(out.success, `promtool ${args.join(" ")}:\n${text}`);
}

const SERIES = (runtime: string, ok: string, error: string) => `
      - series: 'skiff_node_task_create_requests_total{runtime="${runtime}",result="ok"}'
        values: '${ok}'
      - series: 'skiff_node_task_create_requests_total{runtime="${runtime}",result="error"}'
        values: '${error}'`;

integrationTest(
  "docs/operations.md: scrape config, queries and alert rule pass promtool",
  { binaries: ["promtool"] },
  async () => {
    const doc = await Deno.readTextFile(DOC);
    const dir = await Deno.makeTempDir({ prefix: "skiff-ops-docs-" });
    try {
      await Deno.writeTextFile(`${dir}/prometheus.yml`, block(doc, "yaml", "scrape_configs:"));
      await promtool(dir, "check", "config", "prometheus.yml");

      // Each query of the PromQL block, as a recording rule so promtool parses it.
      const queries = block(doc, "promql", "#").split(/\n\s*\n/).map((q) =>
        q.split("\n").filter((l) => !l.startsWith("#")).join(" ").trim()
      ).filter(Boolean);
      assert.ok(queries.length >= 5, `found ${queries.length} queries`);
      await Deno.writeTextFile(
        `${dir}/queries.yml`,
        "groups:\n  - name: q\n    rules:\n" +
          queries.map((q, i) => `      - record: q${i}\n        expr: ${JSON.stringify(q)}\n`)
            .join(""),
      );
      await promtool(dir, "check", "rules", "queries.yml");

      await Deno.writeTextFile(`${dir}/rules.yml`, block(doc, "yaml", "groups:"));
      await promtool(dir, "check", "rules", "rules.yml");
      // Per minute: runc 10 ok; runsc 8 ok and 2 errors (80%); kata 10 ok (100%);
      // "rare" fails everything but creates 15 in 30 minutes, below the 20 needed.
      await Deno.writeTextFile(
        `${dir}/rules_test.yml`,
        `rule_files: [rules.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:${SERIES("io.containerd.skiff-runc.v2", "0+10x60", "0+0x60")}${
          SERIES("io.containerd.skiff-runsc.v2", "0+8x60", "0+2x60")
        }${SERIES("io.containerd.kata.v2", "0+10x60", "0+0x60")}${
          SERIES("io.containerd.rare.v1", "0+0x60", "0+0.5x60")
        }
    alert_rule_test:
      - eval_time: 10m
        alertname: SkiffRuntimeCreateSuccessBelowRunc
        exp_alerts: []
      - eval_time: 50m
        alertname: SkiffRuntimeCreateSuccessBelowRunc
        exp_alerts:
          - exp_labels: { severity: warning, runtime: io.containerd.skiff-runsc.v2 }
`,
      );
      // promtool compares annotations too; the rule's own are checked by taking them as given.
      const rules = block(doc, "yaml", "groups:");
      const summary = /summary: "(.*)"/.exec(rules)![1]!.replaceAll(
        "{{ $labels.runtime }}",
        "io.containerd.skiff-runsc.v2",
      ).replaceAll("{{ $value | humanizePercentage }}", "80%");
      const description = /description: "(.*)"/.exec(rules)![1]!;
      await Deno.writeTextFile(
        `${dir}/rules_test.yml`,
        (await Deno.readTextFile(`${dir}/rules_test.yml`)) +
          `            exp_annotations:\n              summary: ${JSON.stringify(summary)}\n` +
          `              description: "${description}"\n`,
      );
      await promtool(dir, "test", "rules", "rules_test.yml");
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
);
