"""Shared fixtures: the real bundled MiniLM (loaded once) and settings over temporary data dirs."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
import uvicorn

from rag.config import Settings
from rag.core.ports import CalibratedEmbedder, Embedder, Vectors, sentence_encoder
from rag.wiring import build_embedder
from ui.chat import CHAT_DIR

# Anything below may import Chainlit, which reads (and would otherwise create) its config in the current directory.
os.environ.setdefault("CHAINLIT_APP_ROOT", str(CHAT_DIR))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "data" / "samples"
# Modules whose tests run for many seconds each (processes started and killed, corpora ingested, two backends
# compared): collected first, so that in the parallel unit phase they start at once on every worker and the phase
# does not end with one worker finishing a long test alone.
RUN_FIRST = ("test_crash_steps.py", "test_benchmarks.py", "test_crash.py", "test_ingest_concurrency.py",
             "test_watch.py", "test_onnx_embedder.py", "test_keyword_pg.py", "test_langchain.py",
             "test_bundled_e5.py", "test_secure_defaults.py", "test_cli.py", "test_gpu_bench.py", "test_reembed.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Long-running modules first (in RUN_FIRST's order), the rest as collected."""
    rank = {name: n for n, name in enumerate(RUN_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(RUN_FIRST)))


class CountingEmbedder:
    """The real embedder, counting how many texts it embedded (to prove that skips skip)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner, self.name, self.batch_size = inner, inner.name, inner.batch_size
        self.embedded = 0

    @property
    def max_tokens(self) -> int:
        return self.inner.max_tokens

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        self.embedded += len(texts)
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> Vectors:
        return self.inner.embed_query(text)


class CountingCalibratedEmbedder(CountingEmbedder):
    """A counting wrapper that keeps a pair's calibration (the retriever looks for it on the embedder it holds)."""

    def calibrated(self, question: str, text: str, cosine: float) -> float:
        return cast(CalibratedEmbedder, self.inner).calibrated(question, text, cosine)

    @property
    def first(self) -> Embedder:
        return sentence_encoder(self.inner)


# Unit tests get an LLM address where nothing listens: one that reaches a real model by accident (a `make demo`
# vLLM on the default port, say) fails fast instead of passing slowly and flakily. Integration tests are exempt.
TRIPWIRE_LLM = "http://127.0.0.1:9/v1"


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    for key in list(os.environ):
        if key.startswith("RAG_"):
            monkeypatch.delenv(key)
    if request.node.get_closest_marker("integration") is None:
        monkeypatch.setenv("RAG_LLM_BASE_URL", TRIPWIRE_LLM)
    # TestClient names its host "testserver": trusted like the loopback names live servers use.
    monkeypatch.setenv("RAG_TRUSTED_HOSTS", "testserver")


@pytest.fixture(scope="session")
def real_embedder() -> Embedder:
    return build_embedder(Settings())


@pytest.fixture
def embedder(real_embedder: Embedder) -> CountingEmbedder:
    if isinstance(real_embedder, CalibratedEmbedder):
        return CountingCalibratedEmbedder(real_embedder)
    return CountingEmbedder(real_embedder)


@dataclass(frozen=True)
class ChromaServer:
    """A real Chroma server (`chroma run` from the chromadb package) on 127.0.0.1."""

    url: str
    process: subprocess.Popen[bytes]


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_chroma(folder: Path) -> ChromaServer:
    """A `chroma run` process storing under folder, answering its heartbeat."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    chroma = Path(sys.executable).parent / "chroma"
    with (folder / "chroma.log").open("wb") as log:
        process = subprocess.Popen([str(chroma), "run", "--path", str(folder / "db"), "--host", "127.0.0.1",
                                    "--port", str(port)], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/api/v2/heartbeat", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.2)
    else:
        process.terminate()
        raise AssertionError(f"chroma run did not start: {(folder / 'chroma.log').read_text()[-2000:]}")
    return ChromaServer(url, process)


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChromaServer]:
    """Started once per session; each test gets its own collection on it."""
    server = start_chroma(tmp_path_factory.mktemp("chroma-server"))
    yield server
    process = server.process
    process.terminate()
    process.wait(timeout=30)


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """A live uvicorn server for an ASGI app on a free port, in a thread; yields its base URL."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@dataclass(frozen=True)
class PostgresServer:
    """A throwaway PostgreSQL cluster (Debian's server binaries) on 127.0.0.1; `database()` makes a fresh database."""

    host: str
    port: int

    def database(self) -> tuple[str, str]:
        """A new empty database: (SQLAlchemy URL for psycopg, URL for asyncpg)."""
        import psycopg

        name = f"t{uuid.uuid4().hex[:12]}"
        with psycopg.connect(f"host={self.host} port={self.port} user=rag dbname=postgres", autocommit=True) as db:
            db.execute(f'CREATE DATABASE "{name}"')
        base = f"rag@{self.host}:{self.port}/{name}"
        return f"postgresql+psycopg://{base}", f"postgresql+asyncpg://{base}"


