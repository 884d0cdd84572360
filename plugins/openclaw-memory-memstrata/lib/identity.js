// Who is calling: the agent OpenClaw runs the tool for, and that agent's own memstrata token.
//
// The agent id and its workspace come from OpenClaw's tool context (ctx.agentId, ctx.workspaceDir), never
// from the tool's arguments. The token is the one memstrata wrote into that workspace
// (`.memstrata/token`, what the skill's client reads); tokens.json holds only their SHA-256, so it cannot
// stand in. Main's token is never used for another agent: each call carries the token found in the
// calling agent's own workspace, and the daemon answers 403 when a token is not the named agent's.
import fs from "node:fs";
import path from "node:path";
import { ToolAuthorizationError } from "./errors.js";

export const AGENT_ID_RE = /^[a-z0-9][a-z0-9_-]{0,63}$/;
export const WORKSPACE_TOKEN = path.join(".memstrata", "token");
const MAX_TOKEN_BYTES = 4096;

/** The token in `<workspace>/.memstrata/token`, read without following a symlink; an Error says why not. */
export function readWorkspaceToken(workspace) {
  const dir = path.join(workspace, ".memstrata");
  let st;
  try {
    st = fs.lstatSync(dir);
  } catch (err) {
    throw new ToolAuthorizationError(
      `memstrata: no token in ${workspace} (${WORKSPACE_TOKEN}: ${err.code || err.message}); ` +
        "is this workspace one memstrata knows? (memstrata status lists its agents)",
    );
  }
  if (st.isSymbolicLink() || !st.isDirectory()) {
    throw new ToolAuthorizationError(`memstrata: ${dir} is not a directory of the workspace's own (a symlink?): refused`);
  }
  let fd;
  try {
    fd = fs.openSync(path.join(dir, "token"), fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  } catch (err) {
    const why = err.code === "ELOOP" ? "a symlink: refused" : err.code || err.message;
    throw new ToolAuthorizationError(`memstrata: cannot read ${path.join(dir, "token")} (${why})`);
  }
  try {
    const fst = fs.fstatSync(fd);
    if (!fst.isFile() || fst.size > MAX_TOKEN_BYTES) {
      throw new ToolAuthorizationError(`memstrata: ${path.join(dir, "token")} is not a token file`);
    }
    const buf = Buffer.alloc(MAX_TOKEN_BYTES);
    const n = fs.readSync(fd, buf, 0, buf.length, 0);
    const token = buf.subarray(0, n).toString("utf8").trim();
    if (!token || !/^[\x21-\x7e]+$/.test(token)) {
      throw new ToolAuthorizationError(`memstrata: ${path.join(dir, "token")} holds no token`);
    }
    return token;
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * { agent, workspace, token } of the calling agent, from OpenClaw's context (tool or hook ctx).
 * Throws ToolAuthorizationError when OpenClaw did not say which agent calls or where its workspace is.
 */
export function callerOf(ctx) {
  const agent = typeof ctx?.agentId === "string" ? ctx.agentId : "";
  const workspace = typeof ctx?.workspaceDir === "string" ? ctx.workspaceDir : "";
  if (!AGENT_ID_RE.test(agent)) {
    throw new ToolAuthorizationError(
      `memstrata: OpenClaw gave no valid calling agent id (${JSON.stringify(agent)}): memstrata acts only as the calling agent`,
    );
  }
  if (!workspace || !path.isAbsolute(workspace)) {
    throw new ToolAuthorizationError(`memstrata: OpenClaw gave no workspace for agent ${agent}`);
  }
  return { agent, workspace, token: readWorkspaceToken(workspace) };
}
