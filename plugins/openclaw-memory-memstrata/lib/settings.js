// The plugin's settings (plugins.entries.memory-memstrata.config), with their defaults. None is needed:
// memstrata's configuration is found as its CLI finds it.
import { findSocket } from "./locate.js";

export const PLUGIN_ID = "memory-memstrata";
export const DEFAULTS = Object.freeze({
  autoRecall: false,
  autoCapture: false,
  recallMaxTokens: 400,
  recallCorpus: "all",
  captureMaxChars: 2000,
  timeoutMs: 60_000,
  hookTimeoutMs: 10_000,
});

function pick(value, ok, fallback) {
  return ok(value) ? value : fallback;
}

export function settingsOf(pluginConfig, env = process.env) {
  const c = pluginConfig && typeof pluginConfig === "object" ? pluginConfig : {};
  const int = (lo, hi) => (v) => Number.isInteger(v) && v >= lo && v <= hi;
  const settings = {
    config: typeof c.config === "string" && c.config ? c.config : undefined,
    autoRecall: c.autoRecall === true,
    autoCapture: c.autoCapture === true,
    recallMaxTokens: pick(c.recallMaxTokens, int(50, 8000), DEFAULTS.recallMaxTokens),
    recallCorpus: pick(c.recallCorpus, (v) => ["memory", "sessions", "all"].includes(v), DEFAULTS.recallCorpus),
    captureMaxChars: pick(c.captureMaxChars, int(200, 20000), DEFAULTS.captureMaxChars),
    timeoutMs: pick(c.timeoutMs, int(1000, 600000), DEFAULTS.timeoutMs),
    hookTimeoutMs: pick(c.hookTimeoutMs, int(500, 120000), DEFAULTS.hookTimeoutMs),
  };
  // Found at each call: memstrata.yaml may be written after the gateway starts (install, then init).
  settings.locate = () => findSocket(settings.config, env);
  return settings;
}
