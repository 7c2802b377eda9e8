"""`rag llm --no-wait / --detach / --status / --stop` against a real vLLM server started on a free port, and the
records that let a later command find what an earlier one started."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rag.config import Settings
from rag.tools.llm_server import ServerRecord, is_healthy, is_vllm_process, live_record, record_path, stop_llm_server
from tests.conftest import REPO, LLMServer

BIN = REPO / ".venv" / "bin"

pytestmark = pytest.mark.integration


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _rag(args: list[str], env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "rag"), "llm", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


@pytest.fixture
def llm_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """Environment for a `rag llm` of its own: a free port, data (records, log) in tmp_path; stopped after."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAG_")}
    env |= {"RAG_DATA_DIR": str(tmp_path / "data"), "RAG_LLM_BASE_URL": f"http://127.0.0.1:{_free_port()}/v1",
            # The tiny model: these tests start and stop servers of their own, the default model would take longer.
            "RAG_LLM_MODEL_PATH": str(REPO / "data" / "models" / "smollm2-135m-instruct"),
            "RAG_LLM_MODEL": "smollm2-135m-instruct",
            "RAG_VLLM_PYTHON": str(REPO / ".venv-vllm" / "bin" / "python")}
    yield env
    _rag(["--stop"], env, timeout=120)


def _proc_state(stderr: str) -> str:
    """What /proc says of the pid `rag llm` reported: the message of a failed identity check."""
    found = re.search(r"pid (\d+)", stderr)
    if found is None:
        return "no pid reported"
    pid = found[1]
    try:
        return f"{Path(f'/proc/{pid}/stat').read_text()} {Path(f'/proc/{pid}/cmdline').read_bytes()!r}"
    except OSError as error:
        return repr(error)


def _settings(env: dict[str, str]) -> Settings:
    return Settings(_env_file=None, data_dir=Path(env["RAG_DATA_DIR"]),  # type: ignore[call-arg]
                    llm_base_url=env["RAG_LLM_BASE_URL"])


@pytest.mark.slow
def test_start_without_waiting_then_wait_status_and_stop(llm_env: dict[str, str]) -> None:
    started = _rag(["--no-wait"], llm_env)
    assert started.returncode == 0, started.stderr
    record = live_record(_settings(llm_env))
    assert record is not None, (started.stderr, _proc_state(started.stderr))
    assert not is_healthy(llm_env["RAG_LLM_BASE_URL"])  # returned before /health answered

    waited = _rag(["--detach"], llm_env)  # finds the record and waits for that server instead of starting another
    assert waited.returncode == 0, waited.stderr
    assert f"pid {record.pid}) is starting" in waited.stderr and "ready" in waited.stderr

    status = _rag(["--status", "--json"], llm_env)
    assert status.returncode == 0, status.stderr
    body = json.loads(status.stdout)
    assert body["state"] == "healthy" and body["models"] == ["smollm2-135m-instruct"]
    assert body["record"]["pid"] == record.pid and body["record"]["log"].endswith("vllm.log")
    assert f"pid     {record.pid}" in _rag(["--status"], llm_env).stderr

    again = _rag(["--detach"], llm_env)
    assert again.returncode == 0 and "already answers" in again.stderr

    stopped = _rag(["--stop"], llm_env, timeout=120)
    assert stopped.returncode == 0 and f"stopped vLLM (pid {record.pid})" in stopped.stderr
    assert not Path(f"/proc/{record.pid}").exists() or b"Z" in Path(f"/proc/{record.pid}/stat").read_bytes()
    assert not is_healthy(llm_env["RAG_LLM_BASE_URL"]) and not record_path(_settings(llm_env)).exists()

    after = _rag(["--status"], llm_env)
    assert after.returncode == 3 and "stopped" in after.stderr
    idle = _rag(["--stop"], llm_env)
    assert idle.returncode == 0 and "no LLM server started by `rag llm`" in idle.stderr


def test_stop_refuses_a_server_rag_llm_did_not_start(llm_server: LLMServer, tmp_path: Path) -> None:
    settings = Settings(_env_file=None, data_dir=tmp_path,  # type: ignore[call-arg]
                        llm_base_url=llm_server.settings.llm_base_url)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAG_")}
    env |= {"RAG_DATA_DIR": str(tmp_path), "RAG_LLM_BASE_URL": settings.llm_base_url}
    result = _rag(["--stop"], env)
    assert result.returncode == 2 and "did not start it" in result.stderr
    assert is_healthy(settings.llm_base_url)
    status = _rag(["--status"], env)
    assert status.returncode == 0 and "not started by `rag llm`" in status.stderr


def _write_record(settings: Settings, pid: int) -> None:
    path = record_path(settings)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(ServerRecord(pid, settings.llm_base_url, "m", "p", "log", time.time()).as_json()))


