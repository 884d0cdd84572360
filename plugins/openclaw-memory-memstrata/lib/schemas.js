// The tools' parameter schemas. memory_search and memory_get are memory-core's own, copied as OpenClaw
// 2026.9.6 declares them (extensions/memory-core/src/memory-tool-contract.ts), so an agent's calls and
// OpenClaw's prompt guidance are the same whichever plugin holds the memory slot. memory_store and
// memory_forget take memory-lancedb's shape (text/importance/category; query/memoryId), plus memstrata's
// `visibility` on a store.
export const MemorySearchSchema = {
  type: "object",
  properties: {
    query: { type: "string" },
    maxResults: { type: "integer", minimum: 1 },
    minScore: { type: "number" },
    corpus: { type: "string", enum: ["memory", "wiki", "all", "sessions"] },
  },
  required: ["query"],
  additionalProperties: false,
};

export const MemoryGetSchema = {
  type: "object",
  properties: {
    path: { type: "string" },
    from: { type: "integer", minimum: 1 },
    lines: { type: "integer", minimum: 1 },
    corpus: { type: "string", enum: ["memory", "wiki", "all"] },
  },
  required: ["path"],
  additionalProperties: false,
};

export const CATEGORIES = ["preference", "fact", "decision", "entity", "other"];

export const MemoryStoreSchema = {
  type: "object",
  properties: {
    text: { type: "string", description: "What to remember: one self-contained fact, preference or decision." },
    importance: { type: "number", minimum: 0, maximum: 1, description: "How much it matters, 0-1 (kept as metadata)." },
    category: { type: "string", enum: CATEGORIES },
    visibility: {
      type: "string",
      enum: ["private", "public"],
      description: "private (yours alone, the default) or public (every agent may find it).",
    },
  },
  required: ["text"],
  additionalProperties: false,
};

export const MemoryForgetSchema = {
  type: "object",
  properties: {
    query: { type: "string", description: "Find the memory to forget (deleted only when one of yours matches closely)." },
    memoryId: { type: "string", description: "The id of one of your memories (from memory_search with corpus=sessions)." },
  },
  additionalProperties: false,
};
