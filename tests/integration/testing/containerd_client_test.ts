// The typed containerd gRPC client of the testing kit against real containerd 1.6 and 2.4:
// a unary call (Version), a server stream (Events.Subscribe) and the containers service.
import assert from "node:assert/strict";
import { integrationTest } from "../../_integration.ts";
import { containerdVersions, startContainerd } from "../../../sdk/testing/containerd.ts";
import { containerdClient } from "../../../sdk/testing/containerd_client.ts";

for (const v of containerdVersions().filter((v) => /^(1\.6|2\.4)\./.test(v.version))) {
  integrationTest(
    `containerdClient() speaks gRPC to containerd ${v.version}: version, events stream, containers`,
    { root: true },
    async () => {
      const c = await startContainerd({ binDir: v.binDir });
      try {
        const cl = containerdClient(c.address, "skiff-client");
        const ver = await cl.version.version({});
        assert.ok(ver.version.startsWith(v.version), `${ver.version} vs ${v.version}`);

        const abort = new AbortController();
        const topics: string[] = [];
        const seen = (async () => {
          try {
            for await (
              const env of cl.events.subscribe({ filters: ['topic~="/containers/"'] }, {
                signal: abort.signal,
              })
            ) {
              topics.push(env.topic);
              if (topics.includes("/containers/delete")) break;
            }
          } catch (e) {
            if (!abort.signal.aborted) throw e;
          }
        })();
        await new Promise((r) => setTimeout(r, 200)); // the stream is open
        await cl.containers.create({
          container: {
            id: "probe",
            runtime: { name: "io.containerd.runc.v2" },
            spec: {
              typeUrl: "types.containerd.io/opencontainers/runtime-spec/1/Spec",
              value: new TextEncoder().encode("{}"),
            },
            labels: { "skiff.test": "yes" },
            extensions: {},
          },
        });
        const got = await cl.containers.get({ id: "probe" });
        assert.equal(got.container?.labels["skiff.test"], "yes");
        await assert.rejects(cl.containers.get({ id: "missing" }), /not found/);
        await cl.containers.delete({ id: "probe" });
        const timer = setTimeout(() => abort.abort(), 10_000);
        await seen;
        clearTimeout(timer);
        assert.deepEqual(topics, ["/containers/create", "/containers/delete"]);
      } finally {
        await c.stop();
      }
    },
  );
}
