"""rag: the command line of the assistant (search now; ask, serve and llm as they land)."""

from __future__ import annotations

import json
import sys

import click
from rich.console import Console
from rich.table import Table

from rag.config import load_settings
from rag.errors import RagError
from rag.retrieve import Retriever
from rag.types import Hit
from rag.wiring import build_embedder, build_store


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Ask questions over your documents."""


@main.command()
@click.argument("question")
@click.option("-k", "k", type=click.IntRange(1, 100), default=None, help="How many chunks (default RAG_TOP_K).")
@click.option("--json", "as_json", is_flag=True, help="Print the hits as JSON.")
def search(question: str, k: int | None, as_json: bool) -> None:
    """Print the chunks closest to QUESTION (source, page, score, text)."""
    console = Console()
    try:
        settings = load_settings()
        retriever = Retriever(build_embedder(settings), build_store(settings))
        hits = retriever.search(question, k or settings.top_k)
    except RagError as exc:
        Console(stderr=True).print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        sys.exit(2)
    if as_json:
        print(json.dumps({"hits": [_hit_json(hit) for hit in hits]}, ensure_ascii=False))
    else:
        console.print(_hits_table(hits))


def _hit_json(hit: Hit) -> dict[str, object]:
    return {"source": hit.source, "page": hit.page, "score": hit.score, "chunk_id": hit.chunk_id, "text": hit.text}


def _hits_table(hits: list[Hit]) -> Table:
    table = Table(show_lines=True)
    for column in ("#", "source", "page", "score", "text"):
        table.add_column(column, overflow="fold")
    for n, hit in enumerate(hits, start=1):
        table.add_row(str(n), hit.source, "" if hit.page is None else str(hit.page), f"{hit.score:.3f}", hit.text)
    return table
