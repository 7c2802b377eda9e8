"""`rag eval`: metrics on a scripted search, and the CI gate on the dev sets (floors set from measured values)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ingest.parse import ChunkSpec, parse_bytes
from rag.components.models import BUNDLED_E5_MODEL, BUNDLED_EMBED_MODEL
from rag.config import Settings
from rag.core.errors import ConfigError
from rag.core.text import has_cjk
from rag.core.types import Hit
from rag.tools.evaluate import Case, evaluate, load_cases, percentiles, suggest_threshold
from rag.wiring import tokenizer_path
from tests.conftest import REPO, SAMPLES, LLMServer

EVAL = REPO / "data" / "eval"


def test_metrics_on_a_scripted_search() -> None:
    cases = [Case("q1", expected_source="a.md"), Case("q2", expected_text="blue  sky"),
             Case("q3", expected_source="z.md"), Case("off", answerable=False)]
    results = {
        "q1": [Hit("1", "x", "docs/a.md", 0.9)],
        "q2": [Hit("2", "x", "b.md", 0.8), Hit("3", "x", "c.md", 0.7), Hit("4", "The Blue sky.", "d.md", 0.6)],
        "q3": [Hit("5", "x", "y.md", 0.5)],
        "off": [Hit("6", "x", "y.md", 0.2)],
    }
    report = evaluate(cases, lambda question, k: results[question][:k], lambda question: 0.3)
    assert report.recall == {"@1": 0.3333, "@3": 0.6667, "@10": 0.6667}
    assert report.mrr == round((1 + 1 / 3) / 3, 4)
    assert (report.refusal_precision, report.refusal_recall, report.answerable_kept) == (1.0, 1.0, 1.0)
    assert report.misses == ["q3"]
    assert report.suggested_threshold == {"en": 0.21}
    in_flight = evaluate(cases, lambda question, k: results[question][:k], lambda question: 0.3, parallel=3)
    assert replace(in_flight, latency_ms=report.latency_ms) == report  # tallied in the cases' order


def test_threshold_suggestion_and_percentiles() -> None:
    assert suggest_threshold([(0.5, True), (0.45, True), (0.2, False)]) == 0.21
    assert suggest_threshold([(0.5, True)]) is None
    assert percentiles([float(v) for v in range(1, 101)]) == {"p50": 51.0, "p95": 96.0, "p99": 100.0}


def test_bad_case_files_are_clear_errors(tmp_path: Path) -> None:
    bad = tmp_path / "cases.jsonl"
    bad.write_text('{"question": "ok", "expected_source": "a.md"}\n{"question": "no expectation"}\n')
    with pytest.raises(ConfigError, match=r"cases.jsonl:2: an answerable case needs"):
        load_cases(bad)
    bad.write_text("not json\n")
    with pytest.raises(ConfigError, match=r"cases.jsonl:1: not a case"):
        load_cases(bad)


def _run(args: list[str], data_dir: Path, extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAG_")} | {"RAG_DATA_DIR": str(data_dir)}
    # Retrieval alone unless a test says otherwise: question translation needs the LLM (test_translated_...).
    env |= {"RAG_TRANSLATE_QUESTIONS": "false"} | (extra or {})
    return subprocess.run([str(REPO / ".venv" / "bin" / args[0]), *args[1:]], env=env, capture_output=True,
                          text=True, timeout=1500)  # 40 answers took 490 s in CI, 900 s on a loaded machine


def _eval(data_dir: Path, cases: Path, mode: str, model: str = "") -> dict[str, Any]:
    """`rag eval` on the test half of a case file: thresholds and weights are fitted on the tune half only."""
    done = _run(["rag", "eval", str(cases), "--mode", mode, "--split", "test", "--json"], data_dir, _model_env(model))
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


# Floors on the test halves for the default embedder, the MiniLM + e5 pair (docs, "Both bundled embedders as one":
# measured 2026-12-03, torch bf16 vectors), less a margin of about one question for model/library drift and the
# other CPU backend (a test half of the Chinese set is 20 questions, so one question is 0.05 there; the Debian
# Reference's 18 answerable and 4 unanswerable, one unanswerable 0.25). No retrieval refusal is asked of Chinese
# questions: e5 scores on-topic and off-topic Chinese questions alike, so the answer step refuses them
# (test_answers_on_a_fixed_sample); instead every answerable one must be kept.
FLOORS = {"python-faq": {"@1": 0.77, "@3": 0.92, "mrr": 0.84, "refusal_recall": 0.85, "kept": 0.97},
          "zh": {"@1": 0.55, "@3": 0.75, "mrr": 0.66, "refusal_recall": 0.0, "kept": 0.95},
          "xling-zh-en": {"@1": 0.13, "@3": 0.36, "mrr": 0.27, "refusal_recall": 0.0, "kept": 0.95},
          "xling-en-zh": {"@1": 0.42, "@3": 0.71, "mrr": 0.58, "refusal_recall": 0.0, "kept": 0.95},
          "debref-en-en": {"@1": 0.72, "@3": 0.94, "mrr": 0.83, "refusal_recall": 0.5, "kept": 0.94},
          "debref-zh-zh": {"@1": 0.61, "@3": 0.77, "mrr": 0.7, "refusal_recall": 0.0, "kept": 0.94},
          "debref-zh-en": {"@1": 0.5, "@3": 0.55, "mrr": 0.54, "refusal_recall": 0.0, "kept": 0.94},
          "debref-en-zh": {"@1": 0.33, "@3": 0.5, "mrr": 0.45, "refusal_recall": 0.0, "kept": 0.94},
          # The Debian FAQ in the held-out format (55 test questions each, one question 0.018; measured 2026-12-04,
          # nothing fitted on it): the gap to unseen documents issue 28 names, held here so that it can only close.
          "debfaq-en-en": {"@1": 0.47, "@3": 0.65, "mrr": 0.58, "kept": 0.96},
          "debfaq-zh-zh": {"@1": 0.49, "@3": 0.6, "mrr": 0.58, "kept": 0.96},
          "debfaq-zh-en": {"@1": 0.32, "@3": 0.5, "mrr": 0.43, "kept": 0.96},
          "debfaq-en-zh": {"@1": 0.21, "@3": 0.36, "mrr": 0.33, "kept": 0.94}}
# MiniLM alone (RAG_EMBED_MODEL=bundled:all-MiniLM-L6-v2: a third of the ingest time, English only) keeps its
# English floors of 2026-12-03, and the pair must hold English within 0.01 of it (issue 28).
MINILM_FLOORS = {"python-faq": {"@1": 0.76, "@3": 0.92, "mrr": 0.84, "refusal_recall": 0.95, "kept": 0.97},
                 "debref-en-en": {"@1": 0.7, "@3": 0.9, "mrr": 0.83, "refusal_recall": 0.5, "kept": 0.9},
                 "debfaq-en-en": {"@1": 0.47, "@3": 0.65, "mrr": 0.58, "kept": 0.96}}
CORPORA = {"python-faq": EVAL / "python-faq" / "docs", "zh": SAMPLES / "zh",
           "xling-zh-en": SAMPLES / "en", "xling-en-zh": SAMPLES / "zh"}
CASES = {"python-faq": EVAL / "python-faq" / "questions.jsonl", "zh": EVAL / "zh" / "questions.jsonl",
         "xling-zh-en": EVAL / "xling" / "zh-en" / "questions.jsonl",
         "xling-en-zh": EVAL / "xling" / "en-zh" / "questions.jsonl"}
CROSS_LINGUAL = {"xling-zh-en": True, "xling-en-zh": False}  # dev set → are its questions Chinese
# The Debian Reference set (data/eval/debref): the same facts asked in both languages over each language's chapters.
DEBREF = {f"debref-{q}-{docs}": (docs, q) for docs in ("en", "zh") for q in ("en", "zh")}
CORPORA |= {name: EVAL / "debref" / "docs" / docs for name, (docs, _) in DEBREF.items()}
CASES |= {name: EVAL / "debref" / docs / f"questions-{q}.jsonl" for name, (docs, q) in DEBREF.items()}
# The Debian FAQ set (data/eval/debfaq): the held-out format, one answer per document, the heading as the question.
DEBFAQ = {f"debfaq-{q}-{docs}": (docs, q) for docs in ("en", "zh") for q in ("en", "zh")}
CORPORA |= {name: EVAL / "debfaq" / "docs" / docs for name, (docs, _) in DEBFAQ.items()}
CASES |= {name: EVAL / "debfaq" / docs / f"questions-{q}.jsonl" for name, (docs, q) in DEBFAQ.items()}


@pytest.mark.parametrize("dev_set", sorted(CROSS_LINGUAL))
def test_cross_lingual_case_files(dev_set: str) -> None:
    cases = load_cases(CASES[dev_set])
    answerable = [case for case in cases if case.answerable]
    assert len(answerable) >= 35 and len(cases) - len(answerable) >= 8
    assert all(has_cjk(case.question) == CROSS_LINGUAL[dev_set] for case in cases)
    assert all(10 <= len(case.expected_text) <= 40 for case in answerable)


def test_debref_files_ask_the_same_facts_in_both_languages() -> None:
    """Line i of every debref file is one fact (or one unanswerable question), in the same half everywhere."""
    files = {name: load_cases(CASES[name]) for name in DEBREF}
    for half in ("tune", "test"):
        counts = {name: len(load_cases(CASES[name], half)) for name in DEBREF}
        assert len(set(counts.values())) == 1 and min(counts.values()) >= 20, counts
    for name, cases in files.items():
        docs, questions = DEBREF[name]
        assert all(has_cjk(case.question) == (questions == "zh") for case in cases), name
        assert all(has_cjk(case.expected_text) == (docs == "zh") for case in cases if case.answerable), name
        assert [case.answerable for case in cases] == [case.answerable for case in files["debref-en-en"]]


def test_debfaq_files_ask_every_section_in_both_languages() -> None:
    """Line i of every debfaq file asks for the same section's document, which exists in its corpus."""
    files = {name: load_cases(CASES[name]) for name in DEBFAQ}
    sources = [case.expected_source for case in files["debfaq-en-en"]]
    assert len(sources) == len(set(sources)) >= 100
    for name, cases in files.items():
        docs, questions = DEBFAQ[name]
        assert [case.expected_source for case in cases] == sources, name
        assert all(has_cjk(case.question) == (questions == "zh") for case in cases), name
        assert all(has_cjk((CORPORA[name] / source).read_text(encoding="utf-8")) == (docs == "zh")
                   for source in sources), name
        assert len(load_cases(CASES[name], "test")) == len(load_cases(CASES[name], "tune")) == len(cases) // 2


