"""Settings: read from RAG_* environment variables (and .env) once, at the edges."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import AliasChoices, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from rag.components.models import BUNDLED_E5_MODEL, BUNDLED_EMBED_MODEL
from rag.core.access import AccessPolicy
from rag.core.errors import ConfigError

# Both bundled models as one (rag.components.paired_embedder): MiniLM for English questions, e5 for Chinese ones.
BUNDLED_PAIR_MODEL = f"{BUNDLED_EMBED_MODEL}+{BUNDLED_E5_MODEL}"
# The offline default LLM (Qwen2.5-Coder-0.5B-Instruct, verified and converted by make setup: docs).
OFFLINE_LLM = "qwen2.5-coder-0.5b-instruct"


@dataclass(frozen=True, slots=True)
class RetrievalTuning:
    """Hybrid retrieval's refusal thresholds and dense shares, for questions without Chinese and all-Chinese ones."""

    refusal_threshold: float
    refusal_threshold_cjk: float
    dense_weight: float
    dense_weight_cjk: float
    pair_share: float = 0.5  # a pair's first model's share of the dense score (rag.components.paired_embedder)
    pair_share_cjk: float = 0.0
    # (offset, slope): a pair's second-model cosine on the first model's scale (PairedEmbedder.first_from_second).
    pair_cross_scale: tuple[float, float] | None = None


# Measured with `rag eval` on the dev sets (docs): cosine scales differ between models (e5's unrelated texts
# score ~0.7), so thresholds and weights belong to the model. Other models get MiniLM's: recalibrate them.
TUNING = {
    BUNDLED_EMBED_MODEL: RetrievalTuning(0.27, 0.16, 0.8, 0.1),
    BUNDLED_E5_MODEL: RetrievalTuning(0.72, 0.60, 0.9, 0.7),
    # Fitted on the tune halves of all eight dev sets (docs "Tune halves and test halves"). The Chinese threshold
    # keeps 0.97+ of answerable questions: e5 scores on-topic unanswerable Chinese questions as high as answerable
    # ones, so no threshold separates them and refusing those is left to the answer step.
    # The cross scale: a grid of slope × the MiniLM value of e5's median cross-lingual cosine (0.80) on the tune
    # halves of English questions over mixed and Chinese corpora, keeping every answerable tune question.
    BUNDLED_PAIR_MODEL: RetrievalTuning(0.34, 0.47, 0.8, 0.8, pair_share=0.8, pair_share_cjk=0.0,
                                        pair_cross_scale=(-2.0, 3.0)),
}

# Host names that always mean this machine: trusted by the served app whatever RAG_TRUSTED_HOSTS says.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")


