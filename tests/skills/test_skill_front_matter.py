"""SKILL.md opens with the YAML front matter OpenClaw's skill loader reads (docs/openclaw.md):
``name`` (the skill's folder name, kebab-case) and ``description``, each one line; ``metadata``
one line of JSON. Checked on the file ``init`` installs into a workspace."""

from __future__ import annotations

import json
import re

import yaml

from tests.helpers import init_root

FRONT = re.compile(r"\A---\n(.*?)\n---\n", re.S)


def test_the_installed_skill_has_openclaws_front_matter(tmp_path):
    init_root(tmp_path)
    installed = tmp_path / "workspace" / "skills" / "mem0-integration" / "SKILL.md"
    text = installed.read_text()
    found = FRONT.match(text)
    assert found, text[:200]
    block = found[1]
    data = yaml.safe_load(block)
    assert data["name"] == installed.parent.name and re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", data["name"])
    assert isinstance(data["description"], str) and 40 <= len(data["description"]) <= 1024
    for line in block.splitlines():  # the loader reads single-line values only
        assert re.match(r"^[a-z][a-z-]*: \S", line), line
    metadata_line = next(line for line in block.splitlines() if line.startswith("metadata: "))
    assert json.loads(metadata_line.removeprefix("metadata: "))["openclaw"]["emoji"]
    assert text[found.end() :].lstrip().startswith("# Skill: memory (memstrata)")
