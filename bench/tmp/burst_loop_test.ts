import { containerdVersions } from "../../sdk/testing/containerd.ts";
import { installExampleShims } from "../../sdk/install/examples.ts";
import {
  alive,
  eventually,
  kit,
  serverOf,
  servingHandoff,
  servingOrigin,
  uid,
} from "../../tests/_spare.ts";

Deno.test("burst loop", async () => {
  const v = containerdVersions().filter((v) => v.version.startsWith("2.4"))[0]!;
  const prefix = await Deno.makeTempDir({ prefix: "skiff-bl-" });
  await installExampleShims({
    prefix,
    shims: { "containerd-shim-skiff-runc-shared-v2": "examples/runc/main.ts" },
    sharedPods: 3,
  });
  const runtimes = {
    skiff: { runtimeType: "io.containerd.skiff-runc-shared.v2", binaryDir: `${prefix}/bin` },
  };
  const k = await kit(v.binDir, prefix);
  const c = await k.containerd({ runtimes });
  const ns = "bl";
  try {
    for (let round = 0; round < 6; round++) {
      const burst = Array.from({ length: 6 }, (_, i) => uid(`r${round}b${i}`));
      await Promise.all(
        burst.map((id) => k.run(c, { id, namespace: ns, detach: true, args: ["sleep", "600"] })),
      );
      const servers = await Promise.all(burst.map((id) => serverOf(c, ns, id)));
      const how = await Promise.all(
        burst.map(async (id) =>
          `${await servingOrigin(c, id)}/${await servingHandoff(c, id) || "-"}`
        ),
      );
      console.log(`round ${round}: ${new Set(servers).size} servers: ${how.join(" ")}`);
      for (const id of burst) {
        await c.ctr(["tasks", "kill", "-s", "KILL", id], { namespace: ns });
      }
      await new Promise((r) => setTimeout(r, 500));
      for (const id of burst) {
        await c.ctr(["tasks", "delete", "-f", id], { namespace: ns });
        await c.ctr(["containers", "delete", id], { namespace: ns });
      }
      for (const pid of new Set(servers)) {
        await eventually("exit", () => alive(pid) ? undefined : true);
      }
    }
  } finally {
    await k.close();
  }
});
