"""What every `rag` subcommand shares: the error console, exit codes, and the core's errors turned into messages."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

from rich.console import Console

from ingest.terminal import plain
from rag.core.errors import EmptyIndex, LLMUnavailable, RagError

EXIT_USAGE, EXIT_LLM = 2, 3
err = Console(stderr=True, highlight=False, soft_wrap=True)


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
