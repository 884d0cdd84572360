"""Where a file event goes: from the watcher to the agent's tracker, its commit and its index.

``watcher`` (inotify through watchdog) → ``routing`` (which agent's workspace) →
``tracker`` (the agent's files: ``fileread`` reads a version once, ``filestate``
remembers it) → ``committer``/``commits`` (git, off the loop) and the indexer
(``daemon.local``).  ``agents`` holds the trackers, ``reconcile`` compares a
workspace with what the daemon knows, ``provision`` sets a new agent up, ``skill``
installs the memory skill in its workspace.
"""
