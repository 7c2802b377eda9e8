"""What every `rag` subcommand shares: the error console, exit codes, and the core's errors turned into messages."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

import click
from rich.console import Console

from ingest.terminal import plain
from rag.core.errors import EmptyIndex, LLMUnavailable, RagError
from rag.wiring import App

EXIT_USAGE, EXIT_LLM = 2, 3
err = Console(stderr=True, highlight=False, soft_wrap=True)
# Every command takes its parts from one App in click's ctx.obj: built from RAG_* on first use, or a test's own
# (`CliRunner().invoke(main, args, obj=App(settings, llm=fake))`).
pass_app = click.make_pass_decorator(App, ensure=True)


def fail(message: str, code: int) -> NoReturn:
    """Print an error and exit with code."""
    err.print(f"[red]error:[/red] {plain(message)}")  # messages name files and quote their lines
    sys.exit(code)


@contextmanager
def errors() -> Iterator[None]:
    """Turn the core's named errors into messages and exit codes."""
    try:
        yield
    except LLMUnavailable as exc:
        fail(str(exc), EXIT_LLM)
    except EmptyIndex as exc:
        fail(str(exc), EXIT_USAGE)
    except RagError as exc:
        fail(str(exc), EXIT_USAGE)
