// cli.ts, `initExit: "wait"` (runsc): a live upgrade replaces the process image only when the
// adapter is `settled`. Deno's reader of a command's stdout reads ahead, so once `runsc wait`
// has printed its answer, that answer is in this code's memory, even while the command still
// runs for a moment before it exits: an upgrade then would hand the next code a pipe whose
// answer is gone ("ended without an answer", status 255). A shell script stands in for runsc.
import assert from "node:assert/strict";
import { OciRuntimeCli } from "../../../sdk/oci/cli.ts";

async function exists(path: string): Promise<boolean> {
  return await Deno.stat(path).then(() => true, () => false);
}

async function until(what: string, probe: () => Promise<boolean> | boolean): Promise<void> {
  for (let i = 0; i < 500; i++) {
    if (await probe()) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`gave up waiting for ${what}`);
}

Deno.test("OciRuntimeCli.settled: false from the moment `wait` has printed its answer until it is delivered", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const binary = `${dir}/fake-runsc`;
    // `wait`: answers, then lingers (as a slow machine lets a command linger after its write)
    // until told to exit.
    await Deno.writeTextFile(
      binary,
      `#!/bin/sh
case "$1" in
  wait)
    touch "${dir}/started"
    while [ ! -e "${dir}/answer" ]; do sleep 0.01; done
    echo '{"exitStatus":3}'
    touch "${dir}/printed"
    while [ ! -e "${dir}/exit" ]; do sleep 0.01; done
    exit 0 ;;
esac
exit 1
`,
    );
    await Deno.chmod(binary, 0o755);
    const cli = new OciRuntimeCli({ binary, initExit: "wait" });
    // A started init whose exit `runsc wait` reports.
    const init = cli.resumeProcess("c1", { execId: "", pid: 4242, created: false });
    assert.ok(init.exited, "the init's exit is the runtime's to report");
    let status: number | undefined;
    void init.exited!.then((s) => status = s);
    await until("wait to start", () => exists(`${dir}/started`));
    assert.equal(cli.settled, true, "a wait that has not answered holds nothing");

    await Deno.writeTextFile(`${dir}/answer`, "");
    await until("the answer to be printed", () => exists(`${dir}/printed`));
    // Some macrotasks: Deno's pipe reader takes the answer in meanwhile.
    for (let i = 0; i < 20; i++) await new Promise((r) => setTimeout(r, 5));
    assert.equal(status, undefined, "not delivered while the command runs");
    assert.equal(
      cli.settled,
      false,
      "the answer is read into this code: an upgrade now would lose it",
    );

    await Deno.writeTextFile(`${dir}/exit`, "");
    await until("the exit to be delivered", () => status !== undefined);
    assert.equal(status, 3);
    assert.equal(cli.settled, true, "delivered: nothing in hand");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
