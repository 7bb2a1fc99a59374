/**
 * A guest process's terminal: runc (`--console-socket`) creates the pty in the container and
 * sends its master to the agent, which then plays the part of containerd's runc shim's console
 * copy: the master's output is the process's stdout (there is no stderr), the host's stdin is
 * written into it, the host's ResizePty sets its window size.
 *
 * Two ends follow the Go shim: when the host's stdin ends (CloseIO and the client's close), the
 * console is closed; when the process exits, the console is shut down once it holds nothing
 * more to read, so that a background process keeping the terminal open does not hold its
 * output open (containerd's shim shuts its epoll console down at the exit).
 *
 * @module
 */

import { ConsoleSocket, type Pty } from "@skiff/shim/linux";

/** How long the agent waits for the master once runc has finished (containerd's shim: 30 s). */
const MASTER_TIMEOUT_MS = 30_000;
/** After the exit: how long the output may end by itself (the last slave closing) first. */
const EXIT_GRACE_MS = 1_000;
/** Between two looks at what the master still holds after the exit. */
const DRAIN_POLL_MS = 10;

/** A console socket runc is about to connect to, with the master it will send. */
export class ConsoleListener {
  /** The socket path, for `runc create/exec --console-socket`. */
  readonly path: string;
  #socket: ConsoleSocket;
  #abort = new AbortController();
  #received: Promise<Pty>;

  private constructor(socket: ConsoleSocket) {
    this.#socket = socket;
    this.path = socket.path;
    // Accepted concurrently with runc, which connects while it creates the process.
    this.#received = socket.receiveMaster(this.#abort.signal);
    this.#received.catch(() => {});
  }

  /**
   * Listens in a new directory under `dir` (the agent's state: short paths, the guest's tmpfs).
   *
   * @param dir where the socket's directory is made
   */
  static async open(dir: string): Promise<ConsoleListener> {
    return new ConsoleListener(await ConsoleSocket.create(dir));
  }

  /**
   * The master runc sent; call once runc has finished. Closes the socket either way.
   *
   * @param what the process, for the error
   * @throws {Error} when no master came within 30 s
   */
  async master(what: string): Promise<Pty> {
    const timer = setTimeout(() => this.#abort.abort(), MASTER_TIMEOUT_MS);
    try {
      return await this.#received;
    } catch (e) {
      throw new Error(`${what}: no terminal from runc: ${e instanceof Error ? e.message : e}`);
    } finally {
      clearTimeout(timer);
      await this.close();
    }
  }

  /** Stops listening and removes the socket; idempotent. */
  async close(): Promise<void> {
    this.#abort.abort();
    await this.#socket.close().catch(() => {});
  }
}

/** A terminal as {@linkcode shutdownAtExit} sees it. */
export interface OpenTerminal {
  /** The master. */
  pty: Pty;
  /** Whether the master is still open (closed by CloseIO or Delete meanwhile). */
  open(): boolean;
  /** Closes the master. */
  close(): Promise<void>;
}

/**
 * Ends a terminal's output after its process exited, as containerd's shim does: the output may
 * end by itself within a grace (the last holder of the terminal closed it); if it does not (a
 * background process holds the terminal), the master is closed once it has nothing more to
 * read (what the agent already read stays for the host).
 *
 * @param t the terminal
 * @param outputEnded resolves when the output reached end of file
 */
export async function shutdownAtExit(t: OpenTerminal, outputEnded: Promise<void>): Promise<void> {
  let ended = false;
  void outputEnded.then(() => ended = true);
  await Promise.race([outputEnded, sleep(EXIT_GRACE_MS)]);
  while (!ended && t.open() && t.pty.unread() > 0) await sleep(DRAIN_POLL_MS);
  if (!ended) await t.close();
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
