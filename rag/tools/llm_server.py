"""Starting the local vLLM server (`rag llm`, the test fixtures, `make demo`) from its own environment."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

import httpx

from rag.components.cpu import BF16_FLAGS, cpu_flags
from rag.config import Settings, is_loopback
from rag.core.errors import ConfigError, LLMUnavailable


def health_url(base_url: str) -> str:
    """vLLM's /health beside its OpenAI routes (base URLs end in /v1)."""
    url = urlsplit(base_url)
    return f"{url.scheme}://{url.netloc}/health"


def is_healthy(base_url: str, timeout: float = 2.0) -> bool:
    """Whether the server answers /health with 200."""
    try:
        return httpx.get(health_url(base_url), timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def vllm_command(settings: Settings) -> list[str]:
    """The server command line: OpenAI API, prefix caching, served name, host and port from RAG_LLM_BASE_URL."""
    url = urlsplit(settings.llm_base_url)
    if url.scheme != "http" or not url.hostname or not url.port:
        raise ConfigError(f"RAG_LLM_BASE_URL must be http://host:port/v1 to start a server, got {url.geturl()!r}")
    if not is_loopback(url.hostname) and not _api_key(settings):
        raise ConfigError(f"RAG_LLM_BASE_URL listens on {url.hostname}, reachable from the network: set "
                          "RAG_LLM_API_KEY (e.g. `openssl rand -hex 24`) so that vLLM answers only to the app")
    # The API key goes by environment (vllm_environment): a command line is visible to every user of the machine.
    return [
        str(settings.vllm_python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(settings.served_model_path), "--served-model-name", settings.llm_model,
        "--host", url.hostname, "--port", str(url.port),
        "--enable-prefix-caching", "--max-model-len", str(settings.llm_max_model_len),
        "--dtype", llm_dtype(settings.llm_dtype), "--disable-uvicorn-access-log",
        # Several tokens to a streamed chunk (the first goes alone, so the first token is not delayed): fewer SSE
        # events for vLLM to write and for each worker's openai SDK to parse (benchmarks.app_cost).
        "--stream-interval", str(settings.llm_stream_interval),
        *(["--enforce-eager"] if eager(settings.llm_compile) else []),
    ]


def llm_dtype(setting: str, flags: frozenset[str] | None = None) -> str:
    """The weights' type for vLLM on CPU: `auto` means bfloat16 only where the CPU computes it natively."""
    if setting != "auto":
        return setting
    # Without native bf16 (AVX2-only CPUs) vLLM emulates it: prefill ran 3.3x slower than float32 there.
    return "bfloat16" if (cpu_flags() if flags is None else flags) & BF16_FLAGS else "float32"


def eager(setting: str) -> bool:
    """Whether vLLM runs the model eagerly instead of compiling it with torch.compile first: `auto` is eager."""
    # The first compile of a fresh machine took 106 s of a 2-core CPU's start (54 s to start eager); the small
    # offline model gives the time back slowly (python -m benchmarks.llm_start, docs "Local LLM server").
    return setting != "compile"


def _api_key(settings: Settings) -> str:
    return "" if settings.llm_api_key in {"", "EMPTY"} else settings.llm_api_key


def vllm_environment(settings: Settings) -> dict[str, str]:
    """Environment for vLLM on CPU: a bounded KV cache, a compile cache that survives restarts, and the API key
    (VLLM_API_KEY, which vLLM reads itself). The app's own RAG_* settings and secrets are not passed on."""
    cache = Path.home() / ".cache" / "vllm" / "torchinductor"
    inherited = {name: value for name, value in os.environ.items()
                 if not name.startswith("RAG_") and name != "VLLM_API_KEY"}
    key = {"VLLM_API_KEY": _api_key(settings)} if _api_key(settings) else {}
    return {
        **inherited,
        **key,
        # Without it vLLM reserves 92 % of RAM for the KV cache; 2 GiB holds ~170k tokens of Qwen2.5-0.5B.
        "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2"),
        # vLLM keeps one core for its scheduler; on 2 cores that halved the model's compute (prefill 2.2x slower).
        "VLLM_CPU_NUM_OF_RESERVED_CPU": os.environ.get("VLLM_CPU_NUM_OF_RESERVED_CPU", _reserved_cpus()),
        # The AOT compile cache does not reload on CPU (vllm-cpu 0.32); inductor's own cache does.
        "VLLM_USE_AOT_COMPILE": "0",
        "TORCHINDUCTOR_CACHE_DIR": os.environ.get("TORCHINDUCTOR_CACHE_DIR", str(cache)),
        "HF_HUB_OFFLINE": "1",
    }


def _reserved_cpus() -> str:
    return "0" if (os.cpu_count() or 1) <= 4 else "1"


def start_llm_server(settings: Settings, log_path: Path) -> subprocess.Popen[bytes]:
    """Start vLLM in the background, logging to log_path."""
    if not settings.vllm_python.exists():
        raise ConfigError(f"no vLLM environment at {settings.vllm_python}: run `make setup`")
    if not (settings.served_model_path / "config.json").exists():
        raise ConfigError(f"no model at {settings.served_model_path}: run `make setup` or set RAG_LLM_MODEL_PATH")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        return subprocess.Popen(vllm_command(settings), env=vllm_environment(settings), stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)


class Pollable(Protocol):
    """A server process as wait_until_healthy watches it: subprocess.Popen, or RecordedProcess."""

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...


class RecordedProcess:
    """A server `rag llm` started in an earlier command (not this process's child), watched by its pid."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """None while it runs; 1 once it has gone (its real exit code went to its parent)."""
        if self.returncode is None and not is_vllm_process(self.pid):
            self.returncode = 1
        return self.returncode


def wait_until_healthy(settings: Settings, process: Pollable | None, log_path: Path,
                       on_wait: Callable[[float], None] = lambda _: None) -> None:
    """Poll /health until 200; raise with the log's tail if the server exits or the start timeout passes."""
    started = time.monotonic()
    while not is_healthy(settings.llm_base_url):
        waited = time.monotonic() - started
        if process is not None and process.poll() is not None:
            raise LLMUnavailable(f"vLLM exited with code {process.returncode}; log {log_path}:\n{_tail(log_path)}")
        if waited > settings.llm_start_timeout_s:
            raise LLMUnavailable(
                f"vLLM did not answer {health_url(settings.llm_base_url)} within {settings.llm_start_timeout_s:g} s "
                f"(RAG_LLM_START_TIMEOUT_S); log {log_path}:\n{_tail(log_path)}"
            )
        on_wait(waited)
        time.sleep(1.0)


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass(frozen=True, slots=True)
class ServerRecord:
    """What `rag llm` writes about a server it started, so that `--status` and `--stop` find it later."""

    pid: int
    base_url: str
    model: str
    model_path: str
    log: str
    started_at: float  # seconds since the epoch
    start_ticks: int = 0  # the process's start time since boot (/proc/PID/stat): a reused pid has another; 0: unknown

    def as_json(self) -> dict[str, object]:
        """The record as a JSON object."""
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class ServerStatus:
    """A server at one base URL: whether /health answers, and the record if `rag llm` started it and it lives."""

    base_url: str
    healthy: bool
    record: ServerRecord | None
    models: tuple[str, ...] = ()

    @property
    def state(self) -> str:
        """healthy, starting (our process lives, /health not yet), or stopped."""
        return "healthy" if self.healthy else "starting" if self.record else "stopped"


def record_path(settings: Settings) -> Path:
    """Where the record of the server at RAG_LLM_BASE_URL lives: one per port, so servers on two ports coexist."""
    return settings.data_dir / "run" / f"vllm-{urlsplit(settings.llm_base_url).port}.json"


def write_record(settings: Settings, process: subprocess.Popen[bytes], log_path: Path) -> ServerRecord:
    """Record a server just started (written atomically: a reader never sees half a file)."""
    record = ServerRecord(process.pid, settings.llm_base_url, settings.llm_model, str(settings.served_model_path),
                          str(log_path), time.time(), _start_ticks(process.pid))
    path = record_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(json.dumps(record.as_json()), encoding="utf-8")
    temporary.replace(path)
    return record


def live_record(settings: Settings) -> ServerRecord | None:
    """The record of a server `rag llm` started that still runs; a stale or unreadable record is removed."""
    path = record_path(settings)
    try:
        record = ServerRecord(**json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError):
        record = None
    if record is not None and is_vllm_process(record.pid, record.start_ticks):
        return record
    path.unlink(missing_ok=True)
    return None


def is_vllm_process(pid: int, start_ticks: int = 0) -> bool:
    """Whether pid is a running (not zombie) vLLM server started as `rag llm` starts it (python -m the API server
    module), and, given its start time, the very process recorded: a pid reused by another program does not count."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, IndexError):
        return False
    # `-m module` as a pair of arguments (interpreter options may come before it), not the name anywhere.
    started_as = any(pair == (b"-m", b"vllm.entrypoints.openai.api_server") for pair in itertools.pairwise(command))
    return fields[0] != "Z" and started_as and (not start_ticks or int(fields[19]) == start_ticks)


def _start_ticks(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return 0


def server_status(settings: Settings) -> ServerStatus:
    """The state of the server at RAG_LLM_BASE_URL, whoever started it."""
    healthy = is_healthy(settings.llm_base_url)
    return ServerStatus(settings.llm_base_url, healthy, live_record(settings),
                        served_models(settings) if healthy else ())


def served_models(settings: Settings) -> tuple[str, ...]:
    """The model names the server lists at /v1/models (empty if it does not answer)."""
    key = _api_key(settings)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        response = httpx.get(f"{settings.llm_base_url.rstrip('/')}/models", headers=headers, timeout=2.0)
        return tuple(str(model["id"]) for model in response.json()["data"])
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return ()


def stop_llm_server(settings: Settings, grace_s: float = 30.0) -> ServerRecord | None:
    """Stop the server `rag llm` started at RAG_LLM_BASE_URL (SIGTERM to its process group, SIGKILL after grace_s);
    None if none runs. A server that answers but that `rag llm` did not start is refused, not killed blindly."""
    record = live_record(settings)
    if record is None:
        if is_healthy(settings.llm_base_url):
            raise ConfigError(f"an LLM server answers at {settings.llm_base_url}, but `rag llm` did not start it "
                              f"(no record at {record_path(settings)}): stop it where it was started")
        return None
    stop_group(record.pid, grace_s)
    record_path(settings).unlink(missing_ok=True)
    return record


def stop_group(pid: int, grace_s: float = 30.0) -> None:
    """SIGTERM to the server's process group, then SIGKILL to whatever of it is left after grace_s: vLLM's engine
    process can outlive the API server that leads the group."""
    _signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while _group_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _group_alive(pid):
        _signal_group(pid, signal.SIGKILL)


def _group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs (zombies of the leader do not count)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
    return False


def _signal_group(pid: int, sig: signal.Signals) -> None:
    # start_llm_server gives the server a session of its own: its group holds vLLM's engine and worker processes.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)
