// The four memory tools, each built per call context (OpenClaw hands every tool factory the calling
// agent's ctx) and each acting as that agent: memory_search and memory_get as memory-core declares them,
// memory_store and memory_forget on memstrata's L4.
import { ToolAuthorizationError, ToolInputError } from "./errors.js";
import { readSlice } from "./files.js";
import { callerOf } from "./identity.js";
import { L3_MAX, L4_MAX, MAX_QUERY_CHARS, api } from "./memstrata.js";
import { CATEGORIES, MemoryForgetSchema, MemoryGetSchema, MemorySearchSchema, MemoryStoreSchema } from "./schemas.js";
import { MemstrataError } from "./transport.js";

export const TOOL_NAMES = ["memory_search", "memory_get", "memory_store", "memory_forget"];
export const L4_PATH_PREFIX = "memstrata:"; // an L4 hit's path: memory_get reads the memory by its id
const UUID_RE = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;
const FORGET_AUTO_SCORE = 0.9; // memory-lancedb's rule: one close match is deleted, else candidates are listed
const CATEGORY_TYPE = { preference: "preference", fact: "fact", decision: "decision", entity: "knowledge", other: "knowledge" };

export function jsonResult(payload) {
  return { content: [{ type: "text", text: JSON.stringify(payload, null, 2) }], details: payload };
}

/** The arguments as an object holding only the schema's keys: a key it lacks (`agent`, `workspace`…) is refused. */
export function checkArgs(tool, schema, params, agent) {
  if (params === undefined || params === null) params = {};
  if (typeof params !== "object" || Array.isArray(params)) throw new ToolInputError(`${tool}: the arguments must be an object`);
  const allowed = Object.keys(schema.properties);
  const extra = Object.keys(params).filter((k) => !allowed.includes(k));
  if (extra.length) {
    throw new ToolInputError(
      `${tool}: unknown argument${extra.length > 1 ? "s" : ""} ${extra.map((k) => JSON.stringify(k)).join(", ")} ` +
        `(it takes ${allowed.join(", ")}); memstrata always acts as the calling agent (${agent}), never as one an argument names`,
    );
  }
  for (const key of schema.required || []) {
    if (typeof params[key] !== "string" || !params[key].trim()) throw new ToolInputError(`${tool}: ${key} is required`);
  }
  for (const [key, spec] of Object.entries(schema.properties)) {
    const v = params[key];
    if (v === undefined) continue;
    if (spec.type === "string" && typeof v !== "string") throw new ToolInputError(`${tool}: ${key} must be a string`);
    if (spec.type === "integer" && !(Number.isInteger(v) && v >= (spec.minimum ?? -Infinity))) {
      throw new ToolInputError(`${tool}: ${key} must be an integer of at least ${spec.minimum}`);
    }
    if (spec.type === "number" && !(typeof v === "number" && Number.isFinite(v))) throw new ToolInputError(`${tool}: ${key} must be a number`);
    if (spec.enum && !spec.enum.includes(v)) throw new ToolInputError(`${tool}: ${key} must be one of ${spec.enum.join(", ")}`);
  }
  return params;
}

/** memory-core's answer when search cannot run: the agent is told, and told what to do. */
export function unavailable(error, action, warning = "Memory search is unavailable: memstrata did not answer.") {
  return {
    results: [],
    disabled: true,
    unavailable: true,
    error,
    warning,
    action: action || "Tell the user memory search is unavailable; the operator can check `memstrata status`.",
  };
}

function rethrowCallerErrors(err) {
  if (err instanceof MemstrataError && (err.status === 401 || err.status === 403)) throw new ToolAuthorizationError(err.message);
  if (err instanceof MemstrataError && (err.status === 400 || err.status === 413 || err.status === 422)) throw new ToolInputError(err.message);
}

const SNIPPET_CHARS = 700; // about memory-core's chunk excerpt

/** The passage as written (memstrata's `snippet` marks matched words with **; memory-core's is plain). */
function plainSnippet(hit) {
  const text = typeof hit.text === "string" && hit.text ? hit.text : String(hit.snippet || "").replaceAll("**", "");
  return text.length > SNIPPET_CHARS ? `${text.slice(0, SNIPPET_CHARS - 1)}…` : text;
}

export function fileHit(hit) {
  const [startLine, endLine] = Array.isArray(hit.lines) && hit.lines.length === 2 ? hit.lines : [1, 1];
  const score = typeof hit.confidence === "number" ? hit.confidence : hit.score;
  const citation = startLine === endLine ? `${hit.path}#L${startLine}` : `${hit.path}#L${startLine}-L${endLine}`;
  return {
    path: hit.path,
    startLine,
    endLine,
    score,
    snippet: plainSnippet(hit),
    source: "memory",
    corpus: "memory",
    citation,
    ...(hit.heading ? { heading: hit.heading } : {}),
  };
}

