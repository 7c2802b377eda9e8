"""Benchmarks in their quick mode: each runs to the end and prints its figures (the figures are not judged here);
and a benchmark whose server fails to start leaves no process behind."""

from __future__ import annotations

import importlib
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks import answers_during_ingest, api_throughput, ingest_throughput
from benchmarks.common import server_process
from rag.components.models import BUNDLED_EMBED_MODEL
from rag.config import Settings
from tests.conftest import REPO, free_port

# Benchmark → lines its quick mode must print (a start of line each). ingest_throughput, answers_during_ingest
# and keyword_writes have their own tests.
QUICK = {
    "app_cost": ["1 worker(s), 2 clients, 6 requests per route", "ask-json ", "ask-sse ", "chat-stream ",
                 "in-process query path, CPU ms per answer by stage:", "  total "],
    "access_latency": ["variant", "hybrid 3 groups", "worst filtered/unfiltered p50 ratio: ", "access violations"],
    "calibrate_refusal": ["answerable: 20 questions", "off-topic:  10 questions", "threshold "],
    "quote_vectors": ["RAG_EMBED_MODEL=", "ingest CPU s: off ", "kept vectors: ",
                      "quote ranking, CPU ms per question: ", "same quotes from the same excerpts: "],
    "query_overhead": ["400 chunks, 10 questions x 1 rounds", "bundled:all-MiniLM-L6-v2: p50 ",
                       "bundled:all-MiniLM-L6-v2+bundled:multilingual-e5-small ÷ bundled:all-MiniLM-L6-v2: p50 "],
    "regroup_cost": ["file", "systemd-uids-gids.md "],
    "retrieval_latency": ["mode", "dense ", "hybrid ", "hybrid / dense: p50 "],
    "search_calls": ["3 documents, top 3, hybrid", "embedded  anonymous      2 ", "server    anonymous      2 ",
                     "server    operator       1 "],
    "tune_fusion": ["embedder ", "  share 0.0: @1 ", "  share 1.0: @1 "],
}
# The same for those that need the LLM server (the session's vLLM).
QUICK_LLM = {
    "answer_checks": ["2 questions, RAG_ANSWER_MODE=", "support check per answer: p50 ", "first text shown"],
    "api_throughput": ["2 clients, 2 requests per pass", "direct to vLLM: "],
    "demo_start": ["running server: ingest "],
    "gpu_serving": ["| profile | rate (req/s) |", "| quick | 20 |", "| quick | ∞ |"],
    "llm_expansion": ["3 questions over 3 documents", "today (passages only)  ", "HyDE: rrf(question, q+a) "],
    "llm_dtype": ["CPU bf16 flags: ", "running server               prefill "],
    "llm_start": ["weights' type: ", "running server prefill "],
    "query_path": ["query-path overhead ", "prefix cache: "],
}


