"""`rag llm`: the local vLLM server — start it (in the foreground or detached), see its state, stop it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

import click

from rag.config import Settings
from rag.tools.llm_server import (
    Pollable,
    RecordedProcess,
    ServerStatus,
    is_healthy,
    live_record,
    record_path,
    server_status,
    start_llm_server,
    stop_group,
    stop_llm_server,
    wait_until_healthy,
    write_record,
)
from rag.wiring import App
from ui.cli_base import EXIT_LLM, EXIT_USAGE, err, errors, fail, pass_app


@click.command()
@click.option("--detach", is_flag=True, help="Start in the background, wait until healthy, and return.")
@click.option("--no-wait", is_flag=True,
              help="Start in the background and return at once (a later `rag llm --detach` waits for it).")
@click.option("--status", "show_status", is_flag=True,
              help="Show the server at RAG_LLM_BASE_URL: state, pid, model, port, log (exit 3 unless healthy).")
@click.option("--stop", is_flag=True, help="Stop the server `rag llm` started at RAG_LLM_BASE_URL.")
@click.option("--json", "as_json", is_flag=True, help="With --status: print it as JSON.")
@pass_app
def llm(app: App, detach: bool, no_wait: bool, show_status: bool, stop: bool, as_json: bool) -> None:
    """Start vLLM's OpenAI-compatible server for RAG_LLM_MODEL at RAG_LLM_BASE_URL; see or stop it."""
    if (detach or no_wait) + show_status + stop > 1:
        fail("start (--detach, --no-wait), --status and --stop go one at a time", EXIT_USAGE)
    with errors():
        settings = app.settings
        if show_status:
            _llm_status(settings, as_json)
        elif stop:
            _llm_stop(settings)
        elif is_healthy(settings.llm_base_url):
            err.print(f"an LLM server already answers at {settings.llm_base_url}")
        else:
            _run_llm(settings, detach, wait=not no_wait)


def _llm_status(settings: Settings, as_json: bool) -> None:
    status = server_status(settings)
    record = status.record
    if as_json:
        click.echo(json.dumps({"state": status.state, "base_url": status.base_url, "models": list(status.models),
                               "record": record.as_json() if record else None}))
    else:
        err.print(f"LLM server at {status.base_url}: [bold]{status.state}[/bold]")
        for name, value in _status_rows(status):
            err.print(f"  {name:7} {value}")
    if not status.healthy:
        sys.exit(EXIT_LLM)


def _status_rows(status: ServerStatus) -> list[tuple[str, str]]:
    record = status.record
    rows = [("port", str(urlsplit(status.base_url).port))]
    if status.models:
        rows.append(("model", ", ".join(status.models)))
    if record is None:
        who = "not started by `rag llm` (pid unknown)" if status.healthy else "none (start it: rag llm --detach)"
        return [("pid", who), *rows]
    started = datetime.fromtimestamp(record.started_at).isoformat(sep=" ", timespec="seconds")
    return [("pid", f"{record.pid}, started {started} (up {_duration(time.time() - record.started_at)})"), *rows,
            ("weights", record.model_path), ("log", record.log), ("stop", "rag llm --stop")]


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min {secs} s"


def _llm_stop(settings: Settings) -> None:
    record = stop_llm_server(settings)
    if record is None:
        err.print(f"no LLM server started by `rag llm` runs at {settings.llm_base_url}")
    else:
        err.print(f"stopped vLLM (pid {record.pid}) at {record.base_url}")


def _run_llm(settings: Settings, detach: bool, wait: bool) -> None:
    record = live_record(settings)
    if record is not None:  # started by an earlier `rag llm`, still loading: wait for it rather than start another
        err.print(f"vLLM (pid {record.pid}) is starting at {settings.llm_base_url} — waiting for it")
        process: Pollable = RecordedProcess(record.pid)
        log = Path(record.log)
    else:
        log = settings.data_dir / "logs" / "vllm.log"
        process = started = start_llm_server(settings, log)
        write_record(settings, started, log)
        err.print(f"starting vLLM (pid {started.pid}) for {settings.served_model_path} — log: {log}")
    if not wait:
        err.print("it starts in the background: `rag llm --detach` waits for it, `rag llm --stop` stops it")
        return
    # SIGTERM while vLLM still loads (a supervisor stopping us) stops it too: it runs in a session of its own.
    signal.signal(signal.SIGTERM, _terminated)
    try:
        with err.status("waiting for /health…") as status:
            wait_until_healthy(settings, process, log,
                               lambda waited: status.update(f"waiting for /health… {waited:.0f} s"))
    except BaseException:
        stop_llm_server(settings)
        raise
    err.print(f"[green]ready[/green]: {settings.llm_model} at {settings.llm_base_url}")
    if detach or record is not None:
        err.print("it runs in the background: `rag llm --status` shows it, `rag llm --stop` stops it")
        return
    _serve_in_foreground(settings, started)


def _terminated(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # unwinds like Ctrl-C: the server's whole process group is stopped


def _serve_in_foreground(settings: Settings, process: subprocess.Popen[bytes]) -> None:
    try:
        code = process.wait()
    except KeyboardInterrupt:
        stop_group(process.pid)  # the engine process too, not only the API server that leads the group
        code = process.wait(timeout=30)
    record_path(settings).unlink(missing_ok=True)
    sys.exit(code)
