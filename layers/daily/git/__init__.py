"""git plumbing for L2: every git command the daemon runs on a workspace or its history copy.

- ``run``: git as a child process with input on stdin, a deadline and a cancel from another thread;
- ``commit``: one commit of exactly the given paths, built in an index of its own, with what is
  staged checked first (and the index lock's owner recorded, layers/common/lockowner.py);
- ``log``: commits as git logs them, the same for a workspace and for the daemon's copy;
- ``history_copy``: a bare copy of what the daemon committed, under the state directory;
- ``repair``: a repository a power cut broke, found cheaply and repaired from the history copy;
- ``remote``: history copies pushed to a central remote (never forced), how far behind, an agent
  restored from there;
- ``shared_core``: the cluster-wide shared core through that remote, one way (hub -> spokes).

GitPython (``import git``) still runs the repository's small read-only commands; this package
is ``layers.daily.git`` and never shadows it (every import is absolute).
"""
