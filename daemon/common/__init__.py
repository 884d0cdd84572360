"""What every room of the daemon uses, and the front too: configuration, contracts, limits, tokens.

Named ``common`` (the room was called ``shared`` once): "shared" is the L1 cluster core (``<main workspace>/shared/``)
alone, and L4 is conversation memory.

Nothing here imports another room: the front (``daemon.front``) and the service's
parts depend on this room, never the other way round.  Modules: ``config`` (the
YAML file's pydantic models), ``config_cache`` (the front's cache of it),
``settings`` (configuration → the parts' settings), ``contracts`` (the documents
the daemon answers with), ``domain_errors``, ``daemon_limits`` (the
daemon's own, beside the protocol's ``protocol/limits.py``), ``tokens``, ``guard``
(never_store), ``storage`` (full-disk health), ``audit``, ``jobs`` (calls handed to
an owning thread), ``echo`` (values cut before they are repeated), ``logs``,
``workspaces`` (the registry's agents) and ``current`` (the configuration in force).
"""
