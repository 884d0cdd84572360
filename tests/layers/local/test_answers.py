"""An L3 search's answer has one definition of its keys: protocol/answers.py's SearchAnswer.

:class:`layers.local.ranking.hybrid_search.Answer` builds it attribute by attribute (mypy holds
``to_dict`` to the TypedDict); these tests hold the two to the same keys, and
the daemon's contracts to the same definition.
"""

from __future__ import annotations

import dataclasses
import json

from daemon.common import contracts
from layers.local.ranking.hybrid_search import Answer, search
from layers.local.shapes import IndexStats
from layers.local.storage.index import Document, Identity, LocalIndex
from protocol.answers import LocalHit, SearchAnswer


def test_the_builder_has_a_field_for_every_key_of_the_answer_and_no_other():
    assert [f.name for f in dataclasses.fields(Answer)] == list(SearchAnswer.__annotations__)


def test_a_search_answer_as_sent_has_exactly_the_declared_keys(tmp_path):
    with LocalIndex(tmp_path / "i.sqlite", Identity()) as index:
        text = "# 2026-09-08\n\n## 事故\n- log-01 磁盘写满，Loki 停止写入\n"
        index.update_document(Document("memory/2026-09-08.md", text, "d1", "daily", "2026-09-08"))
        answer = search(index, "9月8日 Loki", mode="fts", explain=True).to_dict()
    sent = json.loads(json.dumps(answer))
    assert set(sent) == set(SearchAnswer.__annotations__)
    assert sent["results"] and all(set(hit) <= set(LocalHit.__annotations__) for hit in sent["results"])
    assert sent["dates"]["since"] == "2026-09-08" and sent["dates"]["from"]


def test_the_daemon_answers_with_the_protocol_s_definition_not_a_copy():
    assert contracts.SearchAnswer is SearchAnswer and contracts.LocalHit is LocalHit
    assert contracts.keys_of(contracts.IndexReport) >= contracts.keys_of(IndexStats)
