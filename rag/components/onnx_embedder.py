"""Sentence-BERT on ONNX Runtime: the embedder of CPUs without native bf16, from the model exported once to ONNX;
no torch when it runs.

Same vectors as sentence-transformers in float32 (cosine ≥ 0.99999 on the Python docs), at 1.0-1.4× torch
float32's speed on 2 cores (measured on two machines), and a process that starts without importing torch.
sentence-transformers' own ONNX backend would be the library's way, but it needs optimum, which pins
transformers below the 5.x this project uses; so the model is exported here (torch.onnx, once, cached) and run
with onnxruntime and the model's own `tokenizers` tokenizer.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from rag.components.coalesce import RECENT_QUERIES, Coalescer
from rag.core.ports import Vectors

if TYPE_CHECKING:
    import onnxruntime
    from tokenizers import Tokenizer

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
FLOAT_FILE, INT8_FILE = "model.onnx", "model-int8.onnx"
# The sentence-transformers modules this embedder reproduces; a model with others runs on torch.
SUPPORTED_MODULES = {"sentence_transformers.models.Transformer", "sentence_transformers.models.Pooling",
                     "sentence_transformers.models.Normalize"}
POOLING_MODES = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls"}


@dataclass(frozen=True, slots=True)
class ModelFolder:
    """What a sentence-transformers folder says about running it: length limit, pooling, prompts, width."""

    path: Path
    max_seq_length: int
    pooling: str  # "mean" | "cls"
    dimension: int
    prompts: dict[str, str]

    @classmethod
    def read(cls, path: Path) -> ModelFolder | None:
        """The folder's settings, or None when it holds modules or pooling this embedder does not reproduce."""
        try:
            modules = json.loads((path / "modules.json").read_text())
            pooling_dir = next(path / m["path"] for m in modules if m["type"].endswith(".Pooling"))
            pooling = json.loads((pooling_dir / "config.json").read_text())
            limits = json.loads((path / "sentence_bert_config.json").read_text())
        except (OSError, ValueError, KeyError, StopIteration):
            return None
        modes = [mode for key, mode in POOLING_MODES.items() if pooling.get(key)]
        active = [key for key, value in pooling.items() if key.startswith("pooling_mode") and value]
        if {m["type"] for m in modules} - SUPPORTED_MODULES or len(modes) != 1 or len(active) != 1 \
                or not (path / "tokenizer.json").is_file():
            return None
        st_config = path / "config_sentence_transformers.json"
        prompts = json.loads(st_config.read_text()).get("prompts") or {} if st_config.is_file() else {}
        # sentence-transformers' defaults come first: its empty "document" prompt shadows a "passage" one, and
        # both backends must give the same vectors (an index embedded on a GPU is queried on CPUs).
        prompts = {"query": "", "document": ""} | {k: v or "" for k, v in prompts.items()}
        return cls(path, int(limits.get("max_seq_length") or 512), modes[0],
                   int(pooling["word_embedding_dimension"]), prompts)

    def prompt(self, *names: str) -> str:
        """The first of the named prompts the model has (the order sentence-transformers tries them in)."""
        return next((self.prompts[name] for name in names if name in self.prompts), "")


class OnnxEmbedder:
    """Embeds with an ONNX Runtime session; rows are L2-normalized, like the torch embedder's."""

    def __init__(self, session: onnxruntime.InferenceSession, tokenizer: Tokenizer, folder: ModelFolder,
                 name: str, batch_size: int = 64) -> None:
        self._session, self._tokenizer, self._folder = session, tokenizer, folder
        self._inputs = {i.name for i in session.get_inputs()}
        self.name = name
        self.batch_size = batch_size
        self._queries: Coalescer[str, Vectors] = Coalescer(self._embed_queries, most=batch_size,
                                                           remember=RECENT_QUERIES)

    @property
    def max_tokens(self) -> int:
        """Tokens of text one input may hold: the model's limit minus special tokens and the passage prompt."""
        prompt = self._folder.prompt("document", "passage", "corpus")
        return self._folder.max_seq_length - len(self._tokenizer.encode(prompt).ids)

    @property
    def dimension(self) -> int:
        """Length of one embedding vector."""
        return self._folder.dimension

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        """Embed many passages with the model's passage prompt, longest first so batches carry little padding."""
        prompt = self._folder.prompt("document", "passage", "corpus")
        return self._embed([prompt + text for text in texts])

    def embed_query(self, text: str) -> Vectors:
        """Embed one question with the model's query prompt; a 1-D normalized vector. Questions asked at the same
        time from other threads go through the model together (rag.components.coalesce)."""
        return self._queries(text)

    def _embed_queries(self, texts: list[str]) -> Vectors:
        prompt = self._folder.prompt("query")
        rows = self._embed([prompt + text for text in texts])
        rows.flags.writeable = False  # shared with whoever asks the same question next (Coalescer's memory)
        return rows

    def _embed(self, texts: list[str]) -> Vectors:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        for start in range(0, len(order), self.batch_size):
            rows = order[start:start + self.batch_size]
            out[rows] = self._run([texts[i] for i in rows])
        return out

    def _run(self, texts: list[str]) -> Vectors:
        encodings = self._tokenizer.encode_batch(texts)  # padded to the longest (set up in load_onnx_embedder)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = self._session.run(None, {k: v for k, v in feed.items() if k in self._inputs})[0]
        if self._folder.pooling == "cls":
            pooled = hidden[:, 0]
        else:
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
        return cast(Vectors, (pooled / norms).astype(np.float32))


