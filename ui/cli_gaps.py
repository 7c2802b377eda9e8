"""`rag gaps`: what the documents fail to answer — refused, escalated and 👎-rated questions grouped into topics."""

from __future__ import annotations

import json
from datetime import datetime

import click
from rich.console import Console
from rich.table import Table

from ingest.terminal import plain
from rag.components.unanswered import load_asked
from rag.core.errors import RagError
from rag.core.gaps import GapReport, find_gaps, parse_since, since_iso
from rag.wiring import App
from ui.cli_base import pass_app


class Since(click.ParamType[datetime | None]):
    """An age (7d, 12h, 2w), a date (2026-11-01, ISO 8601) or `all`."""

    name = "since"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> datetime | None:
        if value is None or isinstance(value, datetime):
            return value
        try:
            return parse_since(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


@click.command()
@click.option("--since", type=Since(), default="30d", show_default=True,
              help="Questions asked since: an age (7d, 12h, 2w), a date (2026-11-01) or `all`.")
@click.option("--min-count", type=click.IntRange(1), default=1, show_default=True,
              help="Leave out topics asked fewer times.")
@click.option("--json", "as_json", is_flag=True, help="The report as one JSON object, for tools.")
@pass_app
def gaps(app: App, since: datetime | None, min_count: int, as_json: bool) -> None:
    """Topics the documents fail to answer: refused, escalated and 👎-rated questions grouped by meaning, largest
    first, with counts, reasons and examples — what to write next."""
    try:
        report = _report(app, since, min_count)
    except RagError as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        click.echo(json.dumps(report.as_json(), ensure_ascii=False, indent=2))
        return
    Console().print(gaps_table(report))
    hidden = f"; {report.hidden} smaller topics left out (--min-count)" if report.hidden else ""
    click.echo(f"{report.total} questions since {report.since or 'the start'}: "
               + ", ".join(f"{n} {reason.replace('_', '-')}" for reason, n in report.reasons.items()) + hidden)


def _report(app: App, since: datetime | None, min_count: int) -> GapReport:
    """The report as the local operator sees it: every question, whatever document it came closest to."""
    created_after = since_iso(since)
    asked = load_asked(app.unanswered(), app.feedback(), created_after)
    if not asked:  # no model to load for an empty report
        return GapReport(created_after, 0, {}, [])
    return find_gaps(asked, app.embedder, created_after, min_count)


def gaps_table(report: GapReport) -> Table:
    """Topics as a table a person reads: label and keywords, how often and why, examples, when."""
    table = Table(show_lines=True, title="What the documents fail to answer")
    for column, options in (("#", {"justify": "right"}), ("topic", {"ratio": 3}), ("asked", {"justify": "right"}),
                            ("why", {}), ("examples", {"ratio": 4}), ("last asked", {})):
        table.add_column(column, overflow="fold", **options)
    for n, topic in enumerate(report.topics, start=1):
        # Questions are what people typed: shown as text, never read as rich markup.
        label = plain(topic.label) + (f"\n[dim]{plain(', '.join(topic.keywords))}[/dim]" if topic.keywords else "")
        why = "\n".join(f"{count} {reason.replace('_', '-')}" for reason, count in topic.reasons.items())
        examples = "\n".join(f"• {plain(example)}" for example in topic.examples[1:]) or "[dim](one question)[/dim]"
        table.add_row(str(n), label, f"{topic.count}\n[dim]{topic.share:.0%}[/dim]", why, examples,
                      topic.last_seen[:16].replace("T", " "))
    if not report.topics:
        table.add_row("", "[dim]nothing refused, escalated or rated down[/dim]", "", "", "", "")
    return table
