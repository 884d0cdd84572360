// memory_get's file read: a slice of one of the calling agent's own memory files, from its own workspace.
//
// memstrata's API has no route that reads a file (its L3 answers carry the passage, not the file), so the
// plugin reads it here, as memory-core does, and only inside the calling agent's workspace: the path must
// be one memstrata indexes (MEMORY.md, the core files, memory/**.md, shared/**.md; and DREAMS.md, which
// memory-core reads), relative or absolute inside the workspace, with no symlink on the way and its real
// path inside the workspace's. A nested agent's folder (OpenClaw puts `research/` inside main's workspace)
// is no memory path of main's, so main cannot read research's files through it.
import fs from "node:fs";
import path from "node:path";
import { ToolAuthorizationError, ToolInputError } from "./errors.js";

export const DEFAULT_LINES = 120; // memory-core's DEFAULT_MEMORY_READ_LINES
export const DEFAULT_MAX_CHARS = 12_000; // memory-core's DEFAULT_MEMORY_READ_MAX_CHARS
const MAX_FILE_BYTES = 5 * 1024 * 1024; // watch.max_file_mb's default: a larger file is not memory
const CORE_FILES = new Set(["CORE_INDEX.md", "IDENTITY.md", "SOUL.md", "USER.md", "AGENTS.md", "TOOLS.md", "MEMORY.md"]);

/** True for a workspace-relative path memstrata indexes (daemon/local/indexer.py is_indexable) or DREAMS.md. */
export function isMemoryPath(rel) {
  if (CORE_FILES.has(rel) || rel.toLowerCase() === "dreams.md") return true;
  return rel.endsWith(".md") && (rel.startsWith("memory/") || rel.startsWith("shared/"));
}

/** The workspace-relative form of `requested`, or a ToolAuthorizationError/ToolInputError saying why not. */
export function relativeMemoryPath(workspace, requested) {
  if (typeof requested !== "string" || !requested.trim()) throw new ToolInputError("memory_get: path is required");
  const raw = requested.trim();
  if (raw.length > 1024 || raw.includes("\0")) throw new ToolInputError("memory_get: path is not a file name");
  const abs = path.resolve(workspace, raw);
  const rel = path.relative(workspace, abs).split(path.sep).join("/");
  if (!rel || rel === ".." || rel.startsWith("../") || path.isAbsolute(rel)) {
    throw new ToolAuthorizationError(
      `memory_get: ${JSON.stringify(raw)} is outside this agent's workspace: an agent reads only its own memory files`,
    );
  }
  if (!isMemoryPath(rel)) {
    throw new ToolInputError(
      `memory_get: ${JSON.stringify(rel)} is not one of this agent's memory files ` +
        "(MEMORY.md, USER.md, SOUL.md, IDENTITY.md, AGENTS.md, TOOLS.md, CORE_INDEX.md, memory/*.md, shared/*.md)",
    );
  }
  return rel;
}

function noSymlinkOnTheWay(workspace, rel) {
  let here = workspace;
  for (const part of rel.split("/")) {
    here = path.join(here, part);
    let st;
    try {
      st = fs.lstatSync(here);
    } catch (err) {
      if (err.code === "ENOENT" || err.code === "ENOTDIR") return false;
      throw err;
    }
    if (st.isSymbolicLink()) {
      throw new ToolAuthorizationError(`memory_get: ${rel} goes through a symlink (${path.relative(workspace, here)}): refused`);
    }
  }
  return true;
}

/** memory-core's result shape: { status, text, path, from, lines, truncated?, nextFrom? }. */
export function readSlice(workspace, requested, from, lines, maxChars = DEFAULT_MAX_CHARS) {
  const rel = relativeMemoryPath(workspace, requested);
  if (!noSymlinkOnTheWay(workspace, rel)) return { status: "not_found", text: "", path: rel };
  const abs = path.join(workspace, rel);
  let fd;
  try {
    fd = fs.openSync(abs, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  } catch (err) {
    if (err.code === "ENOENT") return { status: "not_found", text: "", path: rel };
    if (err.code === "ELOOP") throw new ToolAuthorizationError(`memory_get: ${rel} is a symlink: refused`);
    throw err;
  }
  let content;
  try {
    const st = fs.fstatSync(fd);
    if (!st.isFile()) throw new ToolInputError(`memory_get: ${rel} is not a regular file`);
    if (st.size > MAX_FILE_BYTES) throw new ToolInputError(`memory_get: ${rel} is over ${MAX_FILE_BYTES} bytes`);
    const real = fs.realpathSync(abs);
    const home = fs.realpathSync(workspace);
    if (real !== path.join(home, rel)) {
      throw new ToolAuthorizationError(`memory_get: ${rel} resolves outside this agent's workspace: refused`);
    }
    const buf = Buffer.alloc(st.size);
    const n = st.size ? fs.readSync(fd, buf, 0, st.size, 0) : 0;
    content = buf.subarray(0, n).toString("utf8");
  } finally {
    fs.closeSync(fd);
  }
  return slice(content, rel, from, lines, maxChars);
}

/** memory-core's buildMemoryReadResult: whole lines from `from`, within the character budget. */
export function slice(content, rel, from, lines, maxChars = DEFAULT_MAX_CHARS) {
  const fileLines = content.split("\n");
  if (fileLines.at(-1) === "") fileLines.pop();
  const start = Math.max(1, from ?? 1);
  const count = Math.max(1, lines ?? DEFAULT_LINES);
  const selected = fileLines.slice(start - 1, start - 1 + count);
  const moreRemain = start - 1 + selected.length < fileLines.length;
  let included = 0;
  let chars = 0;
  for (const line of selected) {
    const next = chars + line.length + (included > 0 ? 1 : 0);
    if (included > 0 && next > maxChars) break;
    included += 1;
    chars = next;
  }
  let text = selected.slice(0, included).join("\n");
  const hardCut = chars > maxChars;
  if (hardCut) text = text.slice(0, maxChars);
  const truncated = hardCut || included < selected.length || moreRemain;
  const nextFrom = !hardCut && (moreRemain || included < selected.length) ? start + included : undefined;
  if (truncated && text) {
    text +=
      nextFrom !== undefined
        ? `\n\n[More content available. Use from=${nextFrom} to continue.]`
        : "\n\n[More content available. Requested excerpt exceeded the default maxChars budget.]";
  }
  return {
    status: "ok",
    text,
    path: rel,
    from: start,
    lines: included,
    ...(truncated ? { truncated: true } : {}),
    ...(nextFrom !== undefined ? { nextFrom } : {}),
  };
}