@pytest.mark.eval
@pytest.mark.slow  # parsing the PDFs takes seconds
@pytest.mark.parametrize("dev_set", sorted([*CROSS_LINGUAL, *DEBREF]))
def test_expected_spans_lie_within_one_chunk(dev_set: str) -> None:
    """Every expected span is inside one chunk as ingest cuts the corpus today (a span across a cut never matches)."""
    settings = Settings()
    # The embedder's hard limit only re-splits a chunk over it; chunk_tokens sits below every model's limit.
    spec = ChunkSpec(tokenizer_path(settings.embed_model), settings.chunk_tokens,
                     settings.chunk_overlap_tokens, 10**6)
    chunks = [Hit(str(n), piece.text, path.name, 0.0) for path in sorted(CORPORA[dev_set].iterdir())
              for n, piece in enumerate(parse_bytes(path.read_bytes(), path.name, None, spec).pieces)]
    cases = [case for case in load_cases(CASES[dev_set]) if case.answerable]
    assert [case.expected_text for case in cases if not any(case.matches(chunk) for chunk in chunks)] == []


def _model_env(model: str) -> dict[str, str]:
    return {"RAG_EMBED_MODEL": model} if model else {}


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """The data dir of a dev set's corpus, ingested once per module and embedder (dev sets on one corpus share it)."""
    dirs: dict[tuple[Path, str], Path] = {}

    def data_dir(dev_set: str, model: str = "") -> Path:
        key = (CORPORA[dev_set], model)
        if key not in dirs:
            folder = tmp_path_factory.mktemp(key[0].name) / "data"
            done = _run(["rag-ingest", str(key[0])], folder, _model_env(model))
            assert done.returncode == 0, done.stderr
            dirs[key] = folder
        return dirs[key]

    return data_dir


