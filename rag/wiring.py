"""The only place where concrete clients (the embedder, Chroma, the LLM) are built from Settings."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from rag.components import filelock
from rag.components.collections import CollectionRegistry
from rag.components.cpu import BF16_FLAGS, cpu_flags
from rag.components.embedder import TorchEmbedder
from rag.components.feedback import FeedbackStore
from rag.components.index import Index
from rag.components.keyword import KeywordIndex
from rag.components.keyword_pg import PgKeywordIndex
from rag.components.llm import LLM
from rag.components.models import model_cache_dir, resolve_embed_model
from rag.components.onnx_embedder import ModelFolder, load_onnx_embedder, onnx_file
from rag.components.paired_embedder import PAIR_SEPARATOR, PairedEmbedder, pair_parts
from rag.components.rerank import CrossEncoderReranker
from rag.components.sentence_cache import QuoteVectors, RememberedSentences
from rag.components.store import ChromaStore
from rag.components.unanswered import UnansweredStore
from rag.config import EmbeddingSettings, LLMSettings, Settings, StorageSettings, load_settings
from rag.core.answer import QueryEngine
from rag.core.errors import ConfigError, EmptyIndex, StoreInUse, StoreUnavailable
from rag.core.ports import ChatModel, Embedder, KeywordStore, Searcher, sentence_encoder
from rag.core.retrieve import Floors, Fusion, Retriever
from rag.core.sanitize import LinkPolicy
from rag.core.translate import LLMTranslator

if TYPE_CHECKING:
    import sqlalchemy as sa
    from chromadb.api import ClientAPI


def prefer_passive_threads() -> None:
    """For serving processes (ask, search, serve): OpenMP threads sleep instead of spinning when idle.

    vLLM shares these CPUs; with both processes spinning their OpenMP threads, a 10 ms query embedding took
    500 ms (measured on 2 cores). Takes effect only before torch is first imported, so edges call it early.
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def embed_dtype(settings: EmbeddingSettings) -> str:
    """The torch dtype for the embedder: "auto" picks bfloat16 where the CPU computes it natively."""
    if settings.embed_dtype != "auto":
        return settings.embed_dtype
    if settings.embed_device.startswith("cuda"):
        return "float16"
    # AVX512-BF16 / AMX run bf16 matmuls natively: ~2.3x MiniLM throughput, cosine to fp32 ≥ 0.998.
    native = settings.embed_device == "cpu" and bool(cpu_flags() & BF16_FLAGS)
    return "bfloat16" if native else "float32"


def tokenizer_path(name: str) -> str:
    """The model whose tokenizer sizes chunks: the first of a pair (its chunks are then those it alone made)."""
    return resolve_embed_model(pair_parts(name)[0])


