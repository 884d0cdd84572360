"""L1 core memory: the files an agent reads at the start of every session.

``bundle``: CORE_INDEX, IDENTITY, SOUL and USER (AGENTS and TOOLS on demand), after the cluster's
shared core (``<main workspace>/shared/*.md``, the one place the word "shared" names), loaded in a
fixed order, measured in estimated tokens and cut at a budget with a visible marker.  The files are
markdown in the workspace; L2 versions them and L3 indexes them, L1 only reads them.
"""
