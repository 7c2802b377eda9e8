"""`make setup` and the image build: prepare the configured embedder(s) now, not during the first ingest (e5
converted, ONNX exported). `python -m rag.tools.prepare_models`"""

from __future__ import annotations

from pathlib import Path

from rag.components.models import model_cache_dir, resolve_embed_model
from rag.components.onnx_embedder import ModelFolder, onnx_file
from rag.components.paired_embedder import pair_parts
from rag.config import Settings


def main() -> None:
    """Print each prepared model's ONNX file, or say it runs on torch."""
    for part in pair_parts(Settings().embed_model):
        found = ModelFolder.read(Path(resolve_embed_model(part)))
        print(onnx_file(found, model_cache_dir()) if found else f"{part} runs on torch: nothing to export")


if __name__ == "__main__":
    main()