# Where fusion loses to one side on a test half beyond one question's worth today (docs, "Both bundled embedders
# as one"): on the Python FAQ the pair's dense side alone finds two more answers at rank 1 (0.82 vs 0.80, MRR 0.879 vs
# 0.865; hybrid keeps recall@3, 0.941 vs 0.918). The tune halves of the four English-question sets keep the dense
# weight at 0.8 (the FAQ's alone would take 0.9, which costs the English questions over Chinese samples 0.05), so it
# stays named here rather than refitted on the test half.
# On the Debian FAQ's English test half dense alone finds two more in the top three (0.73 vs 0.69) where its tune half
# prefers hybrid by four (0.87 vs 0.80): not refitted on the test half either.
KNOWN_FUSION_LOSSES = {("python-faq", "dense", "@1"), ("python-faq", "dense", "mrr"), ("debfaq-en-en", "dense", "@3")}
# Questions in one language over documents in the other: keywords rarely cross languages, and on these test halves
# (21-22 questions, 18 on the Debian Reference) the pair's dense side alone lands within one or two questions of hybrid
# either way, in both directions: dense-only recall@3 of the English questions over the Chinese samples moved between
# two ingests of the same corpus (0.81, 0.86; hybrid 0.76 both times). The tune halves prefer fusion there (English
# questions over the Chinese samples: recall@3 0.77 at dense weight 0.8, 0.64 at 1.0), so these sets are held by their
# floors and by beating the weaker side, not by the loses-to-neither-side check.
CROSS_LINGUAL_SETS = {"xling-zh-en", "xling-en-zh", "debref-zh-en", "debref-en-zh", "debfaq-zh-en", "debfaq-en-zh"}


