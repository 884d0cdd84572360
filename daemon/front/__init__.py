"""What an agent or an operator runs: the ``memstrata`` commands, the client, the MCP server, status.

The front stays light (an agent calls it many times a session): it talks to the
running daemon over its Unix socket (``client``) and imports only ``daemon.common``
and ``daemon.ops``; the few offline paths into the service (``memstrata run``,
``status`` and ``search`` with the daemon down) are named in
tests/daemon/test_import_graph.py.
"""