def load_onnx_embedder(folder: ModelFolder, onnx_file: Path, name: str, batch_size: int,
                       threads: int = 0) -> OnnxEmbedder:
    """An OnnxEmbedder over an exported model, each call on `threads` threads (0: ONNX Runtime's default, every
    core); threads sleep when idle where the process asked for that."""
    import onnxruntime
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder.path / "tokenizer.json"))
    tokenizer.enable_truncation(folder.max_seq_length)
    tokenizer.enable_padding(pad_id=tokenizer.token_to_id(_pad_token(folder.path)) or 0)
    session = onnxruntime.InferenceSession(str(onnx_file), session_options(threads),
                                           providers=["CPUExecutionProvider"])
    return OnnxEmbedder(session, tokenizer, folder, name, batch_size)


def session_options(threads: int = 0) -> onnxruntime.SessionOptions:
    """The embedder's session options: exact integer products everywhere, idle threads asleep where asked for,
    `threads` threads per call (0: OMP_NUM_THREADS where set, as torch takes it, else every core)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads or _omp_threads()
    if os.environ.get("OMP_WAIT_POLICY") == "PASSIVE":  # serving processes: rag.wiring.prefer_passive_threads
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    # int8 on x86 CPUs without VNNI (AVX2-only): ORT's fast u8s8 kernel adds pairs of products in 16 bits, which
    # saturates on MiniLM (~1 pair in 60,000; cosine to exact products 0.987-0.996 in a numpy emulation). This
    # takes ORT's exact u8u8 kernel there; with VNNI, on ARM, or for a float model it changes nothing.
    options.add_session_config_entry("session.x64quantprecision", "1")
    return options


def _omp_threads() -> int:
    """OMP_NUM_THREADS as a count (0 where unset or not a number): ONNX Runtime's pip builds do not read it."""
    value = os.environ.get("OMP_NUM_THREADS", "")
    return int(value) if value.isdigit() else 0


def _pad_token(path: Path) -> str:
    try:
        return str(json.loads((path / "tokenizer_config.json").read_text()).get("pad_token") or "[PAD]")
    except (OSError, ValueError):
        return "[PAD]"


def onnx_file(folder: ModelFolder, cache_dir: Path, int8: bool = False) -> Path:
    """The folder's model exported to ONNX under `cache_dir` (float32, or its int8 version), made the first time
    it is asked for (safe when processes race: each writes its own temporary copy and the first rename wins)."""
    dest = cache_dir / "onnx" / f"{folder.path.parent.name}-{folder.path.name}-{_fingerprint(folder.path)}"
    if not (dest / FLOAT_FILE).is_file():
        dest.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
        try:
            export(folder.path, work / FLOAT_FILE)
            work.chmod(0o755)
            os.rename(work, dest)
        except OSError:
            if not (dest / FLOAT_FILE).is_file():
                raise
        finally:
            shutil.rmtree(work, ignore_errors=True)
    if int8 and not (dest / INT8_FILE).is_file():
        fd, partial = tempfile.mkstemp(prefix=".int8-", suffix=".onnx", dir=dest)
        os.close(fd)
        try:
            quantize(dest / FLOAT_FILE, Path(partial))
            os.chmod(partial, 0o644)
            os.replace(partial, dest / INT8_FILE)
        finally:
            Path(partial).unlink(missing_ok=True)
    return dest / (INT8_FILE if int8 else FLOAT_FILE)


def quantize(source: Path, dest: Path) -> None:
    """Dynamic int8: MatMul weights per output channel, activations quantized at run time. Per-channel and MatMul
    only: per-tensor weights, or quantized embedding tables, drop MiniLM's cosine to float32 to ~0.94."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(source, dest, per_channel=True, weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"])


def _fingerprint(path: Path) -> str:
    # Where the weights are, their size and time, and the config: a changed model gets a new export.
    digest = hashlib.sha256(str(path.resolve()).encode())
    for name in sorted(os.listdir(path)):
        if name.endswith((".safetensors", ".bin", "config.json")):
            stat = (path / name).stat()
            digest.update(f"{name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def export(model_dir: Path, dest: Path) -> None:
    """Export the folder's transformer (token states out) with torch.onnx; run once per model, at set-up."""
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(model_dir), dtype=torch.float32).eval()

    class TokenStates(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model  # a submodule, so that its weights export as weights

        # Keyword arguments: transformers 5 inserted parameters between these, so positions no longer match.
        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.model(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

    sample = torch.ones((2, 8), dtype=torch.long)
    axes = {name: {0: "batch", 1: "tokens"} for name in (*INPUTS, "token_states")}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's notes on ops it rewrites: nothing for a user to act on
        torch.onnx.export(TokenStates(), (sample, sample, torch.zeros_like(sample)), str(dest),
                          input_names=list(INPUTS), output_names=["token_states"], dynamic_axes=axes,
                          opset_version=17, dynamo=False)


#END