def _as_postgres_user(args: list[str]) -> list[str]:
    # PostgreSQL refuses to run as root; CI runs as root, developers may not.
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """Started once per session from Debian's postgresql package (`make test` installs it when missing)."""
    bins = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not bins:
        pytest.fail("PostgreSQL server binaries are missing: `make test` installs Debian's postgresql")
    # Not under pytest's tmp folders: those are private to this user, and the server runs as `postgres`.
    folder = Path(tempfile.mkdtemp(prefix="rag-test-postgres-"))
    folder.chmod(0o777)
    data, port = folder / "data", free_port()
    subprocess.run(_as_postgres_user([str(bins[-1]), "-D", str(data), "-A", "trust", "-U", "rag", "-E", "UTF8"]),
                   check=True, capture_output=True)
    pg_ctl = str(bins[-1].parent / "pg_ctl")
    options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1"
    subprocess.run(_as_postgres_user([pg_ctl, "-D", str(data), "-o", options, "-l", str(folder / "log"), "-w",
                                      "start"]), check=True, capture_output=True)
    yield PostgresServer("127.0.0.1", port)
    subprocess.run(_as_postgres_user([pg_ctl, "-D", str(data), "-m", "fast", "stop"]), capture_output=True)
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(params=["embedded"])
def chroma_mode(request: pytest.FixtureRequest) -> str:
    """Which store the `settings` fixture points at; contract suites parametrize it over embedded and server."""
    return str(request.param)


STORE_MODES = pytest.mark.parametrize("chroma_mode", ["embedded", "server"], indirect=True)


@pytest.fixture
def settings(tmp_path: Path, chroma_mode: str, request: pytest.FixtureRequest) -> Settings:
    if chroma_mode == "server":
        server: ChromaServer = request.getfixturevalue("chroma_server")
        return Settings(data_dir=tmp_path / "data", chroma_url=server.url,  # type: ignore[call-arg]
                        collection=f"t{uuid.uuid4().hex[:12]}", _env_file=None)
    return Settings(data_dir=tmp_path / "data", _env_file=None)  # type: ignore[call-arg]


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    return folder


@pytest.fixture
def write(docs: Path) -> Callable[[str, str | bytes], Path]:
    def _write(name: str, content: str | bytes) -> Path:
        path = docs / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        return path

    return _write


@pytest.fixture
def cli_env(settings: Settings) -> Iterator[dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAG_")}
    env["RAG_DATA_DIR"] = str(settings.data_dir)
    if settings.chroma_url:
        env |= {"RAG_CHROMA_URL": settings.chroma_url, "RAG_COLLECTION": settings.collection}
    yield env


@dataclass(frozen=True)
class Ran:
    """What a console script's command did: its exit status and what it printed."""

    returncode: int
    stdout: str
    stderr: str


def run_in_process(script: str, args: Sequence[str], env: dict[str, str]) -> Ran:
    """`rag` or `rag-ingest` with ARGS as click runs it, in this process and with the RAG_* of `env` only: the
    command path of the console script without a new interpreter loading the embedder again (~4-12 s a call).
    Tests of the process itself (signals, exit on a crash) start the real script instead."""
    from click.testing import CliRunner

    from ingest.cli import main as ingest_main
    from ui.cli import main as rag_main

    command = {"rag": rag_main, "rag-ingest": ingest_main}[script]
    rag_env: dict[str, str | None] = {k: v for k, v in env.items() if k.startswith("RAG_")}
    rag_env |= {k: None for k in os.environ if k.startswith("RAG_") and k not in rag_env}
    result = CliRunner().invoke(command, list(args), env=rag_env, catch_exceptions=False)
    return Ran(result.exit_code, result.stdout, result.stderr)


LLM_PORT = int(os.environ.get("RAG_TEST_LLM_PORT", "8011"))


class LLMServer:
    """The real vLLM server of the test session; tests may stop and start it (outage tests)."""

    def __init__(self, settings: Settings, log: Path) -> None:
        self.settings, self.log = settings, log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        from rag.tools.llm_server import is_healthy, start_llm_server, wait_until_healthy

        if not is_healthy(self.settings.llm_base_url):
            self.process = start_llm_server(self.settings, self.log)
            wait_until_healthy(self.settings, self.process, self.log)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=60)
            self.process = None


@pytest.fixture(scope="session")
def llm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LLMServer]:
    """A real vLLM server with the offline default model (Qwen2.5-Coder-0.5B-Instruct): reused if one already
    answers on the test port, else started."""
    settings = Settings(_env_file=None, llm_base_url=f"http://127.0.0.1:{LLM_PORT}/v1",  # type: ignore[call-arg]
                        vllm_python=REPO / ".venv-vllm" / "bin" / "python")
    server = LLMServer(settings, tmp_path_factory.mktemp("vllm") / "vllm.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def llm_settings(llm_server: LLMServer) -> Settings:
    """Settings pointing at the session's real vLLM server."""
    return llm_server.settings
