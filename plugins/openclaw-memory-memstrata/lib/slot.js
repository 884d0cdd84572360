// Who answers memory_search and memory_get. memory-core, OpenClaw's bundled memory plugin, declares both
// and stays loaded when another plugin takes the memory slot (OpenClaw 2026.9.6 keeps its tools and its
// consolidation lifecycle, skipping only its index): the gateway then logs "plugin tool name conflict
// (memory-memstrata): memory_search" and agents keep memory-core's tools. Two settings fix it.
import { PLUGIN_ID } from "./settings.js";

export const SLOT_FIX =
  `openclaw config set plugins.slots.memory ${PLUGIN_ID} && openclaw config set plugins.entries.memory-core.enabled false, ` +
  "then restart the gateway (`openclaw memory …` goes with memory-core; `openclaw memstrata …` replaces it)";

/** A sentence saying why memory_search and memory_get are not this plugin's, or null when they are. */
export function slotProblem(config) {
  const plugins = config?.plugins ?? {};
  const slot = plugins.slots?.memory;
  const problems = [];
  if (slot !== PLUGIN_ID) {
    const holder = slot === undefined ? "memory-core (OpenClaw's default)" : JSON.stringify(slot);
    problems.push(`plugins.slots.memory is ${holder}, not ${PLUGIN_ID}`);
  }
  if (plugins.entries?.["memory-core"]?.enabled !== false && !(plugins.deny || []).includes("memory-core")) {
    problems.push("memory-core is still enabled and declares memory_search and memory_get (a tool-name conflict: its tools win)");
  }
  return problems.length ? `${problems.join("; ")}. To make them memstrata's: ${SLOT_FIX}` : null;
}
