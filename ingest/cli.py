"""rag-ingest: sync folders of documents into the vector store, with progress and a summary."""

from __future__ import annotations

import json
import sys
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress
from rich.table import Table

from ingest.pipeline import Plan, Report
from ingest.reembed import reembed as reembed_collection
from ingest.service import library
from ingest.terminal import plain
from ingest.watch import Stopped, Watcher
from rag.core.errors import RagError
from rag.wiring import App, hold_embedded_store


class BarProgress:
    """Two rich bars, files and chunks, fed by the pipeline."""

    def __init__(self, console: Console) -> None:
        columns = (TextColumn("{task.description:>7}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        self.bars = RichProgress(*columns, console=console, transient=False)
        self._files = self.bars.add_task("files", total=0)
        self._chunks = self.bars.add_task("chunks", total=0)
        self._console = console

    def files_total(self, n: int) -> None:
        self.bars.update(self._files, total=n)

    def file_done(self, source: str, error: str | None) -> None:
        self.bars.advance(self._files)
        if error:
            self._console.print(f"[red]failed[/red] {plain(source)}: {plain(error)}", highlight=False, soft_wrap=True)

    def chunks_added(self, n: int) -> None:
        total = self.bars.tasks[self._chunks].total or 0
        self.bars.update(self._chunks, total=total + n)

    def chunks_written(self, n: int) -> None:
        self.bars.advance(self._chunks, n)


def _plan_table(plan: Plan) -> Table:
    table = Table(title="Plan (dry run: nothing changed)")
    table.add_column("action")
    table.add_column("file")
    for task in (*plan.tasks, *plan.regroups):
        table.add_row(task.action, plain(task.found.source))
    for entry in plan.deletions:
        table.add_row("delete", plain(entry.source))
    for source, error in sorted(plan.failed.items()):
        table.add_row("fail", plain(f"{source}: {error}"))
    table.caption = f"{len(plan.unchanged)} unchanged, {len(plan.skipped)} skipped (unsupported type)"
    return table


def _summary_table(report: Report) -> Table:
    table = Table(title="Ingest summary")
    values = {**report.as_json(), "failed": len(report.failed), "locked": len(report.locked)}
    for name in values:
        table.add_column(name, justify="right")
    table.add_row(*(str(value) for value in values.values()))
    return table


def _plan_json(plan: Plan) -> dict[str, object]:
    return {"add": [t.found.source for t in plan.tasks if t.action == "add"],
            "update": [t.found.source for t in plan.tasks if t.action == "update"],
            "regroup": [t.found.source for t in plan.regroups],
            "delete": [e.source for e in plan.deletions], "unchanged": len(plan.unchanged),
            "skipped": len(plan.skipped),
            "failed": [{"path": p, "error": e} for p, e in sorted(plan.failed.items())]}


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option("--dry-run", is_flag=True, help="Print what would change; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary as the last line of stdout.")
@click.option("--no-prune", is_flag=True, help="Keep documents whose files are gone from the folder.")
@click.option("--reembed", is_flag=True, help="Rebuild the collection with RAG_EMBED_MODEL beside the current one and "
              "switch when complete (then sync PATHS, if given).")
@click.option("--watch", is_flag=True, help="Sync, then keep syncing the folders PATHS as files change, until "
              "SIGTERM or Ctrl-C (RAG_WATCH_DEBOUNCE_MS of quiet first).")
@click.pass_context
def main(ctx: click.Context, paths: tuple[Path, ...], dry_run: bool, as_json: bool, no_prune: bool, reembed: bool,
         watch: bool) -> None:
    """Ingest PDF, Markdown, TXT, HTML and DOCX files under PATHS into the vector store."""
    if not paths and not reembed:
        raise click.UsageError("give the folders or files to ingest (or --reembed)")
    if watch:
        _check_watch(paths, dry_run or as_json or reembed)
    console = Console(stderr=as_json)
    app = ctx.ensure_object(App)  # built from RAG_* on first use (a test may pass its own: `obj=`)
    with ExitStack() as held:
        try:
            settings = app.settings
            if not dry_run:  # a server must not open the embedded store while this process writes it
                held.enter_context(hold_embedded_store(settings, _what(paths, reembed, watch)))
            if watch:
                sys.exit(_watch(Watcher(paths, app, console, prune=not no_prune)))
            report = _run(paths, app, console, as_json, dry_run=dry_run, prune=not no_prune, reembed=reembed)
        except RagError as exc:
            Console(stderr=True).print(f"[red]error:[/red] {plain(exc)}", highlight=False, soft_wrap=True)
            sys.exit(2)
    if report is not None:
        _print_report(report, console, as_json)
        sys.exit(1 if report.failed else 0)


def _run(paths: tuple[Path, ...], app: App, console: Console, as_json: bool, *, dry_run: bool,
         prune: bool, reembed: bool) -> Report | None:
    """Re-embed, plan or sync as asked; the sync's report (None when there is nothing more to print)."""
    if reembed:
        if dry_run:
            raise click.UsageError("--reembed does not combine with --dry-run")
        _run_reembed(app, console, as_json and not paths)
        if not paths:
            return None
    if dry_run:
        _print_plan(library(app).dry_run(paths, prune=prune), console, as_json)
        return None
    progress = BarProgress(Console(stderr=True))
    with progress.bars:
        return library(app).sync(paths, prune=prune, progress=progress, what=_what(paths, reembed))[1]


def _what(paths: tuple[Path, ...], reembed: bool, watch: bool = False) -> str:
    """This run as other processes are told about it while it holds a lock."""
    return " ".join(["rag-ingest", *(["--reembed"] if reembed else []), *(["--watch"] if watch else []),
                     *map(str, paths)])


def _check_watch(paths: tuple[Path, ...], other_mode: bool) -> None:
    if other_mode:
        raise click.UsageError("--watch does not combine with --dry-run, --json or --reembed")
    if files := [str(path) for path in paths if not path.is_dir()]:
        raise click.UsageError(f"--watch takes folders; not a folder: {', '.join(files)}")


def _watch(watcher: Watcher) -> int:
    """The first full sync (bars and summary, as a plain run), then the watch loop; 0 when stopped by a signal."""
    console = watcher.console
    with watcher.signals():
        try:
            progress = BarProgress(Console(stderr=True))
            with progress.bars:
                report = watcher.sync(progress)[1]
            _print_report(report, console, False)
            folders = plain(", ".join(map(str, watcher.paths)))
            watcher.run(lambda: console.print(f"watching {folders} (Ctrl-C or SIGTERM stops)", highlight=False))
        except Stopped:
            console.print("stopped before this sync ended: what it stored stays; the rest is synced at the next start",
                          highlight=False)
    console.print("stopped", highlight=False)
    return 0


def _run_reembed(app: App, console: Console, as_json: bool) -> None:
    bars = RichProgress(TextColumn("{task.description:>7}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=Console(stderr=True))
    task = bars.add_task("chunks", total=None)
    with bars:
        done = reembed_collection(app, on_chunks=lambda n, total: bars.update(task, completed=n, total=total))
    model = app.settings.embed_model
    console.print(f"Re-embedded {done.chunks} chunks of {done.documents} documents from {done.source!r} "
                  f"({done.source_model}) into {done.generation!r} ({model}); processes started "
                  f"with RAG_EMBED_MODEL={model} now use it. {done.kept!r} is kept for servers still "
                  "running with the old model (restart them) until the next re-embed."
                  + (f" Dropped: {', '.join(done.dropped)}." if done.dropped else ""), highlight=False, markup=False)
    if as_json:
        print(json.dumps(asdict(done), ensure_ascii=False))


def _print_plan(plan: Plan, console: Console, as_json: bool) -> None:
    console.print(_plan_table(plan))
    if as_json:
        print(json.dumps(_plan_json(plan), ensure_ascii=False))


def _print_report(report: Report, console: Console, as_json: bool) -> None:
    for source, error in sorted(report.failed.items()):
        Console(stderr=True).print(f"[red]failed[/red] {plain(source)}: {plain(error)}", highlight=False,
                                   soft_wrap=True)
    for source in sorted(report.locked):
        Console(stderr=True).print(f"[yellow]locked[/yellow] {plain(source)}: its access groups cannot be read; only "
                                   "principals holding every group (`*`) see it until they are fixed",
                                   highlight=False, soft_wrap=True)
    console.print(_summary_table(report))
    if as_json:
        print(json.dumps(report.as_json(), ensure_ascii=False))
