"""docker-compose.yml and the Dockerfile, checked without a Docker engine: the compose-spec parser (Rust compose_spec
bindings, plus the spec's Pydantic model) accepts the file, and the facts that matter in production hold."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml
from compose_spec import ComposeSpecification, PyCompose

from tests.conftest import REPO

COMPOSE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
_VARIABLE = re.compile(r"\$\{(\w+)(?::?([-?])([^}]*))?\}")
# What compose refuses to start without (`${VAR:?message}`), with values for the tests.
REQUIRED = {"VLLM_API_KEY": "vllm-key", "RAG_TRUSTED_HOSTS": "kb.example.com", "RAG_API_KEYS": "api-key",
            "RAG_UI_AUTH_SECRET": "ui-secret"}


class MissingVariable(ValueError):
    """A `${VAR:?message}` variable is unset or empty: `docker compose` stops with the message."""


def _substitute(match: re.Match[str], env: dict[str, str]) -> str:
    name, kind, text = match[1], match[2], match[3] or ""
    if env.get(name):
        return env[name]
    if kind == "?":
        raise MissingVariable(f"{name}: {text}")
    return text


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's `${VAR}` / `${VAR:-default}` / `${VAR:?error}` substitution (and `$$` for a literal `$`)."""
    return _VARIABLE.sub(lambda m: _substitute(m, env), text).replace("$$", "$")


def load(env: dict[str, str] | None = None) -> dict[str, Any]:
    """The compose file as `docker compose config` would see it: interpolated, YAML anchors and merges resolved."""
    data: dict[str, Any] = yaml.safe_load(interpolate(COMPOSE.read_text(), REQUIRED if env is None else env))
    return data


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = load()
    parsed = PyCompose.from_json(json.dumps(data))  # raises ValueError on anything outside the spec
    parsed.validate()  # every network, config and secret a service uses is declared
    ComposeSpecification.model_validate(data)
    named = {volume.split(":")[0] for service in data["services"].values() for volume in service.get("volumes", [])
             if not volume.startswith((".", "/"))}
    assert named == set(data["volumes"]), "a named volume is used but not declared, or declared but unused"
    assert set(parsed.service_names()) == {"vllm", "chroma", "app", "ingest"}
    return data


def test_the_parser_rejects_what_compose_would_reject() -> None:
    data = load()
    data["services"]["app"]["healthcheck"]["intervall"] = "1s"
    with pytest.raises(ValueError, match="intervall"):
        PyCompose.from_json(json.dumps(data))
    data = load()
    data["services"]["app"]["networks"] = ["undeclared"]
    with pytest.raises(ValueError, match="undeclared"):
        PyCompose.from_json(json.dumps(data)).validate()


