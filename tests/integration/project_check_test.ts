// `deno task check` in CI: formatting, lint, type check, doc lint, generated protobuf code up to
// date with proto/src, and `deno publish --dry-run` (JSR: no slow types).
import assert from "node:assert/strict";
import { integrationTest } from "../_integration.ts";

integrationTest(
  "deno task check passes (fmt, lint, check, doc lint, proto/gen fresh, publish dry run)",
  { binaries: ["protoc"] },
  async () => {
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["task", "check"],
      cwd: new URL("../..", import.meta.url).pathname,
      stdout: "piped",
      stderr: "piped",
    }).output();
    const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
    assert.equal(out.code, 0, text.slice(-4000));
    assert.match(text, /proto\/gen and examples\/vm\/proto are up to date/);
    assert.match(text, /deno doc --lint: clean/);
  },
);
