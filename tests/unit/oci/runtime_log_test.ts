// runtime_log.ts: the last error a runtime wrote to its log, in runc's JSON or logfmt lines.
import assert from "node:assert/strict";
import {
  jsonObjects,
  lastErrorEntry,
  lastLogError,
  logSize,
} from "../../../sdk/oci/runtime_log.ts";

Deno.test("lastErrorEntry: the last error, fatal or panic of JSON lines; warnings do not count", () => {
  const log = [
    '{"level":"error","msg":"first","time":"t"}',
    '{"level":"warning","msg":"not this"}',
    '{"level":"fatal","msg":"container_linux.go:380: starting container process caused: exec: \\"nope\\""}',
    '{"level":"info","msg":"later info"}',
  ].join("\n");
  assert.equal(
    lastErrorEntry(log),
    'container_linux.go:380: starting container process caused: exec: "nope"',
  );
  assert.equal(lastErrorEntry('{"level":"info","msg":"fine"}'), undefined);
});

Deno.test("lastErrorEntry: logfmt lines, with escaped quotes", () => {
  const log = 'time="t" level=error msg="a \\"quoted\\" thing"\nlevel=info msg="ok"';
  assert.equal(lastErrorEntry(log), 'a "quoted" thing');
});

Deno.test("jsonObjects: objects spread over lines, braces in strings, garbage between", () => {
  const text = 'noise {"a":1,"s":"{not a brace}"} more\n{"b":\n2} {broken';
  assert.deepEqual([...jsonObjects(text)], [{ a: 1, s: "{not a brace}" }, { b: 2 }]);
});

Deno.test("lastLogError reads from an offset; a missing log is undefined, size 0", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const path = `${dir}/log.json`;
    assert.equal(await logSize(path), 0);
    assert.equal(await lastLogError(path, 0), undefined);
    await Deno.writeTextFile(path, '{"level":"error","msg":"old"}\n');
    const offset = await logSize(path);
    await Deno.writeTextFile(path, '{"level":"error","msg":"new"}\n', { append: true });
    assert.equal(await lastLogError(path, offset), "new");
    assert.equal(await lastLogError(path, 0), "new");
    // A log truncated below the offset is read from its start.
    await Deno.writeTextFile(path, '{"level":"error","msg":"x"}');
    assert.equal(await lastLogError(path, offset + 100), "x");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
