"""The paired embedder: both models' vectors stored side by side, each question weighed by its language."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from ingest import service
from rag.components.models import resolve_embed_model
from rag.components.paired_embedder import CHINESE_AT, PairedEmbedder, first_weight, pair_parts
from rag.components.sentence_cache import RememberedSentences
from rag.config import BUNDLED_PAIR_MODEL, Settings
from rag.core.access import LOCAL_OPERATOR
from rag.core.errors import ConfigError
from rag.core.ports import Vectors, sentence_encoder
from rag.core.retrieve import Retriever
from rag.wiring import build_embedder, build_engine, build_retriever, build_store, tokenizer_path
from tests.fake_llm import FakeLLMServer


class TableEmbedder:
    """Fixed unit vectors per text, counting the questions it embedded."""

    def __init__(self, table: dict[str, list[float]], max_tokens: int = 250) -> None:
        self.table = {text: np.asarray(v, dtype=np.float32) / np.linalg.norm(v) for text, v in table.items()}
        self.name, self.batch_size, self.max_tokens = "table", 8, max_tokens
        self.dimension = len(next(iter(table.values())))
        self.queries = 0

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        return np.stack([self.table[text] for text in texts])

    def embed_query(self, text: str) -> Vectors:
        self.queries += 1
        return self.table[text]


def _cos(a: Vectors, b: Vectors) -> float:
    return float(a @ b)


def test_english_chunk_cosine_calibrates_to_the_share_weighted_mean_of_both_models() -> None:
    first = TableEmbedder({"doc": [1.0, 0.0], "How?": [0.6, 0.8]}, max_tokens=254)
    second = TableEmbedder({"doc": [0.0, 1.0, 0.0], "How?": [0.0, 0.28, 0.96]}, max_tokens=510)
    pair = PairedEmbedder(first, second, "a+b", first_share=0.75)
    doc = pair.embed_documents(["doc"])[0]
    query = pair.embed_query("How?")
    assert doc.shape == (6,) and pair.dimension == 6 and pair.max_tokens == 254 and pair.batch_size == 8
    assert math.isclose(float(np.linalg.norm(doc)), 1.0, rel_tol=1e-6)
    assert math.isclose(float(np.linalg.norm(query)), 1.0, rel_tol=1e-6)
    scale = 1 / (math.sqrt(2) * math.sqrt(0.75**2 + 0.25**2))
    assert math.isclose(_cos(doc, query), (0.75 * 0.6 + 0.25 * 0.28) * scale, rel_tol=1e-5)
    assert math.isclose(pair.calibrated("How?", "doc", _cos(doc, query)), 0.75 * 0.6 + 0.25 * 0.28, rel_tol=1e-5)


def test_chinese_chunks_and_chinese_questions_are_scored_by_the_second_model_alone() -> None:
    texts = ("安装软件包的文档", "怎么安装软件包", "How to install?")
    first = TableEmbedder(dict(zip(texts, ([1.0, 0.0], [1.0, 0.0], [1.0, 0.0]), strict=True)))
    second = TableEmbedder(dict(zip(texts, ([0.6, 0.8], [0.8, 0.6], [0.0, 1.0]), strict=True)))
    pair = PairedEmbedder(first, second, "a+b", first_share=0.5, first_share_cjk=0.0)
    assert pair.share("怎么安装软件包") == 0.0 and pair.share("How do I install it?") == 0.5
    # A Chinese question quoting English names is Chinese: 7 Han characters of 33 letters, above CHINESE_AT.
    assert pair.share("PostgreSQL 中 VACUUM 和 VACUUM FULL 有什么区别？") == 0.0
    assert pair.share("apt-get install 安装") == pytest.approx(0.5 * (1 / 3))  # 2 Han of 15: mostly English
    assert first_weight("安装软件包的文档") == 0.0 and first_weight("doc") == 1.0
    assert CHINESE_AT == 0.2 and first_weight("apt-get install 安装") == pytest.approx(1 / 3)  # 2 Han of 15
    doc = pair.embed_documents(["安装软件包的文档"])[0]
    assert math.isclose(float(np.linalg.norm(doc)), 1.0, rel_tol=1e-6) and np.all(doc[:2] == 0)
    query = pair.embed_query("怎么安装软件包")
    assert first.queries == 0 and second.queries == 1  # a model whose share is 0 is not run
    assert math.isclose(pair.calibrated("怎么安装软件包", "安装软件包的文档", _cos(doc, query)), 0.96, rel_tol=1e-5)
    # An English question over a Chinese chunk: MiniLM's identical vectors do not count, e5's cosine does.
    english = pair.embed_query("How to install?")
    assert math.isclose(pair.calibrated("How to install?", "安装软件包的文档", _cos(doc, english)), 0.8, rel_tol=1e-5)



def test_cross_scale_stands_in_for_the_first_model_only_for_english_questions_over_chinese_chunks() -> None:
    texts = ("安装软件包的文档", "怎么安装软件包", "How to install?", "doc")
    first = TableEmbedder(dict(zip(texts, ([1.0, 0.0], [1.0, 0.0], [0.6, 0.8], [1.0, 0.0]), strict=True)))
    second = TableEmbedder(dict(zip(texts, ([0.6, 0.8], [0.8, 0.6], [0.0, 1.0], [0.8, 0.6]), strict=True)))
    plain = PairedEmbedder(first, second, "a+b", first_share=0.5)
    scaled = PairedEmbedder(first, second, "a+b", first_share=0.5, first_from_second=(-2.0, 3.0))

    def score(pair: PairedEmbedder, question: str, text: str) -> float:
        return pair.calibrated(question, text, _cos(pair.embed_documents([text])[0], pair.embed_query(question)))

    # e5's 0.8 stands in for MiniLM as -2 + 3·0.8 = 0.4: the mean of 0.8 (e5's half) and 0.4.
    assert score(scaled, "How to install?", "安装软件包的文档") == pytest.approx(0.5 * 0.8 + 0.5 * 0.4, rel=1e-5)
    assert score(plain, "How to install?", "安装软件包的文档") == pytest.approx(0.8, rel=1e-5)
    for question, text in (("How to install?", "doc"), ("怎么安装软件包", "安装软件包的文档")):
        assert score(scaled, question, text) == pytest.approx(score(plain, question, text), rel=1e-6)

def test_share_outside_zero_to_one_is_refused() -> None:
    one = TableEmbedder({"x": [1.0]})
    for share in (1.0, 1.5, -0.1):
        with pytest.raises(ValueError, match="at least 0 and below 1"):
            PairedEmbedder(one, one, "a+b", first_share=share)


def test_pair_names_and_the_chunking_tokenizer() -> None:
    assert pair_parts(BUNDLED_PAIR_MODEL) == ["bundled:all-MiniLM-L6-v2", "bundled:multilingual-e5-small"]
    assert pair_parts("only/one") == ["only/one"]
    # Chunks are cut by the first model's tokenizer: an English corpus is chunked exactly as MiniLM alone cut it.
    assert tokenizer_path(BUNDLED_PAIR_MODEL) == resolve_embed_model("bundled:all-MiniLM-L6-v2")


@pytest.mark.parametrize("name", ["a+b+c", "bundled:all-MiniLM-L6-v2+", "+b"])
def test_a_malformed_pair_is_a_config_error_naming_the_variable(name: str) -> None:
    with pytest.raises(ConfigError, match="RAG_EMBED_MODEL"):
        build_embedder(Settings(_env_file=None, embed_model=name))  # type: ignore[call-arg]


def test_bundled_pair_loads_both_models_and_ranks_across_languages() -> None:
    """The real pair: an English and a Chinese question each find their passage among passages in both languages."""
    pair = build_embedder(Settings(_env_file=None, embed_model=BUNDLED_PAIR_MODEL))  # type: ignore[call-arg]
    assert isinstance(pair, PairedEmbedder) and pair.dimension == 769 and pair.max_tokens >= 250
    docs = ["Debian was founded by Ian Murdock in August 1993.", "Bananas are rich in potassium.",
            "apt 从配置的软件源下载并安装软件包。", "香蕉富含钾元素。"]
    vectors = pair.embed_documents(docs)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=0.01)
    assert int(np.argmax(vectors @ pair.embed_query("Who started the Debian project?"))) == 0
    assert int(np.argmax(vectors @ pair.embed_query("如何用 apt 安装软件包？"))) == 2
    assert int(np.argmax(vectors[:2] @ pair.embed_query("哪种水果含钾？"))) == 1  # Chinese question, English text


@pytest.fixture(scope="module")
def pair() -> PairedEmbedder:
    """The bundled pair, loaded once for this module's real-Chroma tests."""
    loaded = build_embedder(Settings(_env_file=None, embed_model=BUNDLED_PAIR_MODEL))  # type: ignore[call-arg]
    assert isinstance(loaded, PairedEmbedder)
    return loaded


