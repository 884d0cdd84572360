// The daemon's routes the plugin uses, each sent as the calling agent with that agent's own token.
// Field names are the API's (protocol/operations.py): the query travels as `q`, a memory type as `type`.
import { request } from "./transport.js";

export const MAX_QUERY_CHARS = 4096; // protocol/limits.py MAX_QUERY_CHARS
export const L3_MAX = 200; // L3_RESULTS.high
export const L4_MAX = 100; // L4_RESULTS.high

export function api(socket, caller, timeoutMs) {
  const send = (method, path, { params, body, signal } = {}) =>
    request({ socket, token: caller.token, method, path, params, body, timeoutMs, signal });
  const agent = caller.agent;
  return {
    agent,
    /** POST /v1/search: the agent's own L3 index (hybrid when vectors exist). */
    searchFiles: ({ query, limit, threshold, maxTokens, signal }) =>
      send("POST", "/v1/search", {
        body: { agent, q: query, mode: "auto", limit, threshold, max_tokens: maxTokens },
        signal,
      }),
    /** POST /v1/memories/search: the L4 memories this agent may read (its own, its projects', public ones). */
    searchMemories: ({ query, limit, threshold, maxTokens, signal }) =>
      send("POST", "/v1/memories/search", {
        body: { agent, q: query, limit, threshold, max_tokens: maxTokens, fallback: false },
        signal,
      }),
    getMemory: (id, signal) => send("GET", `/v1/memories/${encodeURIComponent(id)}`, { params: { agent }, signal }),
    addMemory: (fields, signal) => send("POST", "/v1/memories", { body: { agent, ...fields }, signal }),
    deleteMemory: (id, signal) => send("DELETE", `/v1/memories/${encodeURIComponent(id)}`, { params: { agent }, signal }),
    status: (signal) => send("GET", "/v1/status", { signal }),
    reindex: (rebuild, signal) => send("POST", "/v1/reindex", { body: { agent, rebuild: Boolean(rebuild) }, signal }),
  };
}
