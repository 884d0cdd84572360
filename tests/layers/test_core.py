"""L1: load order, CJK-aware token estimates, visible truncation, missing files, containment."""

from __future__ import annotations

import os

from layers.common.textcost import estimate_tokens
from layers.core.bundle import load_core


def _workspace(tmp_path):
    ws = tmp_path / "ws"
    (ws / "shared").mkdir(parents=True)
    for name in ("CORE_INDEX.md", "IDENTITY.md", "SOUL.md", "USER.md", "AGENTS.md", "TOOLS.md"):
        (ws / name).write_text(f"# {name}\ncontent of {name}\n")
    (ws / "shared" / "b-rules.md").write_text("# b\n")
    (ws / "shared" / "a-rules.md").write_text("# a\n")
    return ws


def test_estimate_counts_cjk_per_character_and_ascii_per_four():
    assert estimate_tokens("abcd" * 100) == 100
    assert estimate_tokens("记忆" * 50) == 100
    assert estimate_tokens("Qdrant 部署在 6333 端口") == 5 + 4  # 5 CJK + ceil(13 other chars / 4)
    assert estimate_tokens("") == 0


def test_load_order_shared_first_then_start_files_then_on_demand(tmp_path):
    ws = _workspace(tmp_path)
    start = load_core("main", ws, ws / "shared")
    assert [s.name for s in start.sections] == [
        "shared/a-rules.md",
        "shared/b-rules.md",
        "CORE_INDEX.md",
        "IDENTITY.md",
        "SOUL.md",
        "USER.md",
    ]
    everything = load_core("main", ws, ws / "shared", on_demand=True)
    assert [s.name for s in everything.sections][-2:] == ["AGENTS.md", "TOOLS.md"]


def test_missing_file_is_reported_not_fatal(tmp_path):
    ws = _workspace(tmp_path)
    (ws / "USER.md").unlink()
    bundle = load_core("main", ws, ws / "shared")
    assert bundle.missing == ["USER.md"]
    assert "missing core files: USER.md" in bundle.render()
    assert "content of SOUL.md" in bundle.render()


def test_over_budget_truncates_with_a_visible_marker_and_lists_omitted(tmp_path):
    ws = _workspace(tmp_path)
    (ws / "IDENTITY.md").write_text("身份" * 10 + "\n" + "我是运维助手。\n" * 100)
    bundle = load_core("main", ws, ws / "shared", budget=60)
    assert bundle.truncated and bundle.tokens <= 60
    identity = next(s for s in bundle.sections if s.name == "IDENTITY.md")
    assert identity.truncated and identity.text.endswith("\n")
    assert bundle.omitted == ["SOUL.md", "USER.md"]
    text = bundle.render()
    assert "truncated to the 60-token budget" in text and "omitted: SOUL.md, USER.md" in text


def test_spoke_reads_the_shared_core_but_symlinks_out_are_not_followed(tmp_path):
    main = _workspace(tmp_path)
    spoke = main / "agents" / "ops-workspace"
    spoke.mkdir(parents=True)
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET\n")
    os.symlink(secret, spoke / "SOUL.md")
    bundle = load_core("ops", spoke, main / "shared")
    assert [s.name for s in bundle.sections][:2] == ["shared/a-rules.md", "shared/b-rules.md"]
    soul = next(s for s in bundle.sections if s.name == "SOUL.md")
    assert soul.missing and "outside the workspace" in soul.note
    assert "TOP SECRET" not in bundle.render()