def _assert_floors(hybrid: dict[str, Any], floor: dict[str, float]) -> None:
    assert hybrid["recall"]["@1"] >= floor["@1"] and hybrid["recall"]["@3"] >= floor["@3"], hybrid
    assert hybrid["mrr"] >= floor["mrr"], hybrid
    assert hybrid["answerable_kept"] >= floor["kept"], hybrid
    if "refusal_recall" in floor:  # the Debian FAQ set has no unanswerable questions
        assert hybrid["refusal_recall"] >= floor["refusal_recall"], hybrid


@pytest.mark.eval
@pytest.mark.slow
@pytest.mark.parametrize("dev_set", sorted(FLOORS))
def test_dev_set_floors_and_hybrid_loses_to_neither_side(dev_set: str, ingested: Callable[..., Path]) -> None:
    data = ingested(dev_set)
    hybrid, dense, keyword = (_eval(data, CASES[dev_set], mode) for mode in ("hybrid", "dense", "keyword"))
    _assert_floors(hybrid, FLOORS[dev_set])
    # Fusion must not lose to either side beyond one question's worth of noise (the figures are rounded to four
    # decimals, hence the 0.001), and must beat the weaker side on MRR without losing to it at recall@3.
    noise = 1.0 / sum(case.answerable for case in load_cases(CASES[dev_set], "test")) + 0.001
    for single in () if dev_set in CROSS_LINGUAL_SETS else (dense, keyword):
        for metric in ("@1", "@3"):
            if (dev_set, single["mode"], metric) not in KNOWN_FUSION_LOSSES:
                assert hybrid["recall"][metric] >= single["recall"][metric] - noise, (metric, hybrid, single)
        if (dev_set, single["mode"], "mrr") not in KNOWN_FUSION_LOSSES:
            assert hybrid["mrr"] >= single["mrr"] - noise, (hybrid, single)
    weaker = min((dense, keyword), key=lambda single: single["recall"]["@3"])
    assert hybrid["recall"]["@3"] >= weaker["recall"]["@3"] and hybrid["mrr"] > weaker["mrr"]


@pytest.mark.eval
@pytest.mark.slow
@pytest.mark.parametrize("dev_set", sorted(MINILM_FLOORS))
def test_minilm_alone_and_the_pair_within_a_hundredth_of_it_in_english(dev_set: str,
                                                                       ingested: Callable[..., Path]) -> None:
    minilm = _eval(ingested(dev_set, BUNDLED_EMBED_MODEL), CASES[dev_set], "hybrid", BUNDLED_EMBED_MODEL)
    _assert_floors(minilm, MINILM_FLOORS[dev_set])
    pair = _eval(ingested(dev_set), CASES[dev_set], "hybrid")
    for metric in ("@1", "@3"):
        assert pair["recall"][metric] >= minilm["recall"][metric] - 0.01, (metric, pair, minilm)
    assert pair["mrr"] >= minilm["mrr"] - 0.01, (pair, minilm)