def _indexed(tmp_path: Path, pair: PairedEmbedder, files: dict[str, str]) -> Retriever:
    """The files ingested with the pair into a fresh embedded Chroma; the retriever over them."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in files.items():
        (docs / name).write_text(text, encoding="utf-8")
    settings = Settings(_env_file=None, data_dir=tmp_path / "data", embed_model=BUNDLED_PAIR_MODEL)  # type: ignore[call-arg]
    service.sync([docs], settings, embedder=pair)
    return build_retriever(settings, pair, build_store(settings))


def test_pair_through_chroma_and_the_retriever_keeps_one_score_scale(tmp_path: Path, pair: PairedEmbedder) -> None:
    """Real ingest into Chroma with the pair: each language's question finds its passage, and the calibrated dense
    cosine of a Chinese chunk equals e5's own cosine (the retriever undoes the stored layout's scaling)."""
    retriever = _indexed(tmp_path, pair, {
        "apt.md": "# 软件包\n\napt 从配置的软件源下载并安装软件包，并自动处理依赖关系。\n",
        "founding.md": "# History\n\nDebian was founded by Ian Murdock in August 1993.\n"})
    chinese = retriever.search("apt 如何安装软件包？", 2, LOCAL_OPERATOR)
    english = retriever.search("Who founded Debian?", 2, LOCAL_OPERATOR)
    assert chinese[0].source == "apt.md" and english[0].source == "founding.md"
    e5 = pair._second
    own = float(e5.embed_documents([chinese[0].text])[0] @ e5.embed_query("apt 如何安装软件包？"))
    assert chinese[0].extra["dense"] == pytest.approx(own, abs=0.02)


def test_in_a_corpus_of_both_languages_each_question_finds_the_version_in_its_own_language(
        tmp_path: Path, pair: PairedEmbedder) -> None:
    """An English policy and its Chinese translation, ingested with the default pair: an English question cites
    the English version first and a Chinese one the Chinese (without the cross scale, e5's squeezed cosines put
    the Chinese version first for English questions: Debian Reference in both languages, recall@1 0.06)."""
    retriever = _indexed(tmp_path, pair, {
        "passwords.md": "# Password policy\n\nPasswords must have at least 14 characters and are changed every "
                        "twelve months.\n",
        "passwords-zh.md": "# 密码规定\n\n密码至少需要十四个字符，并且每十二个月更换一次。\n",
        "parking.md": "# Parking\n\nStaff parking permits cost 35 euros per month.\n"})
    for question in ("How many characters must a password have?", "How often are passwords changed?"):
        assert retriever.search(question, 3, LOCAL_OPERATOR)[0].source == "passwords.md", question
    assert retriever.search("密码至少需要几个字符？", 3, LOCAL_OPERATOR)[0].source == "passwords-zh.md"


def test_quotes_are_ranked_by_the_pairs_first_model_and_a_single_model_by_itself(tmp_path: Path) -> None:
    """The extractive ranking's floors were fitted on MiniLM's cosines: the engine wired for a pair gets its first
    model, not the pair's mixed scale."""
    first = TableEmbedder({"doc": [1.0, 0.0]})
    second = TableEmbedder({"doc": [0.0, 1.0]})
    pair = PairedEmbedder(first, second, "a+b")
    settings = Settings(data_dir=tmp_path / "data", _env_file=None)  # type: ignore[call-arg]
    assert sentence_encoder(pair) is first and sentence_encoder(first) is first
    engine = build_engine(settings, pair, build_store(settings), FakeLLMServer(lambda messages: "").llm())
    assert isinstance(engine._encoder, RememberedSentences) and engine._encoder._encoder is first  # remembered