def test_vllm_serves_ernie_in_fp8_with_prefix_caching_on_a_gpu(compose: dict[str, Any]) -> None:
    vllm = compose["services"]["vllm"]
    assert re.fullmatch(r"vllm/vllm-openai:v0\.20\.\d+", vllm["image"])
    flags = dict(arg.removeprefix("--").partition("=")[::2] for arg in vllm["command"])
    assert flags["model"] == "baidu/ERNIE-4.5-0.3B-PT"
    assert flags["quantization"] == "fp8" and "enable-prefix-caching" in flags
    assert flags["stream-interval"] == "4"
    assert {"max-model-len", "max-num-seqs", "gpu-memory-utilization"} <= flags.keys()
    assert vllm["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    assert "/health" in " ".join(vllm["healthcheck"]["test"])
    assert any(volume.startswith("model-cache:") for volume in vllm["volumes"])
    assert "VLLM_API_KEY" in vllm["environment"]


def test_the_profile_matches_deploy_vllm_ernie_sh(compose: dict[str, Any]) -> None:
    script = (REPO / "deploy" / "vllm-ernie.sh").read_text()
    for arg in compose["services"]["vllm"]["command"]:
        flag = arg.partition("=")[0]
        if flag not in {"--model", "--host", "--port"}:
            assert flag in script, f"{flag} is in the compose profile but not in deploy/vllm-ernie.sh"


def test_chroma_server_keeps_its_data_and_is_health_checked(compose: dict[str, Any]) -> None:
    chroma = compose["services"]["chroma"]
    assert re.fullmatch(r"chromadb/chroma:\d+\.\d+\.\d+", chroma["image"])
    assert chroma["volumes"] == ["chroma-data:/data"]
    assert "/api/v2/heartbeat" in " ".join(chroma["healthcheck"]["test"])


def test_chroma_image_matches_the_locked_client() -> None:
    lock = (REPO / "uv.lock").read_text()
    client = re.search(r'name = "chromadb"\nversion = "([^"]+)"', lock)
    assert client and f"chromadb/chroma:{client[1]}" in COMPOSE.read_text()


def test_app_reaches_vllm_and_chroma_by_settings_alone(compose: dict[str, Any]) -> None:
    app = compose["services"]["app"]
    env = app["environment"]
    assert env["RAG_CHROMA_URL"] == "http://chroma:8000"
    assert env["RAG_LLM_BASE_URL"] == "http://vllm:8000/v1"
    assert app["depends_on"] == {"vllm": {"condition": "service_healthy"},
                                 "chroma": {"condition": "service_healthy"}}
    assert "/healthz" in " ".join(app["healthcheck"]["test"])
    assert "app-data:/data" in app["volumes"]
    assert app["build"] == "."


def test_ingest_keeps_watching_the_mounted_folder(compose: dict[str, Any]) -> None:
    ingest = compose["services"]["ingest"]
    assert "profiles" not in ingest  # started by `docker compose up -d`, restarted after a failure
    assert ingest["command"] == ["rag-ingest", "--watch", "/docs"]
    assert ingest["restart"] == "unless-stopped" and ingest["stop_grace_period"] == "30s"
    assert "./docs:/docs:ro" in ingest["volumes"] and "app-data:/data" in ingest["volumes"]
    # A Chroma server, shared with the app: an embedded store would be held by the watcher alone.
    assert ingest["environment"]["RAG_CHROMA_URL"] == "http://chroma:8000"
    assert ingest["depends_on"] == {"chroma": {"condition": "service_healthy"}}


def test_variables_reach_the_services() -> None:
    data = load({**REQUIRED, "VLLM_API_KEY": "k", "MAX_NUM_SEQS": "64", "APP_PORT": "9000", "DOCS_DIR": "/srv/docs",
                 "APP_PUBLISH_ADDRESS": "0.0.0.0"})
    assert "--max-num-seqs=64" in data["services"]["vllm"]["command"]
    assert data["services"]["app"]["environment"]["RAG_LLM_API_KEY"] == "k"
    assert data["services"]["app"]["ports"] == ["0.0.0.0:9000:8000"]
    assert "/srv/docs:/docs" in data["services"]["app"]["volumes"]


def test_every_compose_variable_is_in_env_example() -> None:
    documented = set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]+)=", (REPO / ".env.example").read_text(), re.MULTILINE))
    used = {m[1] for m in _VARIABLE.finditer(COMPOSE.read_text())}
    assert used - documented == set()


def test_dockerfile_is_multi_stage_pinned_and_non_root() -> None:
    text = DOCKERFILE.read_text()
    stages = re.findall(r"^FROM (\S+)(?: AS (\w+))?", text, re.MULTILINE)
    assert [name for _, name in stages] == ["build", "runtime"]
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)", text, re.MULTILINE)
    assert base and re.fullmatch(r"python:3\.11\.\d+-slim-\w+", base[1])  # a patch release, not a moving tag
    assert re.search(r"^USER rag$", text, re.MULTILINE)
    assert "uv sync --frozen" in text and "--no-dev" in text
    assert re.search(r"^HEALTHCHECK .*\n.*healthz", text, re.MULTILINE)
    assert text.rstrip().endswith('CMD ["rag", "serve", "--host", "0.0.0.0", "--port", "8000"]')


def test_only_the_app_is_published_and_on_loopback_unless_told(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert services["app"]["ports"] == ["127.0.0.1:8000:8000"]
    assert [name for name, service in services.items() if "ports" in service or "expose" in service] == ["app"]


def test_compose_refuses_to_start_without_keys_secret_and_host_names(compose: dict[str, Any]) -> None:
    for name in REQUIRED:
        with pytest.raises(MissingVariable, match=name):
            load({**REQUIRED, name: ""})
    vllm, app = compose["services"]["vllm"], compose["services"]["app"]
    guards = ("RAG_TRUSTED_HOSTS", "RAG_API_KEYS", "RAG_UI_AUTH_SECRET")
    assert {name: app["environment"][name] for name in guards} == {name: REQUIRED[name] for name in guards}
    # The vLLM key by environment on both sides, never on a command line (`ps` shows those to every user).
    assert vllm["environment"]["VLLM_API_KEY"] == REQUIRED["VLLM_API_KEY"] == app["environment"]["RAG_LLM_API_KEY"]
    commands = [" ".join(service.get("command", [])) for service in compose["services"].values()]
    assert not [command for command in commands if "api-key" in command or REQUIRED["VLLM_API_KEY"] in command]