# The bundled multilingual e5 (opt-in: English recall@3 0.87 against MiniLM's 0.94, docs) on the sets it is for:
# Chinese, and questions in one language over documents in the other. Test halves, 2026-12-03, less a margin.
E5_FLOORS = {"zh": {"@3": 0.75, "mrr": 0.72, "refusal_recall": 0.9, "kept": 0.9},
             "xling-en-zh": {"@3": 0.71, "mrr": 0.64, "refusal_recall": 0.9, "kept": 0.7},
             "xling-zh-en": {"@3": 0.45, "mrr": 0.39, "refusal_recall": 0.9, "kept": 0.68}}
MINILM_XLING = {"xling-en-zh": 0.38, "xling-zh-en": 0.27}  # MiniLM's hybrid recall@3 (test halves): e5 must beat it


@pytest.mark.eval
@pytest.mark.slow
@pytest.mark.parametrize("dev_set", sorted(E5_FLOORS))
def test_multilingual_e5_floors(dev_set: str, ingested: Callable[..., Path]) -> None:
    hybrid = _eval(ingested(dev_set, BUNDLED_E5_MODEL), CASES[dev_set], "hybrid", BUNDLED_E5_MODEL)
    floor = E5_FLOORS[dev_set]
    assert hybrid["recall"]["@3"] >= floor["@3"] and hybrid["mrr"] >= floor["mrr"], hybrid
    assert hybrid["refusal_recall"] >= floor["refusal_recall"] and hybrid["answerable_kept"] >= floor["kept"], hybrid
    assert hybrid["recall"]["@3"] > MINILM_XLING.get(dev_set, 0.0)


def fixed_sample(cases: Path, answerable: int, offtopic: int) -> str:
    """The first `answerable` answerable and first `offtopic` off-topic lines of a case file (a fixed sample)."""
    lines = [line for line in cases.read_text(encoding="utf-8").splitlines() if line.strip()]
    good = [line for line in lines if '"answerable": false' not in line][:answerable]
    bad = [line for line in lines if '"answerable": false' in line][:offtopic]
    return "\n".join(good + bad) + "\n"


# Answer floors on the fixed samples (30 answerable + 10 off-topic each), offline model (Qwen2.5-Coder-0.5B): set
# under the test halves' gold cited of 2026-12-02 (docs: 0.50 English, 0.56 Chinese; Qwen refuses some answerable
# questions and the assistant quotes only when sure). What is shown must always pass the check and speak the
# question's language. With the pair (2026-12-03) the Chinese sample's off-topic questions pass retrieval and the
# answer step refuses them: 8 of 10 (two got an unrelated quote), gold cited 0.70; the floor is one question under.
ANSWER_FLOORS = {"python-faq": ("en", {"gold_cited": 0.4, "refusal_recall": 0.9}),
                 "zh": ("zh", {"gold_cited": 0.45, "refusal_recall": 0.7})}


@pytest.mark.eval
@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(1600)  # beyond the subprocess's own limit, so that its error (with stderr) is what fails
@pytest.mark.parametrize("dev_set", ["python-faq", "zh"])
def test_answers_on_a_fixed_sample(dev_set: str, ingested: Callable[..., Path], tmp_path: Path,
                                   llm_server: LLMServer) -> None:
    sample = tmp_path / "sample.jsonl"
    sample.write_text(fixed_sample(CASES[dev_set], 30, 10), encoding="utf-8")
    env_llm = {"RAG_LLM_BASE_URL": llm_server.settings.llm_base_url}
    # Four questions in flight, batched by vLLM as a server's users are: 1.6-1.8x faster; batching moves a question
    # either way (2026-12-06, gold cited one at a time -> four at a time: Chinese 0.73 -> 0.70, Python FAQ 0.57 ->
    # 0.60), within the floors' margin.
    done = _run(["rag", "eval", str(sample), "--answers", "--json", "--parallel", "4"], ingested(dev_set), env_llm)
    assert done.returncode == 0, done.stderr
    language, floors = ANSWER_FLOORS[dev_set]
    metrics = json.loads(done.stdout)["answers"][language]
    assert metrics["questions"] == 40 and metrics["shown_sentences"] > 0
    assert (metrics["shown_supported"], metrics["language_match"]) == (1.0, 1.0), metrics
    for name, floor in floors.items():
        assert metrics[name] >= floor, metrics


