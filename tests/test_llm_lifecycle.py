"""`rag llm --no-wait / --detach / --status / --stop` against a real vLLM server started on a free port, and the
records that let a later command find what an earlier one started."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rag.config import Settings
from rag.llm_server import ServerRecord, is_healthy, live_record, record_path, stop_llm_server
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


def _settings(env: dict[str, str]) -> Settings:
    return Settings(_env_file=None, data_dir=Path(env["RAG_DATA_DIR"]),  # type: ignore[call-arg]
                    llm_base_url=env["RAG_LLM_BASE_URL"])


@pytest.mark.slow
def test_start_without_waiting_then_wait_status_and_stop(llm_env: dict[str, str]) -> None:
    started = _rag(["--no-wait"], llm_env)
    assert started.returncode == 0, started.stderr
    record = live_record(_settings(llm_env))
    assert record is not None and not is_healthy(llm_env["RAG_LLM_BASE_URL"])  # returned before /health answered

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
