"""The running daemon: start, the loop, reload, stop, the status snapshot.

``memory_daemon.MemoryDaemon`` composes the rooms (``files``, ``local``,
``conversation``, ``api``) and hands each part the collaborators it uses.
"""
