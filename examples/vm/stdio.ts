/**
 * A guest process's stdio carried between containerd's ends (the seam's web streams) and the
 * agent's unary stream calls: ReadStdout/ReadStderr long polls into the writables until `eof`,
 * the stdin readable into WriteStdin, then CloseStdin once containerd's stdin has ended (after
 * CloseIO), so the guest process reads end of file after every byte.
 *
 * @module
 */

import type { Client } from "@connectrpc/connect";
import type { Agent } from "./proto/agent_pb.ts";
import type { RuntimeStreams } from "@skiff/shim/seam";
import type { AgentGate } from "./gate.ts";

/** Which streams the agent should give the process, from the streams containerd asked for. */
export function wanted(
  s: RuntimeStreams,
  terminal: boolean,
): { stdin: boolean; stdout: boolean; stderr: boolean; terminal: boolean } {
  return { stdin: !!s.stdin, stdout: !!s.stdout, stderr: !!s.stderr, terminal };
}

/**
 * Copies the process's stdio until each stream ends (or the agent goes away).
 *
 * @param agent the agent's client
 * @param containerId the container
 * @param execId the exec ("" for the init)
 * @param s containerd's ends
 * @param onEnd told why a stream's copy ended early (an error), for the shim's log
 * @param gate pauses the output's long polls for a live upgrade
 */
export function pumpStdio(
  agent: Client<typeof Agent>,
  containerId: string,
  execId: string,
  s: RuntimeStreams,
  onEnd: (stream: string, e: unknown) => void = () => {},
  gate?: Pick<AgentGate, "open">,
): void {
  const req = { containerId, execId };
  const end = (stream: string) => (e: unknown) => onEnd(stream, e);
  const open = () => gate?.open() ?? Promise.resolve();
  if (s.stdout) void pumpOut((r) => agent.readStdout(r), req, s.stdout, end("stdout"), open);
  if (s.stderr) void pumpOut((r) => agent.readStderr(r), req, s.stderr, end("stderr"), open);
  if (s.stdin) void pumpIn(agent, req, s.stdin, end("stdin"));
}

async function pumpOut(
  read: (r: { containerId: string; execId: string }) => Promise<{ data: Uint8Array; eof: boolean }>,
  req: { containerId: string; execId: string },
  into: WritableStream<Uint8Array>,
  onError: (e: unknown) => void,
  open: () => Promise<void>,
): Promise<void> {
  const w = into.getWriter();
  try {
    for (;;) {
      // Paused for a live upgrade: the agent answers a pending read empty (Release).
      await open();
      const r = await read(req);
      if (r.eof) break;
      if (r.data.length > 0) await w.write(r.data);
    }
  } catch (e) {
    // The VM or containerd's end went away: the output ends here (logged: it may not have).
    onError(e);
  }
  await w.close().catch(() => {});
}

async function pumpIn(
  agent: Client<typeof Agent>,
  req: { containerId: string; execId: string },
  from: ReadableStream<Uint8Array>,
  onError: (e: unknown) => void,
): Promise<void> {
  try {
    for await (const data of from) await agent.writeStdin({ ...req, data });
    await agent.closeStdin(req);
  } catch (e) {
    // The process or the VM is gone: nobody reads its stdin any more (logged: it may not be).
    onError(e);
  }
}