def build_embedder(settings: Settings) -> Embedder:
    """Load the Sentence-BERT model named by RAG_EMBED_MODEL (no network: the hub is never asked) on the backend
    RAG_EMBED_BACKEND picks; `first+second` loads both as one PairedEmbedder."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parts = pair_parts(settings.embed_model)
    if len(parts) == 1:
        return _checked(settings, _single_embedder(settings))
    if len(parts) != 2 or not all(parts):
        raise ConfigError(f"RAG_EMBED_MODEL={settings.embed_model!r}: a pair is two model names joined by "
                          f"{PAIR_SEPARATOR!r}")
    first, second = (_single_embedder(settings.model_copy(update={"embed_model": part})) for part in parts)
    shares = settings.tuning
    return _checked(settings, PairedEmbedder(first, second, settings.embed_model, shares.pair_share,
                                             shares.pair_share_cjk, shares.pair_cross_scale))


# Models loaded in this process, by what decides their weights and batches: a second App, a benchmark or a test in
# the same process shares them instead of holding another copy (ONNX Runtime keeps each session's arena for good).
_LOADED: dict[tuple[str, str, str, str, int, int], Embedder] = {}
_LOADING = threading.Lock()


def _single_embedder(settings: Settings) -> Embedder:
    key = (settings.embed_model, settings.embed_device, settings.embed_backend, settings.embed_dtype,
           settings.embed_batch_size, settings.embed_threads)
    with _LOADING:
        if key not in _LOADED:
            _LOADED[key] = _load_single_embedder(settings)
        return _LOADED[key]


def _load_single_embedder(settings: Settings) -> Embedder:
    path = resolve_embed_model(settings.embed_model)
    folder = ModelFolder.read(Path(path))
    try:
        if (backend := embed_backend(settings, folder)).startswith("onnx"):
            assert folder is not None
            model = onnx_file(folder, model_cache_dir(), int8=backend == "onnx-int8")
            embedder: Embedder = load_onnx_embedder(folder, model, settings.embed_model, settings.embed_batch_size,
                                                    settings.embed_threads)
        else:
            embedder = _torch_embedder(settings, path)
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(f"cannot load embedding model {settings.embed_model!r} ({path}): {exc}") from exc
    return embedder


def _checked(settings: Settings, embedder: Embedder) -> Embedder:
    if settings.chunk_tokens > embedder.max_tokens:
        raise ConfigError(
            f"RAG_CHUNK_TOKENS={settings.chunk_tokens} exceeds what {settings.embed_model} reads "
            f"({embedder.max_tokens} tokens): chunks would be truncated"
        )
    return embedder


def embed_backend(settings: Settings, folder: ModelFolder | None) -> str:
    """"onnx", "onnx-int8" or "torch": auto takes ONNX Runtime (float32) on a CPU without native bf16 where the
    model folder is one it reproduces, and torch in bfloat16 on a CPU with it."""
    if settings.embed_backend.startswith("onnx") and folder is None:
        raise ConfigError(f"RAG_EMBED_BACKEND={settings.embed_backend} cannot run {settings.embed_model!r}: it "
                          "needs a local sentence-transformers folder of Transformer, mean or CLS Pooling and "
                          "Normalize")
    if settings.embed_backend != "auto":
        return settings.embed_backend
    # Native bf16 encodes MiniLM ~2x faster than float32 on ONNX Runtime or torch (benchmarks.ingest_throughput:
    # 1.9x on a 2-core EPYC); ONNX Runtime has no bf16 kernels, and on other CPUs it starts without torch.
    on_cpu = settings.embed_device == "cpu" and embed_dtype(settings) == "float32"
    return "onnx" if on_cpu and folder is not None else "torch"


def _torch_embedder(settings: Settings, path: str) -> TorchEmbedder:
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as transformers_logging

    # transformers draws a "Loading weights" bar on stderr: noise before every `rag ask` answer, and in the
    # output of tools that read `--json` with stderr merged.
    transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]

    if settings.embed_threads:
        torch.set_num_threads(settings.embed_threads)  # the process's intra-op pool: one model call's threads
    dtype = getattr(torch, embed_dtype(settings))
    model = SentenceTransformer(path, device=settings.embed_device, model_kwargs={"torch_dtype": dtype})
    return TorchEmbedder(model, name=settings.embed_model, batch_size=settings.embed_batch_size)


CHROMA_TOKEN_PROVIDER = "chromadb.auth.token_authn.TokenAuthClientProvider"


def build_chroma_client(settings: StorageSettings) -> ClientAPI:
    """An HttpClient when RAG_CHROMA_URL is set (sending RAG_CHROMA_TOKEN, if any, as `Authorization: Bearer` on
    every request), else an embedded PersistentClient under the data dir."""
    import chromadb
    from chromadb.config import Settings as ChromaSettings

    token = settings.chroma_token or None
    if token and not settings.chroma_url:
        raise ConfigError("RAG_CHROMA_TOKEN is set but RAG_CHROMA_URL is empty: the embedded store takes no token")
    chroma_settings = ChromaSettings(anonymized_telemetry=False, chroma_client_auth_credentials=token,
                                     chroma_client_auth_provider=CHROMA_TOKEN_PROVIDER if token else None)
    if not settings.chroma_url:
        path = Path(settings.index_dir) / "chroma"
        path.mkdir(parents=True, exist_ok=True)
        return chromadb.PersistentClient(path=str(path), settings=chroma_settings)
    url = urlsplit(settings.chroma_url)
    if url.scheme not in {"http", "https"} or not url.hostname:
        raise ConfigError(f"RAG_CHROMA_URL must look like http://host:port, got {settings.chroma_url!r}")
    ssl = url.scheme == "https"
    try:
        return chromadb.HttpClient(
            host=url.hostname, port=url.port or (443 if ssl else 8000), ssl=ssl, settings=chroma_settings
        )
    except Exception as exc:
        raise StoreUnavailable(f"cannot reach the Chroma server at {settings.chroma_url}: {exc}") from exc


def collection_name(settings: Settings) -> str:
    """The Chroma collection serving RAG_COLLECTION for RAG_EMBED_MODEL (another one after a re-embed)."""
    return CollectionRegistry(settings.index_dir).resolve(settings.collection, settings.embed_model)


def keyword_path(settings: StorageSettings, collection: str) -> Path:
    """The keyword index file beside a Chroma collection."""
    return settings.index_dir / "keyword" / f"{collection}.sqlite3"


def build_keyword_index(settings: StorageSettings, collection: str) -> KeywordStore:
    """The keyword index of a collection: in PostgreSQL when RAG_KEYWORD_DB_URL is set (shared by replicas on any
    host), else the embedded one beside the data dir."""
    if settings.keyword_db_url:
        return PgKeywordIndex(settings.keyword_db_url, collection)
    return KeywordIndex(keyword_path(settings, collection))


def copy_shared_keyword_index(settings: StorageSettings, source: str, target: str) -> None:
    """Copy a collection's keyword index in RAG_KEYWORD_DB_URL to another collection's name (a re-embed)."""
    index = PgKeywordIndex(settings.keyword_db_url, source)
    try:
        index.copy_to(target).close()
    finally:
        index.close()


def drop_keyword_index(settings: StorageSettings, collection: str) -> None:
    """Delete a collection's keyword index: its SQLite file, and its rows in RAG_KEYWORD_DB_URL when set."""
    keyword_path(settings, collection).unlink(missing_ok=True)
    if settings.keyword_db_url:
        index = PgKeywordIndex(settings.keyword_db_url, collection)
        try:
            index.drop()
        finally:
            index.close()


