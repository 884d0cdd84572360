// The daemon's API over its Unix socket: one HTTP/1.1 request on one connection, nothing kept open.
//
// node:http speaks to a socket path itself (`socketPath`), so no dependency and no CLI process per call.
// Errors are MemstrataError with the daemon's own `{"error": …}` message and HTTP status, or a
// connection error naming the socket tried (the commonest setup mistake: the gateway's user is not in
// the socket's group, or the daemon is not running).
import http from "node:http";

export const DEFAULT_TIMEOUT_MS = 60_000; // the first write may wait for the daemon to load its model
const MAX_ANSWER_BYTES = 16 * 1024 * 1024;

export class MemstrataError extends Error {
  constructor(message, status = 0) {
    super(message);
    this.name = "MemstrataError";
    this.status = status;
  }
}

function query(params) {
  const entries = Object.entries(params || {}).filter(([, v]) => v !== undefined && v !== null);
  if (entries.length === 0) return "";
  return "?" + new URLSearchParams(entries.map(([k, v]) => [k, typeof v === "boolean" ? String(v) : String(v)])).toString();
}

/** One request: resolves to the answer's JSON object, rejects with MemstrataError. */
export function request({ socket, token, method, path, params, body, timeoutMs = DEFAULT_TIMEOUT_MS, signal }) {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body), "utf8");
    const headers = { Host: "memstrata", Accept: "application/json", Connection: "close" };
    if (token) headers.Authorization = `Bearer ${token}`;
    if (payload) {
      headers["Content-Type"] = "application/json";
      headers["Content-Length"] = String(payload.length);
    }
    const req = http.request(
      { socketPath: socket, method, path: path + query(params), headers, agent: false, timeout: timeoutMs, signal },
      (res) => {
        const chunks = [];
        let size = 0;
        res.on("data", (chunk) => {
          size += chunk.length;
          if (size > MAX_ANSWER_BYTES) {
            req.destroy(new MemstrataError(`memstrata's answer is over ${MAX_ANSWER_BYTES} bytes`));
            return;
          }
          chunks.push(chunk);
        });
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString("utf8");
          let data = null;
          try {
            data = text ? JSON.parse(text) : {};
          } catch {
            data = null;
          }
          if (res.statusCode >= 400) {
            const said = data && typeof data === "object" && data.error ? String(data.error) : text.trim() || res.statusMessage;
            const hint = res.statusCode === 429 ? " (the daemon is busy with this agent's earlier requests: try again shortly)" : "";
            reject(new MemstrataError(`memstrata: ${said}${hint} (HTTP ${res.statusCode})`, res.statusCode));
            return;
          }
          if (!data || typeof data !== "object" || Array.isArray(data)) {
            reject(new MemstrataError(`memstrata's answer is not a JSON object: ${text.slice(0, 200)}`));
            return;
          }
          resolve(data);
        });
        res.on("error", (err) => reject(new MemstrataError(`memstrata: reading the answer failed: ${err.message}`)));
      },
    );
    req.on("timeout", () => req.destroy(new MemstrataError(`memstrata did not answer within ${timeoutMs / 1000} s (${socket})`)));
    req.on("error", (err) => {
      if (err instanceof MemstrataError) return reject(err);
      const advice =
        err.code === "ENOENT" || err.code === "ECONNREFUSED"
          ? "is the memstrata daemon running? (systemctl status memstrata)"
          : err.code === "EACCES"
            ? "this OpenClaw process may not use the socket: add its user to the socket's group (memstrata)"
            : err.message;
      reject(new MemstrataError(`memstrata: cannot reach the daemon at ${socket} (${err.code || err.name}): ${advice}`));
    });
    if (payload) req.write(payload);
    req.end();
  });
}
