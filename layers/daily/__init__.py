"""L2 daily memory: MEMORY.md plus memory/YYYY-MM-DD.md, versioned with git.

- ``workspace_repo``: the daily-file convention (append a note, names that break it, archiving)
  and the workspace's repository as the daemon drives it (``WorkspaceRepo``: commits of exactly
  the given paths, restores, repairs), the one face the daemon's files room uses;
- ``git/``: the git plumbing underneath, which only L2 needs: git as a child process the daemon can
  cut, one commit built from git's plumbing, the log, the history copy out of the agents' reach, the
  repair of a repository a power cut broke.

Why git lives inside L2: git is what makes L1/L2 recoverable, and no other layer runs it.
"""

# The file names of the convention, here so that who only needs to recognise a daily file (the daemon's
# workspaces, every front call that finds an agent) does not import the git side with them.
MEMORY_DIR = "memory"
LONG_TERM_FILE = "MEMORY.md"
