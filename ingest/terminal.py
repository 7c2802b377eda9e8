"""Text that comes from documents, file names or people, printed on an operator's terminal through Rich."""

from __future__ import annotations

from rich.markup import escape

from rag.core.sanitize import printable


def plain(text: object) -> str:
    """`text` as Rich markup that prints it literally: its brackets escaped (never read as markup, so never a
    MarkupError), its terminal control characters made visible (never an escape sequence or a link)."""
    return escape(printable(str(text)))
