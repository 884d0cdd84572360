// Where memstrata's configuration and socket are: the rules of protocol/locations.py, in JavaScript.
//
// The plugin config's `config` names memstrata.yaml; else $MEMSTRATA_CONFIG; else
// /etc/memstrata/memstrata.yaml when it exists; else the built-in defaults. $MEMSTRATA_SOCKET names the
// socket outright, as it does for the skill's client. Only the `paths:` section is read, block style
// (what `memstrata init` and `install` write), without a YAML library: the plugin has no dependencies.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

export const CONFIG_ENV = "MEMSTRATA_CONFIG";
export const SOCKET_ENV = "MEMSTRATA_SOCKET";
export const SYSTEM_CONFIG = "/etc/memstrata/memstrata.yaml";
export const DEFAULT_PATHS = Object.freeze({
  root: "/root/.openclaw",
  workspace: "{root}/workspace",
  socket: "/run/memstrata/memstrata.sock",
});
const MAX_CONFIG_BYTES = 256 * 1024;

function expandUser(text) {
  if (text === "~" || text.startsWith("~/")) return path.join(os.homedir(), text.slice(1));
  return text;
}

/** The configuration file to read, or null (the defaults apply), and why it was chosen. */
export function configPath(explicit, env = process.env) {
  if (explicit) return { file: path.resolve(expandUser(String(explicit))), from: "the plugin's config setting" };
  if (env[CONFIG_ENV]) return { file: path.resolve(expandUser(env[CONFIG_ENV])), from: `$${CONFIG_ENV}` };
  if (fs.existsSync(SYSTEM_CONFIG)) return { file: SYSTEM_CONFIG, from: "the system configuration" };
  return { file: null, from: "the built-in defaults" };
}

function unquote(value) {
  value = value.trim();
  if (value[0] === "'" || value[0] === '"') {
    const q = value[0];
    const end = value.indexOf(q, 1);
    if (end > 0) {
      const inner = value.slice(1, end);
      return q === "'" ? inner.replaceAll("''", "'") : inner;
    }
  }
  return value.split(/\s+#/, 1)[0].trim();
}

/** The scalar keys of the top-level `paths:` mapping (protocol/locations.py parse_paths_block). */
export function parsePathsBlock(text) {
  const found = {};
  let inside = false;
  for (const line of text.split(/\r?\n/)) {
    if (!line.trim() || line.trimStart().startsWith("#")) continue;
    const indented = line[0] === " " || line[0] === "\t";
    if (!indented) {
      inside = /^paths\s*:\s*(#.*)?$/.test(line);
      continue;
    }
    const m = /^\s+([A-Za-z_][A-Za-z0-9_]*)\s*:\s*(.*)$/.exec(line);
    if (inside && m && m[2].trim()) found[m[1]] = unquote(m[2]);
  }
  return found;
}

/** `paths.root`, `paths.workspace` and `paths.socket`, resolved as the daemon resolves them. */
export function resolvePaths(values, base) {
  const merged = { ...DEFAULT_PATHS, ...values };
  const resolved = {};
  for (const key of ["root", "workspace", "socket"]) {
    let text = String(merged[key]);
    for (const name of ["root", "workspace"]) {
      if (name in resolved) text = text.replaceAll(`{${name}}`, resolved[name]);
    }
    text = expandUser(text);
    if (!path.isAbsolute(text)) text = path.join(base, text);
    resolved[key] = path.normalize(text);
  }
  return resolved;
}

function readBounded(file) {
  const fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
  try {
    const st = fs.fstatSync(fd);
    if (!st.isFile()) throw new Error("not a regular file");
    if (st.size > MAX_CONFIG_BYTES) throw new Error(`it is ${st.size} bytes; the limit is ${MAX_CONFIG_BYTES}`);
    const buf = Buffer.alloc(MAX_CONFIG_BYTES + 1);
    const n = fs.readSync(fd, buf, 0, buf.length, 0);
    if (n > MAX_CONFIG_BYTES) throw new Error(`it is over ${MAX_CONFIG_BYTES} bytes, the limit`);
    return buf.subarray(0, n).toString("utf8");
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * Where the daemon's socket is: { socket, config, from }. Throws an Error saying which file could not be
 * read and how to name another. The system file may be root's alone: then the default socket is tried,
 * as the CLI does.
 */
export function findSocket(explicitConfig, env = process.env) {
  if (env[SOCKET_ENV]) return { socket: path.resolve(expandUser(env[SOCKET_ENV])), config: null, from: `$${SOCKET_ENV}` };
  const { file, from } = configPath(explicitConfig, env);
  if (file === null) return { socket: DEFAULT_PATHS.socket, config: null, from };
  let text;
  try {
    text = readBounded(file);
  } catch (err) {
    if (file === SYSTEM_CONFIG && !explicitConfig && err.code === "EACCES") {
      return { socket: DEFAULT_PATHS.socket, config: file, from: `${from} (unreadable: the default socket)` };
    }
    const why = err.code ? `${err.code}: ${err.message}` : err.message;
    throw new Error(
      `memstrata: cannot read its configuration ${file} (${from}; ${why}); name it in ` +
        `plugins.entries.memory-memstrata.config.config or $${CONFIG_ENV}`,
    );
  }
  const paths = resolvePaths(parsePathsBlock(text), path.dirname(file));
  return { socket: paths.socket, config: file, from };
}
