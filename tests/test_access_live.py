"""The canary leak suite against the real vLLM server: a live uvicorn server over embedded Chroma for the API's
exits, and `rag ask --as` over a Chroma server. The model here writes whatever it likes; only the excerpts the
principal may see can support a shown sentence, so the canary must reach `hr` and no one else."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ingest import service
from rag.config import Settings
from rag.wiring import App
from tests.conftest import REPO, ChromaServer, free_port, serving
from tests.test_access import KEYS, QUESTIONS, leaks, write_corpus
from ui.api.app import create_app
from ui.serving.services import build_services

HR_DOCS = {"hr/bonus.md", "hr/bonus-zh.md"}

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory, llm_settings: Settings, real_embedder: object) -> Iterator[str]:
    data = tmp_path_factory.mktemp("access-live")
    write_corpus(data / "docs")
    keys = f"{KEYS['eng']}:eng,{KEYS['hr']}:hr"
    settings = llm_settings.model_copy(update={"data_dir": data, "docs_dir": data / "docs", "api_keys": keys})
    service.sync([data / "docs"], settings, embedder=real_embedder)  # type: ignore[arg-type]
    app = create_app(settings, build_services(App(settings, embedder=real_embedder)))  # type: ignore[arg-type]
    with serving(app) as url:
        yield url


def _headers(role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[role]}"}


def test_eng_never_gets_the_canary_from_the_api(api: str) -> None:
    with httpx.Client(base_url=api, headers=_headers("eng"), timeout=300) as client:
        bodies = {f"ask {q}": client.post("/v1/ask", json={"question": q}).text for q in QUESTIONS}
        bodies["ask sse"] = client.post("/v1/ask", json={"question": QUESTIONS[1], "stream": True}).text
        chat = {"messages": [{"role": "user", "content": QUESTIONS[0]}]}
        bodies["completions"] = client.post("/v1/chat/completions", json=chat).text
        bodies["completions stream"] = client.post("/v1/chat/completions", json=chat | {"stream": True}).text
        bodies["documents"] = client.get("/v1/documents").text
    for route, body in bodies.items():
        assert not leaks(body), f"{route}: {body[:500]}"


def test_hr_gets_the_canary_from_the_api(api: str) -> None:
    body = httpx.post(f"{api}/v1/ask", json={"question": QUESTIONS[0]}, headers=_headers("hr"), timeout=300).json()
    # The positive control: HR reaches the document (the model's wording of the figure varies, the source does not).
    assert body["sources"][0]["source"] in HR_DOCS, body


def test_rag_ask_as_groups_over_a_chroma_server(tmp_path: Path, llm_settings: Settings,
                                                chroma_server: ChromaServer) -> None:
    write_corpus(tmp_path / "docs")
    env = {"RAG_DATA_DIR": str(tmp_path / "data"), "RAG_CHROMA_URL": chroma_server.url, "PATH": str(REPO / ".venv/bin"),
           "RAG_COLLECTION": f"access{free_port()}", "RAG_LLM_BASE_URL": llm_settings.llm_base_url,
           "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}

    def run(*args: str) -> str:
        done = subprocess.run(list(args), env=env, capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout

    run("rag-ingest", str(tmp_path / "docs"))
    out = run("rag", "ask", QUESTIONS[2], "--as", "eng", "--json")  # each question also runs through the API above
    assert not leaks(out), out
    hr_answer = json.loads(run("rag", "ask", QUESTIONS[0], "--as", "hr", "--json"))
    assert hr_answer["sources"][0]["source"] in HR_DOCS, hr_answer
