"""The fixtures the L4 layer's tests share: the real GGUF model and an embedded store on it."""

from __future__ import annotations

import pytest

from daemon.common.config import DEFAULT_MODEL_PATH
from layers.conversation.adapters.store import ConversationStore, StoreSettings
from layers.local.models.vectors import LocalEmbedder


@pytest.fixture(scope="module")
def embedder():
    assert DEFAULT_MODEL_PATH.is_file(), "the model is built by `make setup` (memstrata model build)"
    return LocalEmbedder(DEFAULT_MODEL_PATH, min_free_mb=0)


@pytest.fixture
def store(tmp_path, embedder):
    s = ConversationStore(StoreSettings("embedded", tmp_path / "l4"), embedder, embedder.dimension())
    s.connect()
    yield s
    s.close()
