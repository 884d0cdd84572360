// memory-memstrata: OpenClaw's memory slot answered by memstrata.
//
// OpenClaw loads this file as an ES module (no build step, no dependencies) and calls register(api).
// The tools are registered through a factory, so each is built for the calling agent's context
// (ctx.agentId, ctx.workspaceDir) and every call carries that agent's own token over the daemon's socket.
import { registerMemstrataCli } from "./lib/cli.js";
import { registerHooks } from "./lib/hooks.js";
import { PLUGIN_ID, settingsOf } from "./lib/settings.js";
import { slotProblem } from "./lib/slot.js";
import { TOOL_NAMES, createTools } from "./lib/tools.js";

function withWorkspace(api, ctx) {
  if (ctx?.workspaceDir || !ctx?.agentId) return ctx;
  const cfg = ctx.getRuntimeConfig?.() ?? ctx.runtimeConfig ?? ctx.config ?? api.config;
  const workspaceDir = api.runtime?.agent?.resolveAgentWorkspaceDir?.(cfg, ctx.agentId);
  return workspaceDir ? { ...ctx, workspaceDir } : ctx;
}

const GUIDANCE = [
  "## Memory Recall",
  "Before answering anything about prior work, decisions, dates, people, preferences, or todos: run memory_search; " +
    "for memory-file hits, use memory_get to pull only the needed lines. corpus=sessions searches stored memories; " +
    "memory_store keeps a fact, preference or decision for later sessions. If low confidence after search, say you checked.",
  "Citations: include Source: <path#line> when it helps the user verify memory snippets.",
  "",
];

export default {
  id: PLUGIN_ID,
  name: "memstrata memory",
  description: "OpenClaw's memory tools answered by the memstrata daemon, as the calling agent",
  kind: "memory",
  register(api) {
    const settings = settingsOf(api.pluginConfig);
    const problem = slotProblem(api.config);
    if (problem) api.logger?.warn?.(`${PLUGIN_ID}: ${problem}`);
    api.registerMemoryCapability?.({
      promptBuilder: (params) =>
        params.availableTools.has("memory_search") || params.availableTools.has("memory_get") ? GUIDANCE : [],
    });
    api.registerTool((ctx) => createTools(withWorkspace(api, ctx), settings), { names: TOOL_NAMES });
    if (settings.autoRecall || settings.autoCapture) registerHooks(api, settings); // each needs hooks.allowConversationAccess
    api.registerCli(
      async ({ program, config }) => registerMemstrataCli(program, api, settings, config ?? api.config),
      { descriptors: [{ name: "memstrata", description: "memstrata's status, search and reindex as an agent", hasSubcommands: true }] },
    );
  },
};