def is_loopback(host: str) -> bool:
    """Whether a bind address or host name stays on this machine (127.0.0.0/8, ::1, localhost)."""
    name = host.strip().strip("[]").lower().rstrip(".")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _entries(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


_HOST_NAME = re.compile(r"[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*\.?", re.IGNORECASE)


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True



def _host_list(value: str, hint: str, star: bool) -> str:
    """The comma-separated host names unchanged, or a ValueError naming the first that is not one."""
    for name in _entries(value):
        bare = name.removeprefix("*.").strip("[]")
        if not ((star and name == "*") or _is_ip(bare) or _HOST_NAME.fullmatch(bare)):
            raise ValueError(f"{name!r} is not a host name (no scheme, port or path; {hint})")
    return value

def _stripped_url(value: str) -> str:
    """A URL without surrounding blanks or a trailing slash."""
    return value.strip().rstrip("/")


def _none_if_empty(value: object) -> object:
    """An empty variable (`RAG_X=`) as unset."""
    return None if value == "" else value


SECTION_CONFIG = SettingsConfigDict(env_prefix="RAG_", env_file=".env", extra="ignore")


class StorageSettings(BaseSettings):
    """Where things are kept: the data dir, Chroma (embedded or a server), the keyword index, the databases."""

    model_config = SECTION_CONFIG

    data_dir: Path = Path("./data")
    docs_dir: Path | None = None
    chroma_url: str = ""
    chroma_token: str = Field(default="", repr=False)
    keyword_db_url: str = Field(default="", repr=False)  # PostgreSQL for the keyword index (rag.components.keyword_pg)
    collection: str = "documents"
    chat_db_url: str = Field(default="", repr=False)
    feedback_db_url: str = Field(default="", repr=False)
    record_unanswered: bool = True  # refused and escalated questions, for `rag gaps` (in the feedback database)

    _strip_url = field_validator("chroma_url")(_stripped_url)
    _empty_dir_is_none = field_validator("docs_dir", mode="before")(_none_if_empty)

    @field_validator("chroma_token")
    @classmethod
    def _token_chars(cls, value: str) -> str:
        # What Chroma's token client accepts; the message never repeats the token.
        if any(not (char.isascii() and char.isprintable()) or char.isspace() for char in value):
            raise ValueError("the token may hold only ASCII letters, digits and punctuation")
        return value

    @property
    def index_dir(self) -> Path:
        """Folder of the embedded Chroma store, the manifest and the ingest lock."""
        return self.data_dir / "index"

    @property
    def models_dir(self) -> Path:
        """Folder of models prepared at set-up (converted LLM, exported encoders)."""
        return self.data_dir / "models"

    @property
    def documents_dir(self) -> Path:
        """The documents folder that uploads land in and /v1/sync re-syncs (RAG_DOCS_DIR, else data/documents)."""
        return self.docs_dir or self.data_dir / "documents"

    @property
    def chat_database_url(self) -> str:
        """SQLAlchemy async URL of the chat history (RAG_CHAT_DB_URL, else SQLite under the data dir)."""
        return self.chat_db_url or f"sqlite+aiosqlite:///{(self.data_dir / 'chat.db').resolve()}"

    @property
    def feedback_database_url(self) -> str:
        """SQLAlchemy URL of the feedback store (RAG_FEEDBACK_DB_URL, else SQLite under the data dir)."""
        return self.feedback_db_url or f"sqlite:///{(self.data_dir / 'feedback.db').resolve()}"


class EmbeddingSettings(BaseSettings):
    """The Sentence-BERT model and how it runs."""

    model_config = SECTION_CONFIG

    embed_model: str = Field(default=BUNDLED_PAIR_MODEL, min_length=1)
    embed_device: str = "cpu"
    embed_backend: Literal["auto", "onnx", "onnx-int8", "torch"] = "auto"
    embed_dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    embed_batch_size: int = Field(default=64, ge=1)
    # Threads one model call may use; 0: `rag serve` takes 1 (its requests run side by side, each embedding its own
    # question: CPU per answer -12 %, answers/s +14 % on 2 cores, benchmarks.app_cost), the others every core.
    embed_threads: int = Field(default=0, ge=0)


class IngestSettings(BaseSettings):
    """How documents are read, chunked and written, and how long a change waits for another."""

    model_config = SECTION_CONFIG

    chunk_tokens: int = Field(default=250, ge=16)
    chunk_overlap_tokens: int = Field(default=32, ge=0)
    max_file_mb: float = Field(default=50.0, gt=0)
    parse_timeout_s: float = Field(default=120.0, gt=0)
    ingest_batch_chunks: int = Field(default=1024, ge=1)
    parse_workers: int = Field(default=1, ge=1, le=64)
    ingest_writers: int = Field(default=1, ge=1, le=32)
    quote_vectors_at_ingest: bool = False
    ingest_wait_s: float = Field(default=30.0, ge=0)
    watch_debounce_ms: int = Field(default=1000, ge=50, le=600_000)
    ingest_workers: int = Field(default=2, ge=1, le=64)

    @property
    def max_file_bytes(self) -> int:
        """The size limit of one input file, in bytes."""
        return int(self.max_file_mb * 1024 * 1024)


class RetrievalSettings(BaseSettings):
    """Hybrid search: how many excerpts, the refusal thresholds and fusion weights (None: measured per model)."""

    model_config = SECTION_CONFIG

    top_k: int = Field(default=3, ge=1, le=50)
    # None: the values measured for the embedder (RetrievalTuning, TUNING).
    refusal_threshold: float | None = Field(default=None, ge=-1.0, le=1.0)
    refusal_threshold_cjk: float | None = Field(default=None, ge=-1.0, le=1.0)
    retrieval_mode: Literal["hybrid", "dense", "keyword"] = "hybrid"
    hybrid_dense_weight: float | None = Field(default=None, ge=0.0, le=1.0)
    hybrid_dense_weight_cjk: float | None = Field(default=None, ge=0.0, le=1.0)
    # Below 1: a share of 1 would leave Chinese chunks, which only the second model scores, unscored.
    embed_pair_share: float | None = Field(default=None, ge=0.0, lt=1.0)
    embed_pair_share_cjk: float | None = Field(default=None, ge=0.0, lt=1.0)
    rerank_model: str = ""
    translate_questions: bool = True  # search once more with the question in the documents' other language

    _empty_tuning_is_none = field_validator("refusal_threshold", "refusal_threshold_cjk", "hybrid_dense_weight",
                                            "hybrid_dense_weight_cjk", "embed_pair_share", "embed_pair_share_cjk",
                                            mode="before")(_none_if_empty)


class AnswerSettings(BaseSettings):
    """The answer: how it is written and checked, which links it may show, when to hand over to a human."""

    model_config = SECTION_CONFIG

    answer_mode: Literal["auto", "generate", "extract"] = "auto"
    llm_languages: str = "en,zh"
    escalate_below: float = Field(default=0.6, ge=0.0, le=1.0)
    link_allowlist: str = ""

    @field_validator("llm_languages")
    @classmethod
    def _known_languages(cls, value: str) -> str:
        unknown = {part.strip() for part in value.split(",") if part.strip()} - {"en", "zh"}
        if unknown:
            raise ValueError(f"languages are en and zh, not {', '.join(sorted(unknown))}")
        return value

    @field_validator("link_allowlist")
    @classmethod
    def _link_hosts(cls, value: str) -> str:
        return _host_list(value, "`*.example.com` for a domain and its subdomains", star=False)

    @property
    def model_languages(self) -> frozenset[str]:
        """The languages the LLM writes well (RAG_LLM_LANGUAGES); questions in others get quoted answers."""
        return frozenset(part.strip().lower() for part in self.llm_languages.split(",") if part.strip())


class LLMSettings(BaseSettings):
    """The chat model's server: where it answers, and how `rag llm` starts vLLM."""

    model_config = SECTION_CONFIG

    llm_base_url: str = "http://127.0.0.1:8010/v1"
    llm_model: str = OFFLINE_LLM
    llm_api_key: str = Field(default="EMPTY", repr=False)
    llm_timeout_s: float = Field(default=60.0, gt=0)
    llm_connect_timeout_s: float = Field(default=2.0, gt=0)
    # RAG_LLM_MAX_TOKENS is the name before the answer checks came; still read.
    max_answer_tokens: int = Field(default=256, ge=16, le=4096,
                                   validation_alias=AliasChoices("RAG_MAX_ANSWER_TOKENS", "RAG_LLM_MAX_TOKENS"))
    llm_temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    llm_repetition_penalty: float = Field(default=1.0, ge=1.0, le=2.0)
    llm_model_path: Path | None = None
    llm_max_model_len: int = Field(default=4096, ge=256)
    llm_dtype: Literal["auto", "bfloat16", "float32"] = "auto"
    llm_compile: Literal["auto", "eager", "compile"] = "auto"
    llm_stream_interval: int = Field(default=4, ge=1, le=64)
    llm_start_timeout_s: float = Field(default=900.0, gt=0)
    vllm_python: Path = Path(".venv-vllm/bin/python")

    _strip_llm_url = field_validator("llm_base_url")(_stripped_url)
    _empty_path_is_none = field_validator("llm_model_path", mode="before")(_none_if_empty)


class ServerSettings(BaseSettings):
    """The served API: who may call it, from where, how much at once."""

    model_config = SECTION_CONFIG

    ungrouped: Literal["public", "private"] = "public"
    api_keys: str = Field(default="", repr=False)
    max_concurrent_generations: int = Field(default=64, ge=1)
    queue_timeout_s: float = Field(default=10.0, ge=0)
    max_upload_mb: float = Field(default=50.0, gt=0)
    max_body_kb: int = Field(default=256, ge=16)
    trusted_hosts: str = ""
    cors_origins: str = ""
    https: bool = False

    @field_validator("trusted_hosts")
    @classmethod
    def _host_names(cls, value: str) -> str:
        return _host_list(value, "`*.example.com` for its subdomains, `*` for any name", star=True)

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, value: str) -> str:
        for origin in _entries(value):
            if origin == "*":
                raise ValueError("`*` would let every web site call the app with its users' credentials: list the "
                                 "origins allowed instead (https://app.example.com)")
            url = urlsplit(origin)
            if url.scheme not in {"http", "https"} or not url.hostname or url.path not in {"", "/"} or url.query:
                raise ValueError(f"{origin!r} is not an origin like https://app.example.com (scheme, host, port)")
        return value

    @property
    def access_policy(self) -> AccessPolicy:
        """Who sees documents without groups (RAG_UNGROUPED)."""
        return AccessPolicy(ungrouped_public=self.ungrouped == "public")

    @property
    def trusted_host_list(self) -> tuple[str, ...]:
        """Host names the served app answers to: the loopback names and RAG_TRUSTED_HOSTS (lower case, IPv6
        without brackets)."""
        names = (name.strip("[]").lower().rstrip(".") for name in _entries(self.trusted_hosts))
        return tuple(dict.fromkeys([*LOOPBACK_HOSTS, *names]))

    @property
    def cors_origin_list(self) -> tuple[str, ...]:
        """Browser origins allowed to call the app from their pages (RAG_CORS_ORIGINS), as browsers send them."""
        return tuple(origin.rstrip("/").lower() for origin in _entries(self.cors_origins))