def build_store(settings: Settings, client: ClientAPI | None = None, collection: str | None = None) -> Index:
    """The configured (or the given) collection, opened on the given or a freshly built Chroma client, with its
    keyword index."""
    name = collection or collection_name(settings)
    return Index(ChromaStore(client or build_chroma_client(settings), name, settings.embed_model),
                 build_keyword_index(settings, name))


@contextlib.contextmanager
def hold_embedded_store(settings: StorageSettings, what: str) -> Iterator[None]:
    """Claim the embedded store for this process for the block (nothing to claim with a Chroma server): embedded
    Chroma must not be written by two processes, so a second one is refused with StoreInUse naming the first."""
    if settings.chroma_url:
        yield
        return
    try:
        with filelock.exclusive(settings.index_dir / "store.lock", what, deadline=time.monotonic()):
            yield
    except filelock.Taken as taken:
        raise StoreInUse(
            f"the embedded index in {settings.index_dir} is in use by {taken.holder.describe()}. One process at a "
            "time may use it: ingest through that server (POST /v1/sync after copying files into its documents "
            "folder, or POST /v1/documents), stop it first, or run Chroma as a server (RAG_CHROMA_URL) that "
            "several processes can share") from None


def build_llm(settings: LLMSettings) -> LLM:
    """The openai SDK client for RAG_LLM_BASE_URL, with bounded timeouts (an unreachable server fails fast)."""
    from openai import OpenAI, Timeout

    from rag.components.kept_alive import pooled_http_client

    timeout = Timeout(settings.llm_timeout_s, connect=settings.llm_connect_timeout_s)
    client = OpenAI(base_url=settings.llm_base_url, api_key=settings.llm_api_key, timeout=timeout, max_retries=0,
                    http_client=pooled_http_client())
    return LLM(client, settings.llm_model, settings.max_answer_tokens, settings.llm_temperature,
               settings.llm_repetition_penalty)


def build_reranker(settings: Settings) -> CrossEncoderReranker | None:
    """The cross-encoder named by RAG_RERANK_MODEL (a sentence-transformers id or folder), or None when unset."""
    if not settings.rerank_model:
        return None
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import CrossEncoder

    try:
        model = CrossEncoder(settings.rerank_model, device=settings.embed_device)
    except Exception as exc:
        raise ConfigError(f"cannot load RAG_RERANK_MODEL {settings.rerank_model!r}: {exc}") from exc
    return CrossEncoderReranker(model)


def build_retriever(settings: Settings, embedder: Embedder | None = None, store: Index | None = None,
                    llm: ChatModel | None = None) -> Retriever:
    """Dense, keyword or hybrid retrieval (RAG_RETRIEVAL_MODE) with the fusion weights, reranker and access policy
    from settings; with an LLM, questions are also searched in translation (RAG_TRANSLATE_QUESTIONS)."""
    fusion = Fusion(settings.tuning.dense_weight, settings.tuning.dense_weight_cjk)
    translator = LLMTranslator(llm, settings.model_languages) if llm and settings.translate_questions else None
    floors = Floors(settings.tuning.refusal_threshold, settings.tuning.refusal_threshold_cjk)
    return Retriever(embedder or build_embedder(settings), store or build_store(settings), settings.retrieval_mode,
                     fusion, build_reranker(settings), settings.access_policy, translator, floors)


