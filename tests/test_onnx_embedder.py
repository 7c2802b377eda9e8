"""The ONNX Runtime embedder gives sentence-transformers' float32 vectors, starts without torch, and is chosen only
where it reproduces the model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rag.components.cpu import BF16_FLAGS, cpu_flags
from rag.components.models import BUNDLED_E5_MODEL, BUNDLED_EMBED_MODEL, resolve_embed_model
from rag.components.onnx_embedder import ModelFolder, OnnxEmbedder
from rag.config import Settings
from rag.core.errors import ConfigError
from rag.wiring import build_embedder, embed_backend
from tests.conftest import REPO, SAMPLES


def _texts() -> list[str]:
    texts = []
    for path in sorted(SAMPLES.rglob("*.md")) + sorted(SAMPLES.rglob("*.txt")):
        text = path.read_text(encoding="utf-8")
        texts += [text[i:i + 900] for i in range(0, min(len(text), 4500), 900)]
    # Lengths from one word to the model's limit, and Chinese, so padding and truncation are both exercised; every
    # third passage of the samples (each file's first ones) keeps the two backends' model calls a few seconds.
    return [*[t for t in texts if t.strip()][:60:3], "word", "数据库需要定期清理以回收空间。" * 80]


@pytest.mark.parametrize("model", [BUNDLED_EMBED_MODEL, BUNDLED_E5_MODEL])
def test_onnx_vectors_equal_torch_float32(model: str) -> None:
    onnx = build_embedder(Settings(embed_model=model, embed_backend="onnx", _env_file=None))  # type: ignore[call-arg]
    torch = build_embedder(Settings(embed_model=model, embed_backend="torch", embed_dtype="float32",
                                    _env_file=None))  # type: ignore[call-arg]
    assert isinstance(onnx, OnnxEmbedder)
    texts = _texts()
    cosines = (onnx.embed_documents(texts) * torch.embed_documents(texts)).sum(axis=1)
    assert cosines.min() > 0.99999, cosines.min()
    for question in ["How do I request leave?", "年假怎么申请？"]:
        assert float(onnx.embed_query(question) @ torch.embed_query(question)) > 0.99999
    assert (onnx.max_tokens, onnx.dimension) == (torch.max_tokens, torch.dimension)
    assert onnx.embed_documents([]).shape == (0, onnx.dimension)


@pytest.fixture(scope="module")
def onnx_float32() -> OnnxEmbedder:
    embedder = build_embedder(Settings(embed_model=BUNDLED_EMBED_MODEL, embed_backend="onnx",
                                       _env_file=None))  # type: ignore[call-arg]
    assert isinstance(embedder, OnnxEmbedder)
    return embedder


def test_int8_stays_close_to_float32(onnx_float32: OnnxEmbedder) -> None:
    int8 = build_embedder(Settings(embed_model=BUNDLED_EMBED_MODEL, embed_backend="onnx-int8",
                                   _env_file=None))  # type: ignore[call-arg]
    texts = _texts()
    cosines = (int8.embed_documents(texts) * onnx_float32.embed_documents(texts)).sum(axis=1)
    # Measured 0.989 min / 0.994 mean on the Python docs; per-tensor weights fall to ~0.90 / 0.94.
    assert cosines.min() > 0.97 and cosines.mean() > 0.985, (cosines.min(), cosines.mean())
    assert not np.allclose(cosines, 1.0, atol=1e-4)  # it is the quantized model that ran


def test_auto_takes_onnx_on_cpu_where_it_runs_float32(tmp_path: Path) -> None:
    folder = ModelFolder.read(Path(resolve_embed_model(BUNDLED_EMBED_MODEL)))
    assert folder is not None

    def backend(**kw: str) -> str:
        return embed_backend(Settings(_env_file=None, **kw), folder)  # type: ignore[call-arg,arg-type]

    assert backend(embed_dtype="float32") == "onnx"
    assert backend() == ("torch" if cpu_flags() & BF16_FLAGS else "onnx")  # bf16 where native: 2x faster
    assert backend(embed_dtype="bfloat16") == "torch"
    assert backend(embed_device="cuda") == "torch"
    assert backend(embed_backend="torch") == "torch"
    # A folder with a module the ONNX embedder does not reproduce: auto takes torch, onnx says why it cannot.
    odd = tmp_path / "odd"
    odd.mkdir()
    (odd / "modules.json").write_text(json.dumps([{"path": "", "type": "sentence_transformers.models.Dense"}]))
    assert ModelFolder.read(odd) is None
    assert embed_backend(Settings(_env_file=None), None) == "torch"  # type: ignore[call-arg]
    with pytest.raises(ConfigError, match="RAG_EMBED_BACKEND=onnx"):
        embed_backend(Settings(embed_backend="onnx", _env_file=None), None)  # type: ignore[call-arg]


def test_a_process_embeds_without_importing_torch(onnx_float32: OnnxEmbedder) -> None:
    code = ("import sys; from rag.config import Settings; from rag.wiring import build_embedder; "
            "e = build_embedder(Settings(embed_backend='onnx')); e.embed_query('hello'); "
            "print(sorted(m for m in ('torch', 'transformers', 'sentence_transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stderr
    assert np.isclose(np.linalg.norm(onnx_float32.embed_query("hello")), 1.0)


def test_int8_products_are_exact_on_this_cpu() -> None:
    """The embedder's session computes u8 x s8 products exactly where ORT's fast x86 kernel would saturate (AVX2
    without VNNI adds pairs of products in 16 bits): the same integers, so the same int8 vectors, on every CPU."""
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper, numpy_helper

    from rag.components.onnx_embedder import session_options

    assert session_options().get_session_config_entry("session.x64quantprecision") == "1"
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (64, 384), dtype=np.uint8)
    b = rng.integers(-127, 128, (384, 96)).astype(np.int8)
    a[:8], b[:, :8] = 255, 127  # 255·127 + 255·127 = 64,770: past int16 in every pair of these rows and columns
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b", "a_zero"], ["y"])], "g",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [None, 384]),
         helper.make_tensor_value_info("a_zero", TensorProto.UINT8, [])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [None, 96])],
        initializer=[numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    session = onnxruntime.InferenceSession(model.SerializeToString(), session_options(),
                                           providers=["CPUExecutionProvider"])
    got = session.run(None, {"a": a, "a_zero": np.array(128, dtype=np.uint8)})[0]
    assert np.array_equal(got, (a.astype(np.int64) - 128) @ b.astype(np.int64))
