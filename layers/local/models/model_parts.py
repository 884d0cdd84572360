"""Where the split form of a local model lives: beside its GGUF, named after it.

``memstrata model build`` writes the model's standard GGUF and, beside it, the
same model split in two (layers/local/models/model_build.py says why): an encoder GGUF
without a vocabulary and the word table as a NumPy array.  The runtime
(layers/local/models/embed_llama.py) uses the split form when both parts are there and
the plain GGUF otherwise, and the index identity (layers/local/models/vectors.py)
names the encoder, so this naming is kept in one place.
"""

from __future__ import annotations

from pathlib import Path


def split_paths(model: Path) -> tuple[Path, Path]:
    """``<name>.encoder.gguf`` and ``<name>.tokens.npy`` beside ``<name>.gguf``."""
    stem = model.name.removesuffix(".gguf")
    return model.with_name(stem + ".encoder.gguf"), model.with_name(stem + ".tokens.npy")


def split_encoder(model: Path) -> Path | None:
    """The encoder of the model's split form, when both of its parts exist; else None (a plain GGUF)."""
    encoder, tokens = split_paths(model)
    return encoder if encoder.is_file() and tokens.is_file() else None
