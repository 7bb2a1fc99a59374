/**
 * The host's side of the agent: a typed `skiff.agent.v1.Agent` client over the unix socket QEMU
 * binds the guest's virtio-serial port to (or, in tests, a socket the agent listens on itself).
 *
 * @module
 */

import {
  type Client,
  Code,
  ConnectError,
  createClient,
  type Interceptor,
} from "@connectrpc/connect";
import { createTtrpcTransport, type TtrpcTransport } from "@skiff/shim/ttrpc";
import { Agent, type PingResponse } from "./proto/agent_pb.ts";

/** A connected agent client. */
export interface AgentConnection {
  /** The typed client: `agent.create(...)`, `agent.readStdout(...)`, ... */
  readonly agent: Client<typeof Agent>;
  /** Closes the connection (the guest sees the host go away and waits for the next). */
  close(): Promise<void>;
}

/**
 * Connects to the agent at `socket`, without waiting for it.
 *
 * @param socket the host's end of the port (a unix socket path)
 * @param interceptors client interceptors (the live upgrade's call count)
 * @returns the client and its close
 */
export function connectAgent(socket: string, interceptors: Interceptor[] = []): AgentConnection {
  const transport: TtrpcTransport = createTtrpcTransport({
    path: socket,
    dialTimeoutMs: 5_000,
    interceptors,
  });
  return { agent: createClient(Agent, transport), close: () => transport.close() };
}

/**
 * Pings the agent and waits for the answer: the guest's "agent ready". One connection, one
 * ping: QEMU accepts on the socket as soon as it starts and holds the request until the guest
 * opens its port, so the ping is answered once the agent serves. A ping given up and sent again
 * on a new connection would leave its bytes in the port for the agent to answer into the next
 * connection. Only a failure to connect (the socket not there yet) is tried again.
 *
 * @param socket the host's end of the port
 * @param timeoutMs give up after this long (Code.DeadlineExceeded; Unavailable when the
 *   connection was lost first)
 * @param signal stops waiting (e.g. the VM died)
 * @param interceptors client interceptors
 * @returns the connection and the agent's Ping answer
 */
export async function waitForAgent(
  socket: string,
  timeoutMs: number,
  signal?: AbortSignal,
  interceptors: Interceptor[] = [],
): Promise<{ connection: AgentConnection; ping: PingResponse }> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    signal?.throwIfAborted();
    const connection = connectAgent(socket, interceptors);
    try {
      const ping = await connection.agent.ping({}, {
        timeoutMs: Math.max(1, deadline - performance.now()),
        signal,
      });
      return { connection, ping };
    } catch (e) {
      await connection.close();
      const dialFailed = e instanceof ConnectError && e.code === Code.Unavailable &&
        e.message.includes("dial ttrpc socket");
      if (!dialFailed || performance.now() >= deadline) {
        const why = e instanceof Error ? e.message : String(e);
        const code = dialFailed || e instanceof ConnectError && e.code === Code.DeadlineExceeded
          ? Code.DeadlineExceeded
          : Code.Unavailable;
        throw new ConnectError(`agent at ${socket} did not answer a ping: ${why}`, code);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

/**
 * Reads one output stream of a guest process to its end (long polls until `eof`).
 *
 * @param agent the client
 * @param stream which stream
 * @param containerId the container
 * @param execId the exec (empty: the init)
 * @returns everything the process wrote there
 */
export async function readToEnd(
  agent: Client<typeof Agent>,
  stream: "stdout" | "stderr",
  containerId: string,
  execId = "",
): Promise<Uint8Array> {
  const parts: Uint8Array[] = [];
  for (;;) {
    const req = { containerId, execId };
    const r = stream === "stdout" ? await agent.readStdout(req) : await agent.readStderr(req);
    if (r.eof) break;
    parts.push(r.data);
  }
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}
