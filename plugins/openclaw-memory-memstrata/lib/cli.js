// `openclaw memstrata status|search|reindex`: the operator's view, as one agent (--agent, default the
// default agent), with that agent's own token from its workspace, as the tools use it.
import { callerOf } from "./identity.js";
import { api } from "./memstrata.js";
import { slotProblem } from "./slot.js";
import { search } from "./tools.js";

function agentContext(openclaw, config, agentId) {
  const id = agentId || "main";
  const workspaceDir = openclaw.runtime?.agent?.resolveAgentWorkspaceDir?.(config, id);
  return { agentId: id, workspaceDir };
}

async function withClient(openclaw, settings, config, opts, fn) {
  try {
    const caller = callerOf(agentContext(openclaw, config, opts.agent));
    const located = settings.locate();
    const answer = await fn(api(located.socket, caller, settings.timeoutMs), caller, located);
    process.stdout.write(`${JSON.stringify(answer, null, 2)}\n`);
  } catch (err) {
    process.stderr.write(`${err.message}\n`);
    process.exitCode = 1;
  }
}

export function registerMemstrataCli(program, openclaw, settings, config) {
  const root = program.command("memstrata").description("memstrata's memory: status, search and reindex as an agent");
  root
    .command("status")
    .description("the daemon's status as the agent sees it, where its socket is, and who holds the memory slot")
    .option("--agent <id>", "the agent (default: main)")
    .action((opts) =>
      withClient(openclaw, settings, config, opts, async (client, caller, located) => {
        const status = await client.status();
        const problem = slotProblem(config);
        return {
          agent: caller.agent,
          workspace: caller.workspace,
          socket: located.socket,
          config: located.config,
          configFrom: located.from,
          memorySlot: problem ? `NOT memory-memstrata: ${problem}` : "memory-memstrata",
          daemon: status.daemon,
          access: status.access,
          agents: status.agents,
          conversation: status.conversation && { reachable: status.conversation.reachable, backend: status.conversation.backend },
        };
      }),
    );
  root
    .command("search")
    .description("search as the agent: its files (L3), or --corpus sessions|all for memstrata's L4 too")
    .argument("<query...>", "what to look for")
    .option("--agent <id>", "the agent (default: main)")
    .option("--corpus <corpus>", "memory (default), sessions or all")
    .option("--max-results <n>", "most results", (v) => Number.parseInt(v, 10))
    .action((words, opts) =>
      withClient(openclaw, settings, config, opts, (client) =>
        search(client, { query: words.join(" "), corpus: opts.corpus, maxResults: opts.maxResults }),
      ),
    );
  root
    .command("reindex")
    .description("bring the agent's L3 index up to date with its files (--rebuild: afresh)")
    .option("--agent <id>", "the agent (default: main)")
    .option("--rebuild", "rebuild the index from the files")
    .action((opts) => withClient(openclaw, settings, config, opts, (client) => client.reindex(opts.rebuild)));
}