def build_engine(settings: Settings, embedder: Embedder | None = None, store: Index | None = None,
                 llm: ChatModel | None = None) -> QueryEngine:
    """The query path wired from settings (parts may be passed in, e.g. shared by an app)."""
    embedder = embedder or build_embedder(settings)
    llm = llm or build_llm(settings)
    retriever = build_retriever(settings, embedder, store, llm)
    tuning = settings.tuning
    encoder = sentence_encoder(embedder)
    return QueryEngine(retriever, llm, top_k=settings.top_k, refusal_threshold=tuning.refusal_threshold,
                       refusal_threshold_cjk=tuning.refusal_threshold_cjk, mode=settings.answer_mode,
                       encoder=RememberedSentences(encoder, kept=quote_vectors(settings).file(encoder)),
                       max_answer_tokens=settings.max_answer_tokens, model_languages=settings.model_languages,
                       links=LinkPolicy.parse(settings.link_allowlist))


def quote_vectors(settings: Settings) -> QuoteVectors:
    """Where the quote ranking's sentence vectors are kept: beside the index, in the embedder's space."""
    return QuoteVectors(settings.index_dir / "quote-vectors.sqlite3", settings.embed_backend, settings.embed_dtype)


def build_feedback_store(settings: StorageSettings) -> FeedbackStore:
    """The feedback store at RAG_FEEDBACK_DB_URL (SQLite under the data dir by default)."""
    return FeedbackStore(_feedback_engine(settings))


def build_unanswered_store(settings: StorageSettings) -> UnansweredStore:
    """Refused and escalated questions, in the feedback database (where questions are already kept)."""
    return UnansweredStore(_feedback_engine(settings))


def _feedback_engine(settings: StorageSettings) -> sa.Engine:
    import sqlalchemy as sa

    url = settings.feedback_database_url
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    try:
        return sa.create_engine(url, pool_pre_ping=True)
    except (sa.exc.ArgumentError, ImportError) as exc:
        raise ConfigError(f"RAG_FEEDBACK_DB_URL is not a usable database URL: {exc}") from exc


class App:
    """One process's concrete parts, built from Settings on first use and then shared: every `rag` command (click's
    ctx.obj), `rag serve`'s services, `rag-ingest` and its watcher take theirs from here. Nothing loads until asked
    for (`rag search` never loads the feedback store; a sync with nothing new never loads the embedder); parts
    passed in (a test's fakes, a server's already-loaded model) are used as they are."""

    def __init__(self, settings: Settings | None = None, *, embedder: Embedder | None = None,
                 llm: ChatModel | None = None, store: Index | None = None, engine: QueryEngine | None = None) -> None:
        self._settings, self._embedder, self._llm, self._store = settings, embedder, llm, store
        self._engine = engine

    @property
    def settings(self) -> Settings:
        """The settings given, else RAG_* from the environment (read once; ConfigError names a bad variable)."""
        if self._settings is None:
            self._settings = load_settings()
        return self._settings

    @property
    def embedder(self) -> Embedder:
        """The embedding model (RAG_EMBED_MODEL), loaded on first use."""
        if self._embedder is None:
            self._embedder = build_embedder(self.settings)
        return self._embedder

    @property
    def llm(self) -> ChatModel:
        """The chat model client (RAG_LLM_BASE_URL)."""
        if self._llm is None:
            self._llm = build_llm(self.settings)
        return self._llm

    @property
    def store(self) -> Index:
        """The configured collection and its keyword index."""
        if self._store is None:
            self._store = build_store(self.settings)
        return self._store

    @property
    def collection(self) -> str:
        """The store's collection: the one given, else the one RAG_COLLECTION resolves to (nothing opened)."""
        return self._store.name if self._store is not None else collection_name(self.settings)

    @property
    def engine(self) -> QueryEngine:
        """The query path: hybrid retrieval (with translation) and the checked answer."""
        if self._engine is None:
            self._engine = build_engine(self.settings, self.embedder, self.store, self.llm)
        return self._engine

    def require_documents(self) -> None:
        """EmptyIndex, before any model loads, when nothing was ingested: a clear error in a second, not ten."""
        if self._engine is None and self.store.count() == 0:
            raise EmptyIndex.of(self.store.name)

    @property
    def retriever(self) -> Searcher:
        """The engine's retriever: searching as the answers do."""
        return self.engine.retriever

    def feedback(self) -> FeedbackStore:
        """A feedback store on RAG_FEEDBACK_DB_URL."""
        return build_feedback_store(self.settings)

    def unanswered(self) -> UnansweredStore | None:
        """The store of refused and escalated questions; None when RAG_RECORD_UNANSWERED is off."""
        return build_unanswered_store(self.settings) if self.settings.record_unanswered else None

    def with_settings(self, **changes: object) -> App:
        """Another app on these settings with some changed (nothing loaded is shared)."""
        return App(self.settings.model_copy(update=changes))
