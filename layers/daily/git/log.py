"""Commits as git logs them, the same for a workspace's repository and the daemon's copy of it."""

from __future__ import annotations

from dataclasses import dataclass

LOG_FORMAT = "%H%x1f%aI%x1f%an%x1f%s"


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    time: str  # ISO 8601 with offset
    author: str
    subject: str

    @property
    def short(self) -> str:
        return self.sha[:10]


def parse_log(output: str) -> list[CommitInfo]:
    """``git log --format=LOG_FORMAT`` output, newest first."""
    commits = []
    for line in output.splitlines():
        parts = line.split("\x1f")
        if len(parts) == 4:
            commits.append(CommitInfo(*parts))
    return commits
