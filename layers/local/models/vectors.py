"""Embedders for L3 (and, later, L4): one interface, a local GGUF model or an HTTP endpoint.

The local model is a guest on a small machine.  It is loaded only when
``psutil`` reports enough free memory for it plus a reserve (the memory gate),
used for a batch, and unloaded after a quiet spell; unloading frees llama.cpp's
buffers and trims the C heap so the process really shrinks back.  While the
gate is closed nothing fails: chunks wait in the index's "to embed" set and
search is lexical, and the answer says so.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import psutil

from layers.local.models.model_parts import split_encoder

log = logging.getLogger(__name__)

MB = 1024 * 1024

# Query / passage prefixes each model family was trained with.
PROFILES: dict[str, tuple[str, str]] = {
    "e5": ("query: ", "passage: "),
    "bge-zh": ("为这个句子生成表示以用于检索相关文章：", ""),
    "plain": ("", ""),
}


# L3's relevance (``memstrata search --threshold``; L4 has its own, below): a query-to-passage cosine of the e5
# model mapped onto [0, 1] so that a threshold means what it
# means in mem0 (its default 0.1 drops most of what is unrelated).  Measured by bench/bench_relevance.py on
# the local multilingual-e5-small q4_0 (docs/facts.md, "Relevance"): unrelated pairs p50 0.744 (en) / 0.769
# (zh) / 0.759 (mixed), p95 0.79 / 0.85 / 0.85; related pairs p50 0.829 / 0.894 / 0.831.  Pooled, a
# threshold of 0.1 keeps 86% of related pairs and 27% of unrelated ones, 0.3 keeps 72% / 18%, 0.5 47% / 3%
# (a raw cosine kept 100% of both at any of them).  Chinese memories score high against Chinese queries
# whatever they say: the bands overlap and no single mapping separates them fully.
RELEVANCE_FLOOR = 0.78
RELEVANCE_CEILING = 0.92


def relevance(cosine: float, floor: float = RELEVANCE_FLOOR, ceiling: float = RELEVANCE_CEILING) -> float:
    """``cosine`` on the relevance scale: 0 at or below ``floor``, 1 at or above ``ceiling``, linear between."""
    return clamped((float(cosine) - floor) / (ceiling - floor))


# L4's relevance (issue 50 item 5): what mem0's thresholds (0.1-0.5) are compared with in a memory search.  The
# scale above kept 47% of related pairs at 0.5, and e5's cosines run ~0.07 higher when both sides are Chinese.
# Fitted by bench/bench_relevance.py on bench/relevance_pairs_tuned (224 labelled pairs, English and Chinese):
# related pairs p5/p50 0.789/0.829 (en), 0.845/0.898 (zh), unrelated p50/p95 0.766/0.810 (en), 0.837/0.894 (zh).
# Relevance is linear from the floor (0) over PAIR_SPAN (1) of cosine; the floor is the Chinese one when the
# query and the memory both hold Chinese characters.  docs/mem0.md, "Scores and thresholds", has the keep rates.
PAIR_FLOORS = {"en": 0.78, "zh": 0.85}
PAIR_SPAN = 0.04
_CJK_RANGES = ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x2FA1F))


def has_chinese(text: str) -> bool:
    """Whether ``text`` holds a CJK ideograph (its cosines with a Chinese query run higher)."""
    return any(lo <= ord(ch) <= hi for ch in text for lo, hi in _CJK_RANGES)


def pair_language(query: str, passage: str) -> str:
    """The scale a query-to-memory cosine is read on: ``zh`` when both are Chinese, ``en`` otherwise."""
    return "zh" if has_chinese(query) and has_chinese(passage) else "en"


def pair_relevance(cosine: float, query: str, passage: str) -> float:
    """L4's relevance of ``passage`` for ``query`` with no ceiling: clamped to [0, 1] it is the score a
    threshold is compared with; unclamped it keeps the order of what lies above 1 (no ties at the top)."""
    return (float(cosine) - PAIR_FLOORS[pair_language(query, passage)]) / PAIR_SPAN


def clamped(cosine: float) -> float:
    """The score of a model that was never measured here: its cosine, clamped to [0, 1]."""
    return min(1.0, max(0.0, float(cosine)))


class VectorsUnavailableError(RuntimeError):
    """Vectors cannot be produced right now; the message says why."""


class EmbeddingAborted(VectorsUnavailableError):
    """The embedder was stopped (:meth:`LocalEmbedder.abort`); nothing was embedded by this call."""


class Embedder(Protocol):
    """What the index and the broker need from an embedding model."""

    model_id: str  # recorded in every index / collection built with it

    def embed_passages(self, texts: list[str]) -> np.ndarray: ...

    def embed_query(self, text: str) -> np.ndarray: ...

    def dimension(self) -> int: ...  # the vector size (a collection is sized by it)

    def not_ready(self) -> str: ...  # why the model could not be used right now ("" when it could)

    def status(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class GateState:
    open: bool
    available_mb: int
    needed_mb: int
    reason: str

    def as_dict(self) -> dict:
        return asdict(self)


#: Under memory pressure a model unused this long is let go (it is never unloaded mid-use).
PRESSURE_GRACE_S = 5.0


class MemoryGate:
    """Open when free memory covers the model plus a reserve that must stay free."""

    def __init__(self, min_free_mb: int, model_bytes: int) -> None:
        self.min_free_mb = min_free_mb
        self.model_bytes = model_bytes

    def pressure(self) -> bool:
        """The gate's own signal, seen from a loaded model: less than the reserve is free now."""
        return psutil.virtual_memory().available // MB < self.min_free_mb

    def check(self) -> GateState:
        available = psutil.virtual_memory().available // MB
        needed = self.min_free_mb + -(-self.model_bytes // MB)
        if available >= needed:
            return GateState(True, available, needed, "")
        return GateState(
            False,
            available,
            needed,
            f"memory gate closed: {available} MB free, the model needs {needed} MB "
            f"({self.model_bytes // MB} MB model + {self.min_free_mb} MB reserve)",
        )


def should_unload(policy: str, gate: MemoryGate, idle_s: float, idle_unload_s: float) -> bool:
    """``pressure`` (the default): kept warm while memory is plentiful, let go once the host needs
    the memory (after :data:`PRESSURE_GRACE_S` unused); ``idle``: also after ``idle_unload_s`` unused,
    whatever the memory (the old fixed-idle behaviour)."""
    if policy == "idle" and idle_s >= idle_unload_s:
        return True
    return idle_s >= min(PRESSURE_GRACE_S, idle_unload_s) and gate.pressure()


_GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def gguf_embedding_length(path: Path) -> int:
    """The model's vector size from the GGUF header, without loading it.

    ``gguf.GGUFReader`` parses every tensor (~9 s for this model) and llama.cpp's
    ``vocab_only`` load leaves ``n_embd`` at 0; the key/value section at the head
    of the file is all that is needed.
    """
    import struct

    with open(path, "rb") as fh:

        def read(fmt: str):
            size = struct.calcsize("<" + fmt)
            return struct.unpack("<" + fmt, fh.read(size))[0]

        def read_str() -> bytes:
            return fh.read(read("Q"))

        def skip(kind: int) -> object:
            if kind == 8:
                return read_str()
            if kind == 9:
                item, count = read("I"), read("Q")
                for _ in range(count):
                    skip(item)
                return None
            return read(_GGUF_SCALARS[kind])

        if fh.read(4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        read("I")  # version
        read("Q")  # tensor count
        for _ in range(read("Q")):
            key, kind = read_str(), read("I")
            value = skip(kind)
            if key.endswith(b".embedding_length"):
                return int(value)  # type: ignore[call-overload]  # an integer field: skip() read it as one
    raise ValueError(f"{path} does not say its embedding length")


class LocalEmbedder:
    """A GGUF embedding model through llama.cpp, resident only while it is being used."""

    def __init__(
        self,
        model_path: Path,
        profile: str = "e5",
        *,
        min_free_mb: int = 300,
        idle_unload_s: float = 120.0,
        threads: int = 2,
        max_tokens: int = 256,
        unload: str = "pressure",
    ) -> None:
        self.model_path = model_path
        self.unload_policy = unload
        self.query_prefix, self.passage_prefix = PROFILES[profile]
        self.profile = profile
        self.idle_unload_s = idle_unload_s
        self.threads = threads
        self.max_tokens = max_tokens
        size = model_path.stat().st_size if model_path.is_file() else 0
        # the split form (embed_llama.LlamaEmbedder) loads its encoder too; its vectors are the plain
        # GGUF's bit for bit (tests/layers/local/test_vectors.py), so the identity names the GGUF alone
        encoder = split_encoder(model_path)
        self.gate = MemoryGate(min_free_mb, size + (encoder.stat().st_size if encoder else 0))
        self.model_id = f"gguf:{model_path.name}:{size}:{profile}"
        self._model = None
        self._lock = threading.RLock()
        self._loading: threading.Event | None = None
        self._loading_lock = threading.Lock()
        self._aborted = threading.Event()
        self._last_used = 0.0
        self.loads = 0
        self.dim: int | None = None
        self.split_problem = ""  # why the split form could not be used at the last load ("" when it was)

    def configure(self, *, min_free_mb: int, idle_unload_s: float, unload: str | None = None) -> None:
        """Settings a reload may change without touching the index identity."""
        self.gate.min_free_mb = min_free_mb
        self.idle_unload_s = idle_unload_s
        if unload is not None:
            self.unload_policy = unload

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def abort(self) -> None:
        """Stop for good (the process is stopping), from any thread, without waiting.

        An encode or a load in progress ends within one graph node (llama.cpp's
        abort callback) and every call from now on raises :class:`EmbeddingAborted`,
        so no thread stays inside llama.cpp while the process exits; ``unload``
        then leaves the model to the exit instead of freeing it.
        """
        self._aborted.set()

    def dimension(self) -> int:
        """The vector size, known without loading the model (a collection is sized by it)."""
        if self.dim is None:
            if not self.model_path.is_file():
                raise VectorsUnavailableError(f"no model at {self.model_path}: run `memstrata model build`")
            self.dim = gguf_embedding_length(self.model_path)
        return self.dim

    def not_ready(self) -> str:
        """Why the model could not be used right now ("" when it could)."""
        if self.loaded:
            return ""
        if not self.model_path.is_file():
            return f"no model at {self.model_path}"
        return self.gate.check().reason

    def _ensure_loaded(self):
        if self._model is not None:
            return self._model
        if not self.model_path.is_file():
            raise VectorsUnavailableError(
                f"no model at {self.model_path}: run `memstrata model build` (make setup does)"
            )
        state = self.gate.check()
        if not state.open:
            raise VectorsUnavailableError(state.reason)
        from layers.local.models.embed_llama import LlamaEmbedder, SplitFormError  # llama.cpp only when really needed

        started = time.monotonic()

        def load(split: bool) -> LlamaEmbedder:
            return LlamaEmbedder(
                self.model_path,
                n_ctx=self.max_tokens,
                n_threads=self.threads,
                should_abort=self._aborted.is_set,
                pool_windows=True,  # a text longer than max_tokens: the mean of its windows, not its first part
                split=split,
            )

        try:
            self._model = load(split=True)
            self.split_problem = ""
        except SplitFormError as exc:  # the same vectors come from the plain GGUF, slower: nothing waits
            if str(exc) != self.split_problem:
                log.warning("%s; embedding with the plain GGUF meanwhile", exc)
            self.split_problem = str(exc)
            self._model = load(split=False)
        self.dim = self._model.dim
        self.loads += 1
        log.info(
            "loaded %s in %.1f s (%d MB were free)",
            self.model_path.name,
            time.monotonic() - started,
            state.available_mb,
        )
        return self._model

    def _embed(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            try:
                if self._aborted.is_set():
                    raise RuntimeError("stopped")
                model = self._ensure_loaded()
                vectors = model.embed(texts)
            except RuntimeError:  # embed_llama.EncodeAborted among others
                if self._aborted.is_set():
                    raise EmbeddingAborted("the embedder is stopping; these texts wait for the next start") from None
                raise
            self._last_used = time.monotonic()
            return vectors

    # Texts are stripped: sentencepiece (and llama.cpp) drop trailing whitespace,
    # so stripping keeps vectors identical to the model's reference engine.
    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return self._embed([self.passage_prefix + t.strip() for t in texts])

    def embed_query(self, text: str) -> np.ndarray:
        return self._embed([self.query_prefix + text.strip()])[0]

    @property
    def calibrated(self) -> bool:
        """Whether :meth:`relevance` was measured for this model (the e5 profile), or is the cosine clamped."""
        return self.profile == "e5"

    def relevance(self, cosine: float) -> float:
        """A query-to-passage cosine on the relevance scale a threshold is compared with (see :func:`relevance`)."""
        return relevance(cosine) if self.calibrated else clamped(cosine)

    def pair_relevance(self, cosine: float, query: str, passage: str) -> float:
        """L4's unclamped relevance (:func:`pair_relevance`), or the cosine itself for a model never measured."""
        return pair_relevance(cosine, query, passage) if self.calibrated else float(cosine)

    def embed_query_within(self, text: str, budget_s: float) -> np.ndarray:
        """:meth:`embed_query`, or :class:`VectorsUnavailableError` saying why once ``budget_s`` is
        spent: a model that is not loaded is loaded on a thread of its own (it stays loaded for
        the next call), a model busy with a batch is waited for; a search then answers lexically
        at once instead of holding its caller for the seconds a load takes on a loaded host."""
        deadline = time.monotonic() + budget_s
        if self._model is None:
            loading = self._load_in_background()
            if not loading.wait(budget_s):
                raise VectorsUnavailableError(
                    f"the model is loading (more than {budget_s:g} s on this host now): this answer is lexical"
                )
        if not self._lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise VectorsUnavailableError(f"the model stayed busy for {budget_s:g} s: this answer is lexical")
        try:
            return self.embed_query(text)
        finally:
            self._lock.release()

    def _load_in_background(self) -> threading.Event:
        """Start loading the model on a thread (one at a time); the event is set once it is done."""
        with self._loading_lock:
            if self._loading is not None and not self._loading.is_set():
                return self._loading
            done = threading.Event()
            self._loading = done

        def load() -> None:
            try:
                with self._lock:
                    self._ensure_loaded()
                    self._last_used = time.monotonic()  # loaded for a caller: not let go before its use
            except Exception as exc:  # the caller's search answers lexically; the next call retries
                log.info("background load of %s failed: %s", self.model_path.name, exc)
            finally:
                done.set()

        threading.Thread(target=load, name="model-load", daemon=True).start()
        return done

    def unload(self) -> bool:
        with self._lock:
            if self._model is None:
                return False
            if self._aborted.is_set():
                self._model.abandon()  # stopping: the exit frees it, seconds sooner than free() on a busy host
                self._model = None
                log.info("left %s to the process exit", self.model_path.name)
                return True
            self._model.close()
            self._model = None
            log.info("unloaded %s", self.model_path.name)
            return True

    def maybe_unload(self, now: float | None = None) -> bool:
        """Unload when :func:`should_unload` says so (memory pressure, or the idle policy); True when it did."""
        now = time.monotonic() if now is None else now
        if self._model is not None and should_unload(
            self.unload_policy, self.gate, now - self._last_used, self.idle_unload_s
        ):
            return self.unload()
        return False

    def status(self) -> dict:
        gate = self.gate.check()
        idle = round(time.monotonic() - self._last_used, 1) if self._last_used else None
        return {
            "backend": "local",
            "model": str(self.model_path),
            "model_id": self.model_id,
            "form": self._model.form if self._model else "split" if split_encoder(self.model_path) else "plain",
            "form_problem": self.split_problem or None,
            "loaded": self.loaded,
            "gate": gate.as_dict(),
            "idle_s": idle,
            "idle_unload_s": self.idle_unload_s,
            "unload": self.unload_policy,
            "loads": self.loads,
        }


class OpenAIEmbedder:
    """An OpenAI-compatible ``/embeddings`` endpoint; the key comes from the environment."""

    def __init__(self, base_url: str, model: str, dim: int, api_key_env: str, timeout_s: float = 10.0) -> None:
        import httpx

        self.model = model
        self.dim = dim
        self.api_key_env = api_key_env
        self.model_id = f"openai:{model}:{dim}"
        self._client = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout_s)
        self.base_url = base_url

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        import httpx

        key = os.environ.get(self.api_key_env)
        if not key:
            raise VectorsUnavailableError(f"environment variable {self.api_key_env} (the embedding API key) is not set")
        try:
            response = self._client.post(
                "/embeddings",
                json={"model": self.model, "input": texts, "dimensions": self.dim},
                headers={"Authorization": f"Bearer {key}"},
            )
            response.raise_for_status()
            data = sorted(response.json()["data"], key=lambda d: d["index"])
        except (httpx.HTTPError, KeyError, ValueError) as exc:
            raise VectorsUnavailableError(
                f"embedding endpoint {self.base_url} failed: {exc.__class__.__name__}"
            ) from None
        vectors = np.asarray([d["embedding"] for d in data], dtype=np.float32)
        if vectors.shape[1] != self.dim:
            raise VectorsUnavailableError(
                f"endpoint returned {vectors.shape[1]}-d vectors, configured dim is {self.dim}"
            )
        return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_passages([text])[0]

    calibrated = False  # an endpoint's model was never measured here: its cosine, clamped, is the score

    def relevance(self, cosine: float) -> float:
        return clamped(cosine)

    def pair_relevance(self, cosine: float, query: str, passage: str) -> float:
        return float(cosine)

    def dimension(self) -> int:
        return self.dim

    def not_ready(self) -> str:
        return "" if os.environ.get(self.api_key_env) else f"environment variable {self.api_key_env} is not set"

    def status(self) -> dict:
        return {"backend": "openai", "model_id": self.model_id, "base_url": self.base_url, "loaded": True}