export function memoryHit(m) {
  return {
    path: `${L4_PATH_PREFIX}${m.id}`,
    startLine: 1,
    endLine: 1,
    score: typeof m.score === "number" ? m.score : 0,
    snippet: m.memory || "",
    source: "sessions",
    corpus: "sessions",
    id: m.id,
    owner: m.agent_id,
    visibility: m.visibility,
    ...(m.project_id ? { project: m.project_id } : {}),
    ...(m.memory_type ? { memoryType: m.memory_type } : {}),
    ...(m.created_at ? { createdAt: m.created_at } : {}),
  };
}

/** memory_search: L3 for `memory` (the default), L4 for `sessions`, both for `all`; no wiki. */
export async function search(client, params, signal) {
  const query = params.query.trim();
  if (query.length > MAX_QUERY_CHARS) throw new ToolInputError(`memory_search: the query is over ${MAX_QUERY_CHARS} characters`);
  const corpus = params.corpus || "memory";
  if (corpus === "wiki") {
    const action = "Search corpus=memory (the agent's files) or corpus=sessions (memstrata's conversation memory).";
    return { ...unavailable("memstrata has no wiki corpus", action, "There is no wiki corpus here."), corpus: "wiki" };
  }
  const threshold = typeof params.minScore === "number" ? Math.min(1, Math.max(0, params.minScore)) : undefined;
  const wantFiles = corpus === "memory" || corpus === "all";
  const wantMemories = corpus === "sessions" || corpus === "all";
  const outcomes = {};
  const errors = [];
  const [files, memories] = await Promise.all([
    wantFiles
      ? client.searchFiles({ query, limit: Math.min(params.maxResults ?? 10, L3_MAX), threshold, signal }).then(
          (a) => ((outcomes.memory = "ok"), a),
          (err) => (rethrowCallerErrors(err), errors.push(err), (outcomes.memory = err.message), null),
        )
      : null,
    wantMemories
      ? client.searchMemories({ query, limit: Math.min(params.maxResults ?? 10, L4_MAX), threshold, signal }).then(
          (a) => ((outcomes.sessions = "ok"), a),
          (err) => (rethrowCallerErrors(err), errors.push(err), (outcomes.sessions = err.message), null),
        )
      : null,
  ]);
  if (!files && !memories) throw errors[0]; // nothing answered: the tool says it is unavailable, and why
  let results = [...(files?.results || []).map(fileHit), ...(memories?.results || []).map(memoryHit)];
  if (corpus === "all") results = results.sort((a, b) => b.score - a.score).slice(0, params.maxResults ?? 10);
  const failed = Object.entries(outcomes).filter(([, v]) => v !== "ok");
  return {
    results,
    provider: "memstrata",
    mode: files?.mode,
    citations: "auto",
    ...(files ? { vectors: files.vectors } : {}),
    ...(failed.length
      ? { partial: true, warning: failed.map(([c, why]) => `corpus ${c} unavailable: ${why}`).join("; ") }
      : {}),
  };
}

/** memory_get: a slice of one of the agent's memory files, or an L4 memory (`memstrata:<id>`). */
export async function get(client, caller, params, signal) {
  const requested = params.path.trim();
  if (params.corpus === "wiki") return { status: "not_found", path: requested, text: "", error: "memstrata has no wiki corpus" };
  if (requested.startsWith(L4_PATH_PREFIX)) {
    const id = requested.slice(L4_PATH_PREFIX.length);
    if (!UUID_RE.test(id)) throw new ToolInputError(`memory_get: ${JSON.stringify(requested)} names no memory (memstrata:<id>)`);
    try {
      const m = await client.getMemory(id, signal);
      return { status: "ok", path: requested, text: m.memory || "", from: 1, lines: 1, memory: memoryHit(m) };
    } catch (err) {
      if (err instanceof MemstrataError && err.status === 404) return { status: "not_found", path: requested, text: "" };
      rethrowCallerErrors(err);
      return { status: "error", path: requested, text: "", code: "MEMSTRATA_UNAVAILABLE", error: err.message };
    }
  }
  return readSlice(caller.workspace, requested, params.from, params.lines);
}

export async function store(client, params, signal) {
  const text = params.text.trim();
  const metadata = { via: "openclaw" };
  if (typeof params.importance === "number") metadata.importance = params.importance;
  if (params.category) metadata.category = params.category;
  let answer;
  try {
    answer = await client.addMemory(
      {
        text,
        type: params.category ? CATEGORY_TYPE[params.category] : undefined,
        visibility: params.visibility,
        source: "agent_output",
        metadata,
      },
      signal,
    );
  } catch (err) {
    rethrowCallerErrors(err);
    throw err;
  }
  const first = (answer.results || [])[0] || {};
  const action = answer.queued ? "queued" : first.event === "NOOP" || first.event === "EXISTS" ? "duplicate" : "created";
  return {
    action,
    id: first.id ?? null,
    text: first.memory ?? text,
    visibility: answer.visibility,
    memoryType: answer.memory_type,
    ...(answer.queued ? { reason: answer.reason } : {}),
  };
}

