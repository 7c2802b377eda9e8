"""rag: the command line of the assistant — search, ask, and the local LLM server."""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from ingest.terminal import plain
from rag.config import Settings, is_loopback
from rag.core.access import LOCAL_OPERATOR, Principal, parse_grant
from rag.core.answer import Answer, Done, QueryEngine, Token
from rag.core.retrieve import Retriever
from rag.core.sanitize import printable
from rag.core.types import Hit
from rag.tools.evaluate import Case, answer_record, evaluate, evaluate_answers, load_cases
from rag.wiring import App, hold_embedded_store, prefer_passive_threads
from ui.cli_base import EXIT_USAGE, err, errors, fail, pass_app
from ui.cli_gaps import gaps
from ui.cli_llm import llm

WS_MAX_BYTES = 1_048_576


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Ask questions over your documents."""
    prefer_passive_threads()  # every rag command serves queries next to vLLM; see the function's docstring


main.add_command(llm)
main.add_command(gaps)


def _principal(groups: str | None) -> Principal:
    """`--as GROUPS`: a reader holding those groups (`hr|finance`; "" for none); else the local operator, who
    sees every document."""
    if groups is None:
        return LOCAL_OPERATOR
    names, everything, role = parse_grant(groups, "reader", "--as")
    return Principal(f"--as {groups or '(no groups)'}", names, role, everything)


AS_HELP = "Answer as a reader holding these groups (`hr|finance`, \"\" for none) instead of the local operator."


@main.command()
@click.argument("question")
@click.option("-k", "k", type=click.IntRange(1, 100), default=None, help="How many chunks (default RAG_TOP_K).")
@click.option("--json", "as_json", is_flag=True, help="Print the hits as JSON.")
@click.option("--as", "groups", default=None, metavar="GROUPS", help=AS_HELP)
@pass_app
def search(app: App, question: str, k: int | None, as_json: bool, groups: str | None) -> None:
    """Print the chunks closest to QUESTION (source, page, score, text)."""
    with errors():
        app.require_documents()
        # As the answers search: with translation.
        hits = app.retriever.search(question, k or app.settings.top_k, _principal(groups))
    if as_json:
        print(json.dumps({"hits": [_hit_json(hit) for hit in hits]}, ensure_ascii=False))
    else:
        Console().print(_hits_table(hits))


@main.command()
@click.argument("question")
@click.option("-k", "k", type=click.IntRange(1, 20), default=None, help="Excerpts given to the LLM (RAG_TOP_K).")
@click.option("--json", "as_json", is_flag=True, help="Last line of stdout: the answer, sources, timings, usage.")
@click.option("--as", "groups", default=None, metavar="GROUPS", help=AS_HELP)
@pass_app
def ask(app: App, question: str, k: int | None, as_json: bool, groups: str | None) -> None:
    """Answer QUESTION from the documents, streaming, with numbered sources."""
    with errors():
        principal = _principal(groups)
        app.require_documents()
        engine = app.engine
        # With --json the stream goes to stderr so that stdout ends with exactly one JSON line.
        write: Callable[[str], object] = sys.stderr.write if as_json else sys.stdout.write
        answer = _stream(engine.stream(question, top_k=k, principal=principal), write)
    if as_json:
        # The body /v1/ask returns (one mapper for every route an answer leaves by); imported here, as the
        # serving layer costs a plain `rag ask` ~0.7 s of imports.
        from ui.serving.answering import ask_body

        print(json.dumps(ask_body(answer, app.settings.escalate_below), ensure_ascii=False))
    else:
        _print_sources(answer)


def _stream(events: Iterator[object], write: Callable[[str], object]) -> Answer:
    for event in events:
        if isinstance(event, Token):
            write(printable(event.text))  # document text: no escape sequence reaches the terminal
            sys.stdout.flush()
        elif isinstance(event, Done):
            write("\n")
            return event.answer
    raise AssertionError("a stream always ends with Done")


_FALLBACKS = {"ungrounded": "the model's answer was not supported by the documents",
              "language": "the model answered in another language", "loop": "the model repeated itself",
              "refusal": "the model found no answer, but the documents hold one",
              "model_language": "the model does not write the question's language (RAG_LLM_LANGUAGES)",
              "other_language": "the documents are in another language", "setting": "RAG_ANSWER_MODE=extract"}


def _print_sources(answer: Answer) -> None:
    console = Console(highlight=False)
    if not answer.answerable:
        console.print("[yellow]Not in the documents.[/yellow] Try rephrasing, or ask the helpdesk.")
    elif answer.mode == "extracted":
        why = _FALLBACKS.get(answer.fallback, answer.fallback)
        console.print(f"[yellow]Quoted from the documents[/yellow] ({plain(why)}).")
    elif answer.withheld:
        console.print(f"[yellow]{len(answer.withheld)} sentence(s) of the model's answer were withheld: the "
                      "documents do not support them.[/yellow]")
    for source in answer.sources:
        hit = source.hit
        where = hit.source + (f", page {hit.page}" if hit.page is not None else "")
        mark = "" if source.cited else " [dim](not cited)[/dim]"
        console.print(f"\\[{source.n}] {plain(where)}  [dim]score {hit.score:.2f}[/dim]{mark}")


@main.command("eval")
@click.argument("cases_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("-k", "k", type=click.IntRange(1, 10), default=3, show_default=True, help="Recall cut-off shown first.")
@click.option("--mode", type=click.Choice(["hybrid", "dense", "keyword"]), default=None,
              help="Retrieval mode (default RAG_RETRIEVAL_MODE).")
@click.option("--answers", is_flag=True, help="Also ask the LLM: answered-and-cited and refusal rates.")
@click.option("--split", type=click.Choice(["tune", "test"]), default=None,
              help="Only that half of the cases (a line's \"split\", else even lines tune, odd lines test).")
@click.option("--dump", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="With --answers: write each question's answer to this JSONL file (to read them).")
@click.option("--parallel", type=click.IntRange(1, 16), default=1, show_default=True,
              help="Questions in flight at once (the LLM batches translations and answers; latencies then include "
              "the wait).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
@pass_app
def eval_command(app: App, cases_file: Path, k: int, mode: str | None, answers: bool, split: str | None,
                 dump: Path | None, parallel: int, as_json: bool) -> None:
    """Measure retrieval on CASES_FILE (JSONL: question, expected_source|expected_text, answerable)."""
    with errors():
        if mode:
            app = app.with_settings(retrieval_mode=mode)
        settings = app.settings
        cases = load_cases(cases_file, split)
        engine = app.engine
        retriever = engine.retriever
        retriever.warm()  # latency percentiles measure questions, not the one-off index build
        report = evaluate(cases, lambda question, k: retriever.search(question, k, LOCAL_OPERATOR),
                          engine.threshold_for, parallel)
        searched = retriever.mode if isinstance(retriever, Retriever) else settings.retrieval_mode
        body = report.as_json() | {"mode": searched, "k": k, "thresholds": {
            "en": settings.tuning.refusal_threshold, "cjk": settings.tuning.refusal_threshold_cjk}}
        if answers:
            body["answers"] = _answer_checks(cases, engine, dump, parallel)
    if as_json:
        print(json.dumps(body, ensure_ascii=False))
    else:
        Console().print(_eval_table(body, k))


def _answer_checks(cases: list[Case], engine: QueryEngine, dump: Path | None,
                   parallel: int) -> dict[str, dict[str, float | int | None]]:
    ask = functools.partial(engine.ask, principal=LOCAL_OPERATOR)
    if dump is None:
        return evaluate_answers(cases, ask, parallel=parallel)
    with dump.open("w", encoding="utf-8") as out:
        def write(case: Case, answer: Answer) -> None:
            out.write(json.dumps(answer_record(case, answer), ensure_ascii=False) + "\n")
            out.flush()

        return evaluate_answers(cases, ask, seen=write, parallel=parallel)


def _eval_table(body: dict[str, Any], k: int) -> Table:
    table = Table(title=f"rag eval — {body['mode']} retrieval, {body['cases']} questions "
                        f"({body['answerable']} answerable)", show_header=False)
    recall = body["recall"]
    rows = [(f"recall@{k}", recall.get(f"@{k}")), *((f"recall{n}", v) for n, v in recall.items() if n != f"@{k}"),
            ("MRR", body["mrr"]), (f"refusal precision (thresholds {body['thresholds']})", body["refusal_precision"]),
            ("refusal recall", body["refusal_recall"]), ("answerable kept", body["answerable_kept"]),
            ("suggested threshold", body["suggested_threshold"]),
            *((f"latency {p} (ms)", v) for p, v in body["latency_ms"].items()),
            *((f"answers ({lang}): {name}", v) for lang, metrics in body.get("answers", {}).items()
              for name, v in metrics.items())]
    for name, value in rows:
        table.add_row(name, "–" if value is None else str(value))
    return table


INSECURE_FLAG = "--insecure-open-to-network"
INSECURE_HELP = ("Serve on a network address even without API keys or chat sign-in: anyone who reaches the port may "
                 "ask, and on the chat read every answer. Never on a shared network.")


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to listen on (0.0.0.0: every one; anything but loopback needs keys and sign-in).")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(1, 65535), help="TCP port.")
@click.option("--no-chat", is_flag=True, help="Serve the API only, without the chat UI at /chat.")
@click.option(INSECURE_FLAG, "insecure", is_flag=True, help=INSECURE_HELP)
@pass_app
def serve(app: App, host: str, port: int, no_chat: bool, insecure: bool) -> None:
    """Serve the chat UI at /chat and the HTTP API (ask, OpenAI-compatible chat, documents; docs at /docs)."""
    import uvicorn

    from ui.server import create_server
    from ui.web_guards import open_doors, settings_for_bind

    with ExitStack() as held:
        with errors():
            settings = serving_threads(settings_for_bind(app.settings, host))
            doors = [] if is_loopback(host) else open_doors(settings, chat=not no_chat)
            if doors and not insecure:
                fail(f"refusing to serve on {host}, reachable from the network: {'; '.join(doors)}. Set "
                      "RAG_API_KEYS (`openssl rand -hex 24`) and the chat's sign-in (RAG_UI_AUTH_SECRET, "
                      f"RAG_UI_USERS), or serve on 127.0.0.1, or pass {INSECURE_FLAG} to serve it open anyway.",
                      EXIT_USAGE)
            held.enter_context(hold_embedded_store(settings, f"rag serve on {host}:{port}"))
            server = create_server(settings, chat=not no_chat)
        if doors:
            err.print(f"[bold red]WARNING ({INSECURE_FLAG}): anyone who reaches {host} port {port} can use this "
                      f"server: {'; '.join(doors)}.[/bold red]")
        _banner(settings, host, port, chat=not no_chat)
        # The chat's socket library refuses messages over 1 MB; uvicorn would otherwise read up to 16 MiB first.
        uvicorn.run(server, host=host, port=port, log_level="info", ws_max_size=WS_MAX_BYTES)


def serving_threads(settings: Settings) -> Settings:
    """A server's settings: RAG_EMBED_THREADS=0 means one thread per model call (its requests embed side by side;
    on 2 cores, 8 clients: -12 % CPU per answer, +14 % answers/s, lower latency; benchmarks.app_cost)."""
    return settings if settings.embed_threads else settings.model_copy(update={"embed_threads": 1})


def _banner(settings: Settings, host: str, port: int, chat: bool) -> None:
    """Where the server really listens and the URLs that reach it (never a secret)."""
    from ui.web_guards import is_wildcard, local_addresses, netloc, public_name

    bare = host.strip().strip("[]")
    if is_wildcard(host):
        err.print(f"listening on {netloc(bare, port)}: every interface of this machine "
                  f"({', '.join(local_addresses(host))}), answering to the host names "
                  f"{', '.join(settings.trusted_host_list)} (RAG_TRUSTED_HOSTS and loopback)", markup=False)
    else:
        where = "this machine only" if is_loopback(host) else "this address"
        err.print(f"listening on {netloc(bare, port)} ({where})", markup=False)
    base = f"http://{netloc(public_name(settings, host), port)}"
    if chat:
        sign_in = "sign in with a RAG_UI_USERS account" if settings.ui_auth else "no sign-in (RAG_UI_AUTH=false)"
        err.print(f"[green]chat UI[/green]: {base}/chat  ({sign_in})")
    err.print(f"[green]API[/green]: {base}/docs")


@main.command("hash-password")
@click.password_option(help="The password (asked twice when not given).")
def hash_password_command(password: str) -> None:
    """Print a password hash for a RAG_UI_USERS entry (name:HASH[:groups])."""
    from ui.serving.users import hash_password

    print(hash_password(password))


@main.command()
@click.option("-n", "limit", type=click.IntRange(1, 10_000), default=20, show_default=True, help="How many.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@pass_app
def feedback(app: App, limit: int, as_json: bool) -> None:
    """List the newest 👍/👎 ratings with their question, answer and comment."""
    with errors():
        ratings = app.feedback().recent(limit)
    if as_json:
        for rating in ratings:
            print(json.dumps(dataclasses.asdict(rating), ensure_ascii=False))
        return
    table = Table(show_lines=True)
    for column in ("when", "user", "rating", "question", "answer", "comment"):
        table.add_column(column, overflow="fold")
    for rating in ratings:
        table.add_row(plain(rating.created_at), plain(rating.user), "👍" if rating.rating > 0 else "👎",
                      plain(rating.question), plain(rating.answer[:300]), plain(rating.comment))
    Console().print(table)


def _hit_json(hit: Hit) -> dict[str, object]:
    return {"source": hit.source, "page": hit.page, "score": hit.score, "chunk_id": hit.chunk_id, "text": hit.text}


def _hits_table(hits: list[Hit]) -> Table:
    table = Table(show_lines=True)
    for column in ("#", "source", "page", "score", "text"):
        table.add_column(column, overflow="fold")
    for n, hit in enumerate(hits, start=1):
        table.add_row(str(n), plain(hit.source), "" if hit.page is None else str(hit.page), f"{hit.score:.3f}",
                      plain(hit.text))
    return table
