"""L4 policy: the rules, pure: a registry, a caller and a memory go in, a decision comes out.

- ``rules``: who may write where, who may read what, and how long a memory lives (types, trust,
  visibility, retention);
- ``registry``: the project registry (agents, projects, members), validated and written atomically;
- ``metadata``: mem0's ids as data, and the caller's own metadata;
- ``validity``: a memory's validity window (valid until superseded; archived when it decays);
- ``decay``: importance from age and use;
- ``filters``: mem0's filter language, checked, combined with visibility, translated for the engines.

No store is opened here: the adapters and the daemon's broker carry these decisions out, so the
rules that keep one agent's private memory from another are read (and tested) in one place.
"""
