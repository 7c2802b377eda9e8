"""Settings: every variable documented in .env.example; bad values become clear ConfigErrors."""

from __future__ import annotations

import os
import re

import pytest

from rag.components.models import BUNDLED_E5_MODEL, BUNDLED_EMBED_MODEL, resolve_embed_model
from rag.config import TUNING, Settings, load_settings
from rag.core.errors import ConfigError
from rag.wiring import build_store
from tests.conftest import REPO, TRIPWIRE_LLM


def test_every_setting_is_in_env_example() -> None:
    documented = set(re.findall(r"^(RAG_[A-Z0-9_]+)=", (REPO / ".env.example").read_text(), re.MULTILINE))
    assert documented == {f"RAG_{name.upper()}" for name in Settings.model_fields}


def test_bad_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAG_TOP_K", "0")
    with pytest.raises(ConfigError, match="RAG_TOP_K"):
        load_settings()
    monkeypatch.delenv("RAG_TOP_K")
    monkeypatch.setenv("RAG_EMBED_MODEL", "")  # an empty model name, not a model-loading error later
    with pytest.raises(ConfigError, match="RAG_EMBED_MODEL"):
        load_settings()


def test_bundled_embedder_resolves_to_a_local_folder() -> None:
    path = resolve_embed_model("bundled:all-MiniLM-L6-v2")
    assert path.endswith("model")
    assert resolve_embed_model("/models/other") == "/models/other"


def test_bad_chroma_url_is_a_config_error(settings: Settings) -> None:
    with pytest.raises(ConfigError, match="RAG_CHROMA_URL"):
        build_store(settings.model_copy(update={"chroma_url": "chroma:8000"}))


def test_collection_built_with_another_embedder_is_refused(settings: Settings) -> None:
    build_store(settings)
    with pytest.raises(ConfigError, match="was built with embedder"):
        build_store(settings.model_copy(update={"embed_model": "some/other-model"}))


def test_unit_tests_cannot_reach_a_real_llm_by_accident() -> None:
    assert os.environ["RAG_LLM_BASE_URL"] == TRIPWIRE_LLM
    assert Settings(_env_file=None).llm_base_url == TRIPWIRE_LLM  # type: ignore[call-arg]


def test_retrieval_tuning_follows_the_embedder_unless_set() -> None:
    minilm = Settings(_env_file=None, embed_model=BUNDLED_EMBED_MODEL)  # type: ignore[call-arg]
    e5 = Settings(_env_file=None, embed_model=BUNDLED_E5_MODEL)  # type: ignore[call-arg]
    assert minilm.tuning == TUNING[BUNDLED_EMBED_MODEL] and e5.tuning == TUNING[BUNDLED_E5_MODEL]
    other = Settings(_env_file=None, embed_model="some/other-model")  # type: ignore[call-arg]
    assert other.tuning == TUNING[BUNDLED_EMBED_MODEL]
    mine = Settings(_env_file=None, embed_model=BUNDLED_E5_MODEL, refusal_threshold="0.5",  # type: ignore[call-arg]
                    hybrid_dense_weight_cjk="")
    assert mine.tuning.refusal_threshold == 0.5
    assert mine.tuning.dense_weight_cjk == TUNING[BUNDLED_E5_MODEL].dense_weight_cjk