def run_quick(name: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """Run a benchmark's main with --quick in this process (no second interpreter, embedder import: seconds)."""
    importlib.import_module(f"benchmarks.{name}").main(["--quick"])
    return capsys.readouterr().out.splitlines()


def assert_prints(lines: list[str], starts: list[str]) -> None:
    for start in starts:
        assert any(line.startswith(start) for line in lines), f"no line starts with {start!r}:\n" + "\n".join(lines)


def test_answers_during_ingest_quick(capsys: pytest.CaptureFixture[str]) -> None:
    answers_during_ingest.main(["--quick"])
    out = capsys.readouterr().out
    assert "ingest through POST /v1/sync: " in out and "p99 during / idle: " in out


def test_ingest_throughput_quick(capsys: pytest.CaptureFixture[str]) -> None:
    # Without LangChain's side here: its process alone imports torch for ~10 s; `make bench` runs both.
    ingest_throughput.main(["--quick", "--no-langchain"])
    assert_prints(capsys.readouterr().out.splitlines(), [
        "machine: ", "corpus: data/samples/en *.md: ", "(a) pipeline ÷ encode() of the same ",
        "(c) unchanged re-run ÷ first run: ", "(d) whole processes, start to exit: rag-ingest "])


@pytest.mark.parametrize("name", sorted(QUICK))
def test_quick_mode(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("RAG_DATA_DIR", str(tmp_path / "data"))  # nothing lands in the repository's data dir
    assert_prints(run_quick(name, capsys), QUICK[name])


@pytest.mark.integration
@pytest.mark.parametrize("name", sorted(QUICK_LLM))
def test_quick_mode_with_llm(name: str, llm_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("RAG_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("RAG_LLM_BASE_URL", llm_settings.llm_base_url)
    monkeypatch.setenv("RAG_LLM_MODEL", llm_settings.llm_model)
    assert_prints(run_quick(name, capsys), QUICK_LLM[name])


# A stand-in for vLLM: answers /health, and starts a child as vLLM starts its engine core; writes both pids beside
# itself.
FAKE_VLLM = """\
import http.server, os, subprocess, sys
from pathlib import Path

port = int(sys.argv[sys.argv.index("--port") + 1])
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
Path(__file__).with_name("pids").write_text(f"{os.getpid()} {child.pid}")


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


def alive(pid: int) -> bool:
    """Whether a process runs (a zombie nobody reaped yet counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_failed_server_start_leaves_no_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """api_throughput starts "vLLM" (a stand-in with a child), then its `rag serve` refuses a broken setting: the
    run fails naming the server's error, and neither the stand-in, its child, nor a server remains."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    fake, _ = fake_server(tmp_path)
    llm_port, serve_port = free_port(), free_port()
    for name, value in {"RAG_LLM_BASE_URL": f"http://127.0.0.1:{llm_port}/v1", "RAG_VLLM_PYTHON": fake[0],
                        "RAG_LLM_MODEL_PATH": str(model), "RAG_DATA_DIR": str(tmp_path / "data"),
                        "RAG_EMBED_MODEL": BUNDLED_EMBED_MODEL}.items():  # one model: its ingest is not the point
        monkeypatch.setenv(name, value)
    # --max-tokens 8: below what RAG_MAX_ANSWER_TOKENS allows, which only the served app checks.
    with pytest.raises(RuntimeError, match=r"(?s)rag exited with code .*RAG_MAX_ANSWER_TOKENS"):
        api_throughput.main(["--quick", "--max-tokens", "8", "--port", str(serve_port)])
    assert_gone(tmp_path)
    assert not listening(llm_port) and not listening(serve_port)


def fake_server(tmp_path: Path) -> tuple[list[str], str]:
    """The stand-in's command line on a free port, and its health URL."""
    fake = tmp_path / "fake-vllm"
    fake.write_text(f"#!{sys.executable}\n{FAKE_VLLM}")
    fake.chmod(0o755)
    port = free_port()
    return [str(fake), "--port", str(port)], f"http://127.0.0.1:{port}/health"


def assert_gone(tmp_path: Path) -> None:
    """Neither the stand-in nor its child runs (they may take a moment to be reaped)."""
    pids = [int(pid) for pid in (tmp_path / "pids").read_text().split()]
    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in pids)


def test_ctrl_c_stops_the_server_and_its_children(tmp_path: Path) -> None:
    command, health = fake_server(tmp_path)
    with pytest.raises(KeyboardInterrupt), server_process(command, health, tmp_path / "log"):
        raise KeyboardInterrupt
    assert_gone(tmp_path)


def test_sigterm_to_the_benchmark_stops_its_server(tmp_path: Path) -> None:
    command, health = fake_server(tmp_path)
    script = ("import sys, time\nfrom pathlib import Path\nfrom benchmarks.common import server_process\n"
              f"with server_process({command!r}, {health!r}, Path({str(tmp_path / 'log')!r})):\n"
              "    print('up', flush=True)\n    time.sleep(120)\n")
    bench = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert bench.stdout is not None and bench.stdout.readline() == "up\n"
    bench.terminate()
    assert bench.wait(30) == 128 + 15
    assert_gone(tmp_path)
