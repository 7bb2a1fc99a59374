/**
 * Vetting a connection to a spare's or a shared server's socket: its peer must be containerd's
 * user, and its first line a well-formed handoff of the same code, sent at once.
 *
 * @module
 */

import { JsonLines, type SpareHandoff, validHandoff } from "./handoff.ts";
import type { PeerCredentialResolver } from "../../ttrpc/_peer_cred.ts";

/** The pid and socket inode of the connection just accepted, if its peer has our uid. */
export function ourPeer(
  peers: PeerCredentialResolver,
  uid: number,
): { pid: number; inode: number } | undefined {
  try {
    const { creds, inode } = peers.resolveLatest();
    if (creds.uid === uid) return { pid: creds.pid, inode };
    peers.release(inode);
  } catch { /* no credentials: not a peer we can trust */ }
  return undefined;
}

/** Connections vetted at once while the spare waits. */
export const MAX_VETTING = 4;
/** How long a connection may take to send its handoff line (a start sends it at once). */
const HANDOFF_READ_MS = 5_000;

/** The connection's first line if it is a handoff of our code, else undefined (never throws). */
export async function readHandoff(
  conn: Deno.Conn,
  codeId: string,
): Promise<SpareHandoff | undefined> {
  const timer = setTimeout(() => {
    try {
      conn.close();
    } catch { /* closed */ }
  }, HANDOFF_READ_MS);
  try {
    const v = await new JsonLines(conn).next();
    return validHandoff(v) && v.codeId === codeId ? v : undefined;
  } catch {
    return undefined;
  } finally {
    clearTimeout(timer);
  }
}
