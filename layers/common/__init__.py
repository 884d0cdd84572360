"""What every layer uses, and the daemon too: none of it is a layer, and it imports no layer.

Why here and not in a layer: L3 and L4 must never import each other, and L1, L2 and the daemon
use the same helpers, so what two of them share lives below them all.

- ``fsutil``: containment checks and crash-safe writes (atomic replace, fsync, private files);
- ``safefs``: writing inside a directory someone else controls (an agent's workspace) without
  ever following a symlink;
- ``names``: file names as text that can always be encoded (surrogate-escaped bytes shown);
- ``ids``: the agent and project ids every layer agrees on (they end up in paths);
- ``yamlfile``: validated YAML whose errors name the file, the key and the line;
- ``textcost``: what a text costs in an LLM's context (L1's bundle and L3's answers budget alike);
- ``malloc``: glibc's allocator told to give memory back (models load and unload);
- ``lockowner``: who holds a lock file, and whether that process still runs (git's index lock,
  the daemon's start marker);
- ``numerals_dates``: Chinese numerals and the weekday and month names, read by L3's dates and
  L4's consolidation.
"""