def test_a_record_of_a_pid_now_held_by_another_program_is_dropped_and_nothing_is_killed(tmp_path: Path) -> None:
    settings = Settings(_env_file=None, data_dir=tmp_path,  # type: ignore[call-arg]
                        llm_base_url=f"http://127.0.0.1:{_free_port()}/v1")
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        _write_record(settings, other.pid)
        assert stop_llm_server(settings) is None
        assert other.poll() is None  # still running: not ours to stop
        assert not record_path(settings).exists()
    finally:
        other.kill()
        other.wait()


def test_an_unreadable_record_is_dropped(tmp_path: Path) -> None:
    settings = Settings(_env_file=None, data_dir=tmp_path,  # type: ignore[call-arg]
                        llm_base_url=f"http://127.0.0.1:{_free_port()}/v1")
    path = record_path(settings)
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert live_record(settings) is None and not path.exists()


FAKE_SERVER = """
import signal, subprocess, sys, time
# The engine: ignores SIGTERM, as a stuck engine core does, and outlives the API server that leads the group.
subprocess.Popen([sys.executable, "-c", "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                  "open(sys.argv[1], 'w').write('up'); time.sleep(120)", sys.argv[-1]])
time.sleep(120)
"""


def _fake_vllm(tmp_path: Path, marker: Path) -> subprocess.Popen[bytes]:
    """`python -m vllm.entrypoints.openai.api_server` as `rag llm` starts it, in a session of its own."""
    package = tmp_path / "fake" / "vllm" / "entrypoints" / "openai"
    package.mkdir(parents=True)
    for folder in (package, package.parent, package.parent.parent):
        (folder / "__init__.py").write_text("")
    (package / "api_server.py").write_text(FAKE_SERVER.replace("sys.argv[1]", "sys.argv[-1]"))
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "fake")}
    process = subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.openai.api_server", str(marker)], env=env,
                               start_new_session=True)
    deadline = time.monotonic() + 30
    while not marker.exists():
        assert time.monotonic() < deadline, "the fake engine never started"
        time.sleep(0.1)
    return process


def _group_members(pgid: int) -> list[int]:
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def test_stop_kills_an_engine_that_outlives_its_server(tmp_path: Path) -> None:
    settings = Settings(_env_file=None, data_dir=tmp_path / "data",  # type: ignore[call-arg]
                        llm_base_url=f"http://127.0.0.1:{_free_port()}/v1")
    server = _fake_vllm(tmp_path, tmp_path / "engine-up")
    try:
        _write_record(settings, server.pid)
        assert stop_llm_server(settings, grace_s=2.0) is not None
        server.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _group_members(server.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _group_members(server.pid) == []  # the engine too
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGKILL)


def test_only_the_recorded_server_process_counts_as_ours(tmp_path: Path) -> None:
    """A program that merely names the module on its command line, or a pid whose start time is not the
    recorded one, is not the server `rag llm` started."""
    named = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                              "vllm.entrypoints.openai.api_server"], start_new_session=True)
    server = _fake_vllm(tmp_path, tmp_path / "engine-up")
    try:
        time.sleep(0.2)
        assert not is_vllm_process(named.pid)
        assert is_vllm_process(server.pid)
        ticks = int(Path(f"/proc/{server.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        assert is_vllm_process(server.pid, ticks) and not is_vllm_process(server.pid, ticks + 1)
    finally:
        named.kill()
        named.wait()
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def test_a_foreground_rag_llm_terminated_while_vllm_loads_stops_it(tmp_path: Path) -> None:
    """A supervisor's SIGTERM to `rag llm` before the server is up: the server's process group goes with it."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    package = tmp_path / "fake" / "vllm" / "entrypoints" / "openai"
    package.mkdir(parents=True)
    for folder in (package, package.parent, package.parent.parent):
        (folder / "__init__.py").write_text("")
    (package / "api_server.py").write_text(FAKE_SERVER.replace("sys.argv[1]", "sys.argv[-1]").replace(
        "sys.argv[-1]])", f"{str(tmp_path / 'engine-up')!r}])"))  # never answers /health
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAG_")}
    env |= {"RAG_DATA_DIR": str(tmp_path / "data"), "RAG_LLM_BASE_URL": f"http://127.0.0.1:{_free_port()}/v1",
            "RAG_LLM_MODEL_PATH": str(model), "RAG_VLLM_PYTHON": sys.executable,
            "PYTHONPATH": str(tmp_path / "fake")}
    rag = subprocess.Popen([str(REPO / ".venv" / "bin" / "rag"), "llm"], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while not (tmp_path / "engine-up").exists():
        assert time.monotonic() < deadline and rag.poll() is None, rag.stdout.read() if rag.stdout else ""
        time.sleep(0.1)
    record = json.loads(record_path(_settings(env)).read_text())
    rag.send_signal(signal.SIGTERM)
    rag.wait(timeout=60)
    deadline = time.monotonic() + 45
    while _group_members(record["pid"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    members = _group_members(record["pid"])
    with contextlib.suppress(ProcessLookupError):
        os.killpg(record["pid"], signal.SIGKILL)
    assert members == [], "vLLM's processes outlived the rag llm that started them"