class ChatSettings(BaseSettings):
    """The chat UI's sign-in and sessions."""

    model_config = SECTION_CONFIG

    ui_auth: bool = True
    ui_auth_secret: str = Field(default="", repr=False)
    ui_users: str = Field(default="", repr=False)
    session_hours: float = Field(default=8.0, gt=0, le=720)
    login_max_failures: int = Field(default=5, ge=1)
    login_window_s: float = Field(default=900.0, gt=0)
    login_concurrency: int = Field(default=1, ge=1, le=16)


class Settings(StorageSettings, EmbeddingSettings, IngestSettings, RetrievalSettings, AnswerSettings, LLMSettings,
               ServerSettings, ChatSettings):
    """Every knob of the assistant, in sections (a part that needs one section takes that class); each RAG_*
    variable is documented in .env.example."""

    model_config = SECTION_CONFIG

    @property
    def tuning(self) -> RetrievalTuning:
        """Refusal thresholds and fusion weights: those set, else the ones measured for RAG_EMBED_MODEL."""
        measured = TUNING.get(self.embed_model, TUNING[BUNDLED_EMBED_MODEL])
        return RetrievalTuning(
            measured.refusal_threshold if self.refusal_threshold is None else self.refusal_threshold,
            measured.refusal_threshold_cjk if self.refusal_threshold_cjk is None else self.refusal_threshold_cjk,
            measured.dense_weight if self.hybrid_dense_weight is None else self.hybrid_dense_weight,
            measured.dense_weight_cjk if self.hybrid_dense_weight_cjk is None else self.hybrid_dense_weight_cjk,
            measured.pair_share if self.embed_pair_share is None else self.embed_pair_share,
            measured.pair_share_cjk if self.embed_pair_share_cjk is None else self.embed_pair_share_cjk,
            measured.pair_cross_scale,
        )

    @property
    def served_model_path(self) -> Path:
        """The model folder `rag llm` serves: RAG_LLM_MODEL_PATH, else the offline default converted at set-up."""
        return self.llm_model_path or self.models_dir / OFFLINE_LLM


def _shown(field: str, value: object) -> str:
    """A bad value as an error may show it: secrets (fields kept out of reprs) are not repeated."""
    info = Settings.model_fields.get(field)
    return "(hidden)" if info is not None and not info.repr else repr(value)


def load_settings() -> Settings:
    """Read Settings from the environment; a bad value becomes a ConfigError naming its RAG_ variable."""
    try:
        return Settings()
    except ValidationError as exc:
        problems = "; ".join(
            f"RAG_{str(err['loc'][0]).upper()}: {err['msg']} (got {_shown(str(err['loc'][0]), err.get('input'))})"
            for err in exc.errors()
        )
        raise ConfigError(f"invalid settings: {problems}") from exc
