"""L1 core memory: the files an agent reads at the start of every session.

The bundle is what an agent's context window pays for on every turn, so it is
loaded in a fixed order, measured in (estimated) tokens and cut at a budget with
a visible marker: an agent that silently loses the end of SOUL.md behaves
differently without anyone knowing why.

Order: the cluster-wide shared core (``<main workspace>/shared/*.md``, readable by
every agent), then CORE_INDEX, IDENTITY, SOUL, USER; AGENTS and TOOLS only when
asked for (they are reference material, loaded on demand).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from layers.common import safefs
from layers.common.textcost import estimate_tokens

START_FILES = ("CORE_INDEX.md", "IDENTITY.md", "SOUL.md", "USER.md")
ON_DEMAND_FILES = ("AGENTS.md", "TOOLS.md")
CORE_FILES = START_FILES + ON_DEMAND_FILES
SHARED_DIR = "shared"

# Reading is capped so that a runaway 50 MB SOUL.md cannot exhaust memory; the
# cap is far above any budget a context window could pay for.
_READ_CAP_BYTES = 4 * 1024 * 1024


@dataclass
class CoreSection:
    """One file of the bundle, as read (or not) from disk."""

    name: str
    path: str
    text: str = ""
    tokens: int = 0
    missing: bool = False
    truncated: bool = False
    note: str = ""


@dataclass
class CoreBundle:
    """The session-start bundle of one agent, ready to print or serialise."""

    agent: str
    budget: int | None
    sections: list[CoreSection] = field(default_factory=list)
    omitted: list[str] = field(default_factory=list)
    full_tokens: int = 0

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.sections if not s.missing)

    @property
    def truncated(self) -> bool:
        return bool(self.omitted) or any(s.truncated for s in self.sections)

    @property
    def missing(self) -> list[str]:
        return [s.name for s in self.sections if s.missing]

    def render(self) -> str:
        """Plain text for an agent's context: file banners, content, explicit markers."""
        budget = f", budget {self.budget}" if self.budget else ""
        out = [f"<!-- memstrata core bundle: agent {self.agent}, ~{self.tokens} tokens{budget} -->"]
        for section in self.sections:
            if section.missing:
                continue
            out.append(f"=== {section.name} (~{section.tokens} tokens) ===")
            out.append(section.text.rstrip("\n"))
            out.append("")
        if self.truncated:
            omitted = f"; omitted: {', '.join(self.omitted)}" if self.omitted else ""
            out.append(
                f"[… memstrata: truncated to the {self.budget}-token budget, showing ~{self.tokens} of "
                f"~{self.full_tokens} tokens{omitted}. Ask for a larger --budget to read the rest.]"
            )
        if self.missing:
            out.append(f"[memstrata: missing core files: {', '.join(self.missing)}]")
        return "\n".join(out).rstrip("\n") + "\n"

    def to_json(self) -> str:
        data = asdict(self)
        data.update(tokens=self.tokens, truncated=self.truncated, missing=self.missing)
        return json.dumps(data, ensure_ascii=False, indent=2)


def _read_section(name: str, root: Path, rel: str) -> CoreSection:
    """``root/rel`` as a section, read through one no-follow fd (a symlink anywhere on the way is not read)."""
    section = CoreSection(name=name, path=str(root / rel))
    try:
        fd = safefs.open_file(root, rel)
    except (FileNotFoundError, NotADirectoryError):
        section.missing = True
        section.note = "file does not exist"
        return section
    except safefs.UnsafePathError as exc:
        section.missing = True
        symlink = "symbolic link" in exc.why
        section.note = "symbolic link: not followed (it could lead outside the workspace)" if symlink else exc.why
        return section
    except PermissionError as exc:
        section.missing = True
        section.note = f"cannot be read ({exc.strerror})"
        return section
    os.set_blocking(fd, True)  # a regular file (checked by open_file)
    with os.fdopen(fd, "rb") as fh:
        raw = fh.read(_READ_CAP_BYTES + 1)
    if len(raw) > _READ_CAP_BYTES:
        raw = raw[:_READ_CAP_BYTES]
        section.note = f"read only the first {_READ_CAP_BYTES // (1024 * 1024)} MB"
    section.text = raw.decode("utf-8", errors="replace")
    section.tokens = estimate_tokens(section.text)
    return section


def _truncate_to(section: CoreSection, allowance: int) -> None:
    """Keep whole lines of ``section`` while they fit in ``allowance`` tokens."""
    kept: list[str] = []
    used = 0
    for line in section.text.splitlines(keepends=True):
        cost = estimate_tokens(line)
        if used + cost > allowance:
            break
        kept.append(line)
        used += cost
    section.text = "".join(kept)
    section.tokens = used
    section.truncated = True


def shared_core_files(shared_dir: Path | None) -> list[Path]:
    """The cluster-wide shared core files, in a stable (name) order."""
    if shared_dir is None or not shared_dir.is_dir():
        return []
    return sorted(p for p in shared_dir.glob("*.md") if p.is_file())


def load_core(
    agent: str,
    workspace: Path,
    shared_dir: Path | None = None,
    *,
    on_demand: bool = False,
    budget: int | None = None,
) -> CoreBundle:
    """Assemble the core bundle of ``agent`` in load order, cut at ``budget`` tokens.

    ``shared_dir`` is the main workspace's ``shared/`` directory; it is read with
    the main workspace as its containment root, so a spoke agent can read the
    shared core but nothing else of the main workspace.
    """
    bundle = CoreBundle(agent=agent, budget=budget)
    sections: list[CoreSection] = []
    for path in shared_core_files(shared_dir):
        assert shared_dir is not None
        sections.append(_read_section(f"{SHARED_DIR}/{path.name}", shared_dir.parent, f"{SHARED_DIR}/{path.name}"))
    names = START_FILES + (ON_DEMAND_FILES if on_demand else ())
    for name in names:
        sections.append(_read_section(name, workspace, name))

    bundle.full_tokens = sum(s.tokens for s in sections)
    remaining = budget if budget is not None else None
    for section in sections:
        if remaining is None or section.missing or section.tokens <= remaining:
            bundle.sections.append(section)
            if remaining is not None and not section.missing:
                remaining -= section.tokens
            continue
        if remaining > 0:
            _truncate_to(section, remaining)
            bundle.sections.append(section)
            remaining = 0
        else:
            bundle.omitted.append(section.name)
    return bundle
