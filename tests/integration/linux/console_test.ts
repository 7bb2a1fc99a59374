import assert from "node:assert/strict";
import { integrationTest } from "../../_integration.ts";
import { ConsoleSocket } from "../../../sdk/linux/console.ts";
import { preloadLibc } from "../../../sdk/linux/libc.ts";
import { Reaper } from "../../../sdk/linux/reaper.ts";
import { busyboxBundle, deadline, run } from "../../_linux_support.ts";

preloadLibc(); // bound once per file, so resource sanitizers see no new library

integrationTest(
  "ConsoleSocket.receiveMaster() gets runc's pty: output, resize and exit status",
  { root: true, binaries: ["runc", "/bin/busybox"] },
  async () => {
    const reaper = Reaper.start();
    const bundle = await busyboxBundle({ args: ["sh"], terminal: true });
    const socket = await ConsoleSocket.create();
    try {
      const master = socket.receiveMaster();
      await run(
        bundle.runc(
          [
            "create",
            "--bundle",
            bundle.dir,
            "--console-socket",
            socket.path,
            "--pid-file",
            `${bundle.dir}/init.pid`,
            bundle.id,
          ],
          { stdin: "null", stdout: "null", stderr: "piped" },
        ),
        "runc create",
      );
      const pty = await deadline(master, 20_000, "the pty master");
      try {
        const pid = Number(await Deno.readTextFile(`${bundle.dir}/init.pid`));
        // The init waits for `runc start`, so subscribing now misses nothing.
        const exited = new Promise<number>((resolve) => {
          reaper.onExit((e) => e.pid === pid && resolve(e.status));
        });
        pty.resize(100, 40);
        await run(bundle.runc(["start", bundle.id], { stderr: "piped" }), "runc start");
        await pty.write(new TextEncoder().encode('stty size\necho h""i\nexit 5\n'));
        let text = "";
        const decoder = new TextDecoder();
        for await (const chunk of pty.readable) text += decoder.decode(chunk, { stream: true });
        // The terminal echoes the input too, so match output lines only.
        assert.match(text, /(^|\n)40 100\r\n/, `stty size output in ${JSON.stringify(text)}`);
        assert.match(text, /(^|\n)hi\r\n/, `echo output in ${JSON.stringify(text)}`);
        assert.equal(await deadline(exited, 20_000, `exit of container init ${pid}`), 5);
      } finally {
        await pty.close();
      }
    } finally {
      await socket.close();
      await bundle.cleanup();
      reaper.close();
    }
  },
);

Deno.test(
  "ConsoleSocket.receiveMaster() rejects on abort and close() removes the socket",
  async () => {
    const socket = await ConsoleSocket.create();
    const controller = new AbortController();
    const pending = socket.receiveMaster(controller.signal);
    controller.abort(new Error("stop waiting"));
    await assert.rejects(pending, /stop waiting/);
    const second = socket.receiveMaster();
    await socket.close();
    await assert.rejects(second, /console socket is closed/);
    await assert.rejects(Deno.stat(socket.path), Deno.errors.NotFound);
  },
);
