"""The guard beyond cosine: which wordings state one fact and which state two."""

from __future__ import annotations

import pytest

from layers.conversation.consolidation.sameness import distinct_reason, normalised, tokens


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("会议改到周三下午三点", "会议改到星期三下午三点"),
        ("The meeting is on Wednesday", "the meeting is on wednesday."),
        ("backup at 04:00", "backup at 4:00"),
        ("第三次部署", "第3次部署"),
        ("Qdrant 部署在 6333 端口", "记一下：Qdrant 部署在 6333 端口"),
        ("the build runs on kestrel", "the build runs on kestrel, as before"),
        ("the cache is enabled in dev", "Reminder: the cache is enabled in dev (checked)"),
        ("服务器在北京机房", "服务器在北京机房，记住"),
    ],
)
def test_restatements_are_one_fact(a, b):
    assert distinct_reason(a, b) is None


@pytest.mark.parametrize(
    ("a", "b", "kind"),
    [
        ("会议改到周三", "会议改到周四", "weekday"),
        ("会议改到礼拜三", "The meeting moved to Thursday", "weekday"),
        ("release on 2026-09-02", "release on 2026-9-3", "date"),
        ("用户住在十二楼", "用户住在 21 楼", "number"),
        ("每天三次", "每天四次", "number"),
        ("the release is in March", "the release is in April", "month"),
        ("host kestrel-3 serves the API", "host kestrel-4 serves the API", "identifier"),
        ("ask Alice first", "ask Bob first", "identifier"),
        ("the cache is enabled", "the cache isn't enabled", "negation"),
        ("服务器在北京", "服务器在上海", "words"),
        ("Alice reports to Bob", "Bob reports to Alice", "order"),
        ("port 6333", "port 6333 and 6334", "number"),
        ("the API was on kestrel", "the API is on kestrel", "words"),
        ("服务器在北京机房", "服务器以前在北京机房", "inside the statement"),
        ("the build runs on kestrel", "the build runs on kestrel only on weekends", "run on"),
        ("用户喜欢简洁的回答", "用户喜欢简洁的回答；另外用户住在上海", "of its own"),
        ("用户喜欢简洁的回答", "用户喜欢简洁的回答，但技术问题要详细", "of its own"),
    ],
)
def test_distinct_facts_are_kept_apart_and_the_reason_names_what_differs(a, b, kind):
    reason = distinct_reason(a, b)
    assert reason is not None and kind in reason


def test_exact_key_ignores_case_width_space_and_punctuation():
    assert normalised("Qdrant ６３３３ 端口。") == normalised("qdrant 6333端口")
    assert normalised("6333") != normalised("6334")


def test_numerals_count_only_where_they_count_something():
    assert [t.key for t in tokens("记一下") if t.kind == "number"] == []
    assert [t.key for t in tokens("一百零八个") if t.kind == "number"] == ["108"]
    assert [t.key for t in tokens("二零二六年") if t.kind == "number"] == ["2026"]