@pytest.mark.integration
def test_answer_checks_with_the_real_llm(tmp_path: Path, llm_server: LLMServer) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "printer.md").write_text("# Printer\nTo replace the toner, open the front door and pull the cartridge.")
    cases = tmp_path / "cases.jsonl"
    cases.write_text('{"question": "How do I replace the toner?", "expected_source": "printer.md"}\n'
                     '{"question": "Who won the football World Cup in 2014?", "answerable": false}\n')
    assert _run(["rag-ingest", str(docs)], tmp_path / "data").returncode == 0
    env_llm = {"RAG_LLM_BASE_URL": llm_server.settings.llm_base_url}
    done = _run(["rag", "eval", str(cases), "--answers", "--json"], tmp_path / "data", env_llm)
    assert done.returncode == 0, done.stderr
    answers = json.loads(done.stdout)["answers"]["en"]
    assert (answers["questions"], answers["refusal_recall"], answers["refusal_precision"]) == (2, 1.0, 1.0)
    assert (answers["answered"], answers["gold_cited"], answers["shown_supported"]) == (1.0, 1.0, 1.0)
    assert answers["language_match"] == 1.0


# Questions in one language over documents in the other, translated by the real LLM (the default wherever vLLM
# answers): test halves of 2026-12-04 (docs, "Questions in the other language"), less about two questions for the
# other CPU kind's arithmetic (a translation that changes by one word can move a question), and it must beat the
# same search without translation.
TRANSLATED_FLOORS = {"xling-zh-en": 0.72, "xling-en-zh": 0.8, "debref-zh-en": 0.7, "debref-en-zh": 0.66,
                     "debfaq-zh-en": 0.56, "debfaq-en-zh": 0.45}


@pytest.mark.eval
@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(900)
@pytest.mark.parametrize("dev_set", sorted(TRANSLATED_FLOORS))
def test_translated_questions_find_the_other_languages_passage(dev_set: str, ingested: Callable[..., Path],
                                                               llm_server: LLMServer) -> None:
    data = ingested(dev_set)
    env = {"RAG_LLM_BASE_URL": llm_server.settings.llm_base_url}
    cases = ["rag", "eval", str(CASES[dev_set]), "--split", "test", "--json", "--parallel", "4"]
    translated, untranslated = (_run(cases, data, env | {"RAG_TRANSLATE_QUESTIONS": on}) for on in ("true", "false"))
    assert translated.returncode == 0 and untranslated.returncode == 0, translated.stderr + untranslated.stderr
    got, before = json.loads(translated.stdout), json.loads(untranslated.stdout)
    assert got["recall"]["@3"] >= TRANSLATED_FLOORS[dev_set], got
    # Rank 1 may move either way (one question on the English questions over the Chinese samples): MRR is held
    # within one question's worth. Translation never finds less, and finds more (recall@3 gains, or holds while
    # recall@10 gains) on every set but the English questions over the Chinese samples: those translate only where
    # no English chunk passes the threshold, and their one-question gain came and went between runs and CPU kinds
    # (2026-12-04: @3 +0.05; a run of 2026-12-06: @3 equal, @10 0.90 -> 0.95; another, on the AVX2-only kind: @3 0.81
    # and @10 1.0 both ways, MRR 0.71 -> 0.69, within the one question's worth).
    noise = 1.0 / sum(case.answerable for case in load_cases(CASES[dev_set], "test")) + 0.001
    got_at, before_at = (got["recall"]["@3"], got["recall"]["@10"]), (before["recall"]["@3"], before["recall"]["@10"])
    assert got_at[0] >= before_at[0] and got_at[1] >= before_at[1], (got, before)
    assert got_at > before_at or dev_set == "xling-en-zh", (got, before)
    assert got["mrr"] >= before["mrr"] - noise, (got, before)
    assert got["answerable_kept"] >= before["answerable_kept"], (got, before)
