"""The GPU benchmarks (benchmarks/gpu_ingest.py, benchmarks/gpu_stack.py) in their quick modes on the CPU, their
pieces, and the ingest settings they tune (RAG_PARSE_WORKERS, RAG_INGEST_WRITERS)."""

from __future__ import annotations

import json
import random
import shutil
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from benchmarks import gpu_ingest, gpu_stack
from ingest import service
from rag.config import Settings
from rag.core.ports import Vectors
from rag.core.types import Chunk
from rag.wiring import build_store
from tests.conftest import REPO

SMOLLM = REPO / "data" / "models" / "smollm2-135m-instruct"
SAMPLES = REPO / "data" / "eval" / "python-faq" / "docs"


def test_padded_tokenizer_encodes_as_before_and_decodes_every_id(tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    if not (SMOLLM / "tokenizer.json").is_file():
        pytest.skip("the bundled SmolLM2 is prepared by make setup")
    shutil.copy(SMOLLM / "tokenizer.json", tmp_path / "tokenizer.json")
    added = gpu_stack.pad_tokenizer(tmp_path)
    before, after = Tokenizer.from_file(str(SMOLLM / "tokenizer.json")), Tokenizer.from_file(str(tmp_path /
                                                                                                "tokenizer.json"))
    assert after.get_vocab_size() == gpu_stack.ERNIE_VOCAB == before.get_vocab_size() + added
    text = "Excerpts:\n\n[1] Use python -m venv to create one. 你好, über."
    assert after.encode(text).ids == before.encode(text).ids
    high = list(range(before.get_vocab_size(), gpu_stack.ERNIE_VOCAB, 997))
    assert before.decode(high) == ""  # what a random model's high ids streamed before: nothing
    assert all(after.decode([i]).strip() for i in high) and "." in after.decode(high)


def test_synthetic_corpus_reaches_the_chunk_target_with_distinct_text(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(4):
        (docs / f"d{n}.txt").write_text(" ".join(f"word{n}x{i} alpha beta gamma" for i in range(200)))
    out = gpu_ingest.synthesize(docs, tmp_path / "synth", target_chunks=250, base_chunks=100)
    files = sorted(p for p in out.rglob("*.txt"))
    assert [p.parent.name for p in files].count("copy00") == 4 and [p.parent.name for p in files].count("copy02") == 2
    texts = [p.read_text() for p in files]
    assert len(set(texts)) == len(texts)  # every copy perturbed differently
    assert sum(len(t) for t in texts) == pytest.approx(2.5 * sum(len(p.read_text()) for p in docs.iterdir()),
                                                      rel=0.1)
    (files[0]).write_text("changed")
    gpu_ingest.synthesize(docs, tmp_path / "synth", target_chunks=250, base_chunks=100)
    assert files[0].read_text() == "changed"  # made once per folder and target


def test_a_rate_holds_only_within_the_slo_on_schedule_and_without_failures() -> None:
    def result(ttft_ms: float, ok: bool = True, lag: float = 0.0) -> dict[str, Any]:
        return {"ok": ok, "sent": 0.0, "first": ttft_ms / 1000, "end": 2.0, "tokens": 10, "lag": lag}

    fast = gpu_stack.summarize("bare", 10.0, [result(100 + i) for i in range(100)], 10.0)
    assert fast["ttft_p99_ms"] == 199.0 and gpu_stack.holds(fast)
    slow = gpu_stack.summarize("bare", 20.0, [result(100)] * 98 + [result(1500)] * 2, 10.0)
    assert not gpu_stack.holds(slow)
    failed = gpu_stack.summarize("bare", 30.0, [result(100)] * 99 + [{"ok": False, "sent": 0.0, "error": "x"}], 10)
    late = gpu_stack.summarize("bare", 40.0, [result(100, lag=0.5)] * 100, 10.0)
    assert not gpu_stack.holds(failed) and not gpu_stack.holds(late)
    rows = [{"config": "bare", **row} for row in (fast, slow)]
    assert gpu_stack.best(rows, "bare") == 10.0 and gpu_stack.best(rows, "api-1") == 0.0


class _Recording:
    """An Index wrapper noting which thread stored each batch."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.threads: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def replace(self, chunks: Sequence[Chunk], vectors: Vectors, documents: Mapping[str, Sequence[str]]) -> None:
        self.threads.add(threading.current_thread().name)
        self._inner.replace(chunks, vectors, documents)


def test_parse_workers_and_writers_store_the_same_as_one_of_each(tmp_path: Path) -> None:
    files = sorted(SAMPLES.glob("*.txt"))[:12]
    docs = tmp_path / "docs"
    docs.mkdir()
    for path in files:
        shutil.copy(path, docs / path.name)
    outcomes = []
    for n, (workers, writers) in enumerate([(1, 1), (3, 3)]):
        settings = Settings(_env_file=None, data_dir=tmp_path / f"data{n}",  # type: ignore[call-arg]
                            ingest_batch_chunks=8, parse_workers=workers, ingest_writers=writers)
        store = _Recording(build_store(settings))
        _, report = service.sync([docs], settings, store=store)  # type: ignore[arg-type]
        texts = sorted(chunk.text for chunk in store.dense.chunks(sorted(store.all_ids())))
        outcomes.append((report.added, report.chunks, texts, sorted(store.keyword.ids()) == sorted(store.all_ids()),
                         len(store.threads)))
    (added, chunks, texts, keyword_ok, threads), parallel = outcomes
    assert added == len(files) and keyword_ok and threads == 1
    assert parallel[:4] == (added, chunks, texts, True)
    assert parallel[4] > 1  # several writer threads stored batches


@pytest.mark.integration
def test_gpu_ingest_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ingest.json"
    gpu_ingest.main(["--quick", "--quick-files", "8", "--docs", str(SAMPLES), "--out", str(out)])
    result = json.loads(out.read_text())
    runs = {(r["corpus"], r["variant"]): r for r in result["runs"]}
    assert set(runs) == {("python-docs", "defaults"), ("python-docs", "tuned"), ("synthetic-300", "tuned")}
    assert runs["python-docs", "defaults"]["chunks"] == runs["python-docs", "tuned"]["chunks"] > 0
    assert all(r["chunks"] > 0 and r["wall_s"] > 0 and not r["failed"] for r in result["runs"])
    assert {"parse", "chunk", "keyword_write", "embed_batch_64"} <= set(result["stages"]["python-docs"]["mb_per_min"])
    printed = capsys.readouterr().out
    assert "| python-docs | tuned |" in printed and "stages alone" in printed


@pytest.mark.integration
def test_gpu_stack_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "stack.json"
    random.seed(0)
    gpu_stack.main(["--quick", "--docs", str(SAMPLES), "--out", str(out), "--logs", str(tmp_path / "logs"),
                    "--variants", "default,mbt2048"])
    result = json.loads(out.read_text())
    configs = {row["config"] for row in result["rows"]}
    assert configs == {"bare", "api-1", "bare+mbt2048", "api-1+mbt2048"} and result["questions"] > 0
    # Each variant's API is compared with its own bare vLLM, by first text and by first whole sentence.
    assert set(result["ratio_to_bare"]) == set(result["ratio_to_bare_sentence"]) == {"api-1", "api-1+mbt2048"}
    bare = [row for row in result["rows"] if row["config"].startswith("bare")]
    assert all(row["ttfs_p99_ms"] >= row["ttft_p99_ms"] > 0 for row in bare)
    # The samples: the fake model's text (excerpt [1]'s opening words) and the API's answer to the same question.
    assert result["samples"] and all(s["bare"] and s["answer"] and s["mode"] for s in result["samples"])
    assert all(row["failed"] == 0 and row["ttft_p50_ms"] for row in result["rows"])
    assert any(mode.startswith(("generated", "extracted")) for row in result["rows"] for mode in row["modes"])
    assert "best rate holding TTFT p99 <= 1 s: bare " in capsys.readouterr().out
