/**
 * What an OCI runtime writes, read back: the last error entry of its `--log` file (JSON lines,
 * runsc's concatenated JSON objects, or text-format `level=error msg="..."`), the JSON a command
 * prints on stdout, and a bounded tail of free text for error messages.
 *
 * @module
 */

/** The size of the log file before a command runs: its new entries start there (0 if absent). */
export async function logSize(path: string): Promise<number> {
  try {
    return (await Deno.stat(path)).size;
  } catch {
    return 0;
  }
}

/** The message of the last error entry written to the log at or after `offset`. */
export async function lastLogError(path: string, offset: number): Promise<string | undefined> {
  let bytes: Uint8Array;
  try {
    bytes = await Deno.readFile(path);
  } catch {
    return undefined;
  }
  // A log that shrank was truncated or replaced: read all of it.
  const fresh = bytes.length >= offset ? bytes.subarray(offset) : bytes;
  return lastErrorEntry(new TextDecoder().decode(fresh));
}

/** The `msg` of the last error, fatal or panic entry in `text` (JSON or text format). */
export function lastErrorEntry(text: string): string | undefined {
  let found: string | undefined;
  for (const entry of jsonObjects(text)) {
    if (
      typeof entry.msg === "string" &&
      (entry.level === "error" || entry.level === "fatal" || entry.level === "panic")
    ) {
      found = entry.msg;
    }
  }
  if (found !== undefined) return found;
  // Text format: level=error msg="..."
  for (const m of text.matchAll(/level=(?:error|fatal|panic) msg="((?:[^"\\]|\\.)*)"/g)) {
    try {
      found = JSON.parse(`"${m[1]}"`);
    } catch {
      found = m[1];
    }
  }
  return found;
}

/** Yields each top-level JSON object in `text`, whether newline-separated or concatenated. */
export function* jsonObjects(text: string): Generator<Record<string, unknown>> {
  let depth = 0;
  let start = -1;
  let inString = false;
  let escaped = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (escaped) escaped = false;
      else if (c === "\\") escaped = true;
      else if (c === '"') inString = false;
      continue;
    }
    if (c === '"' && depth > 0) inString = true;
    else if (c === "{") {
      if (depth++ === 0) start = i;
    } else if (c === "}" && depth > 0 && --depth === 0) {
      try {
        const v = JSON.parse(text.slice(start, i + 1));
        if (typeof v === "object" && v !== null) yield v as Record<string, unknown>;
      } catch {
        // Not JSON after all; keep scanning.
      }
    }
  }
}

/** The JSON value a command printed: the whole output, or its first JSON object. */
export function firstJsonValue(text: string): unknown {
  const trimmed = text.trim();
  try {
    return JSON.parse(trimmed);
  } catch {
    // Some runtimes print a trailing line after the JSON; take the first object.
    for (const o of jsonObjects(trimmed)) return o;
    return undefined;
  }
}

/** `text` trimmed to its last 2 KiB, for an error message. */
export function tail(text: string): string {
  const t = text.trim();
  return t.length <= 2048 ? t : `...${t.slice(-2048)}`;
}