export async function forget(client, params, signal) {
  if (!params.memoryId && !(params.query && params.query.trim())) throw new ToolInputError("memory_forget: give memoryId or query");
  const guard = async (fn) => {
    try {
      return await fn();
    } catch (err) {
      rethrowCallerErrors(err);
      throw err;
    }
  };
  if (params.memoryId) {
    if (!UUID_RE.test(params.memoryId)) throw new ToolInputError("memory_forget: memoryId is not a memory id");
    try {
      await client.deleteMemory(params.memoryId, signal);
    } catch (err) {
      if (err instanceof MemstrataError && err.status === 404) {
        return { action: "not_found", id: params.memoryId, message: "no memory of this agent has that id" };
      }
      rethrowCallerErrors(err);
      throw err;
    }
    return { action: "deleted", id: params.memoryId };
  }
  const answer = await guard(() => client.searchMemories({ query: params.query.trim(), limit: 5, signal }));
  const own = (answer.results || []).filter((m) => m.agent_id === client.agent);
  if (own.length === 1 && (own[0].score ?? 0) >= FORGET_AUTO_SCORE) {
    await guard(() => client.deleteMemory(own[0].id, signal));
    return { action: "deleted", id: own[0].id, text: own[0].memory };
  }
  return {
    action: "candidates",
    message: own.length ? "call memory_forget with the memoryId of the one to forget" : "no memory of this agent matches",
    candidates: own.map((m) => ({ id: m.id, text: m.memory, score: m.score })),
  };
}

const DESCRIPTIONS = {
  memory_search:
    "Mandatory recall step: search this agent's memory (MEMORY.md, the core files, memory/*.md, shared/*.md: memstrata's " +
    "hybrid index) before answering questions about prior work, decisions, dates, people, preferences, or todos. " +
    "corpus=sessions searches memstrata's conversation memory (what this agent stored, its projects' and public memories); " +
    "corpus=all searches both. If the response has unavailable=true or a warning, tell the user.",
  memory_get:
    "Safe exact excerpt read from this agent's memory files (MEMORY.md, USER.md, memory/*.md…), by path with optional from/lines; " +
    "a path memstrata:<id> from a corpus=sessions hit reads that memory. status=ok means read; status=not_found means it is not there.",
  memory_store:
    "Store one self-contained fact, preference or decision in memstrata's conversation memory (private to this agent unless " +
    "visibility=public). Use for what later sessions or other agents should find.",
  memory_forget: "Forget one of this agent's stored memories, by memoryId, or by query (deleted only when one matches closely).",
};

/** The four tools for one call context, or throws when memstrata cannot tell who calls. */
export function createTools(ctx, settings) {
  const run = (name, schema, body) => ({
    name,
    label: { memory_search: "Memory Search", memory_get: "Memory Get", memory_store: "Memory Store", memory_forget: "Memory Forget" }[name],
    description: DESCRIPTIONS[name],
    parameters: schema,
    execute: async (_toolCallId, rawParams, signal) => {
      const caller = callerOf(ctx);
      const params = checkArgs(name, schema, rawParams, caller.agent);
      let located;
      try {
        located = settings.locate();
      } catch (err) {
        if (name === "memory_search") return jsonResult(unavailable(err.message));
        throw new ToolInputError(err.message);
      }
      const client = api(located.socket, caller, settings.timeoutMs);
      try {
        return jsonResult(await body(client, caller, params, signal));
      } catch (err) {
        if (!(err instanceof MemstrataError)) throw err;
        // not reached: say where the socket came from ($MEMSTRATA_CONFIG, the system file, the defaults…)
        const message = err.status === 0 ? `${err.message} [socket from ${located.from}]` : err.message;
        if (name === "memory_search") return jsonResult(unavailable(message));
        throw new ToolInputError(message); // said as it is, not "tool execution failed"
      }
    },
  });
  return [
    run("memory_search", MemorySearchSchema, (c, _caller, p, s) => search(c, p, s)),
    run("memory_get", MemoryGetSchema, (c, caller, p, s) => get(c, caller, p, s)),
    run("memory_store", MemoryStoreSchema, (c, _caller, p, s) => store(c, p, s)),
    run("memory_forget", MemoryForgetSchema, (c, _caller, p, s) => forget(c, p, s)),
  ];
}

export { CATEGORIES };
