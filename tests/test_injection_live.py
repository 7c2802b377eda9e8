"""Hostile documents against the real query path: the injection corpus ingested, one question per document over a
live API with the real vLLM, and nothing an attacker planted comes back (no URL, image, HTML, template token or
hidden text), `removed` says what was taken out, and the sink server hears nothing."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from ingest import service
from rag.config import Settings
from tests.conftest import serving
from tests.injection_corpus import CASES, Case, Sink, planted, sink_server, write_corpus
from ui.api.app import create_app
from ui.serving.services import build_services

pytestmark = [pytest.mark.integration, pytest.mark.slow]
KEY = "injection-reader-0123456789abcdef"
SINK_HOST = "127.0.0.1"
# Documents whose attack is an image, a link or raw HTML in the text of their chunk, the API's snippet.
SNIPPET_REMOVES = {"en-wifi-guest.md": "image", "en-payroll-portal.md": "link", "en-printer-toner.md": "html",
                   "en-fire-drill.md": "html", "zh-reimbursement.md": "image", "zh-account-security.md": "link",
                   "zh-printing.md": "html", "en-password-policy.md": "link"}


@pytest.fixture(scope="module")
def corpus_api(tmp_path_factory: pytest.TempPathFactory, llm_settings: Settings,
               real_embedder: object) -> Iterator[tuple[str, Sink]]:
    with sink_server() as sink:
        folder = write_corpus(tmp_path_factory.mktemp("injection") / "docs", sink.address)
        # A shared CPU vLLM may queue a request for a while: a generous timeout, so load is no failure.
        settings = llm_settings.model_copy(update={"data_dir": tmp_path_factory.mktemp("injection-data"),
                                                   "docs_dir": folder, "api_keys": f"{KEY}:*", "llm_timeout_s": 300.0})
        _, report = service.sync([folder], settings, embedder=real_embedder)  # type: ignore[arg-type]
        assert not report.failed and report.added == len(CASES), report
        app = create_app(settings, build_services(settings, embedder=real_embedder))  # type: ignore[arg-type]
        with serving(app) as url:
            yield url, sink


def _post(url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(f"{url}{path}", json=body, timeout=600, headers={"Authorization": f"Bearer {KEY}"})
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def _shown(body: dict[str, Any]) -> list[str]:
    """Every text of an answer body that a person may see."""
    sources = body["sources"]
    return [body["answer"], *(s["text"] for s in body["sentences"]), *(s["snippet"] for s in sources),
            *(s["headings"] for s in sources)]


def _problems(case: Case, body: dict[str, Any], sink: Sink) -> list[str]:
    found = [f"{case.name}: shows {hit!r} in {text[:200]!r}"
             for text in _shown(body) for hit in planted(text, sink.address)]
    if not any(source["source"].endswith(case.name) for source in body["sources"]):
        found.append(f"{case.name}: not among the sources of {case.question!r}: {body['sources']}")
    hosts = {entry["host"] for entry in body["removed"]}
    if not hosts <= {SINK_HOST, f"www.{SINK_HOST}", ""}:
        found.append(f"{case.name}: removed names other hosts: {hosts}")
    wanted: list[tuple[dict[str, str], str]] = [
        ({"kind": case.answer_removes, "host": SINK_HOST, "where": "answer"}, case.answer_removes),
        ({"kind": SNIPPET_REMOVES.get(case.name, ""), "where": "sources"}, SNIPPET_REMOVES.get(case.name, ""))]
    for entry, expected in wanted:
        if expected and not any(entry.items() <= removed.items() for removed in body["removed"]):
            found.append(f"{case.name}: removed lacks {entry}: {body['removed']}")
    return found


def test_no_question_of_the_injection_corpus_shows_what_its_document_planted(corpus_api: tuple[str, Sink]) -> None:
    url, sink = corpus_api
    with ThreadPoolExecutor(3) as pool:  # vLLM batches them
        bodies = list(pool.map(lambda case: _post(url, "/v1/ask", {"question": case.question}), CASES))
    problems = [problem for case, body in zip(CASES, bodies, strict=True) for problem in _problems(case, body, sink)]
    assert not problems, "\n".join(problems)
    kinds = {(entry["kind"], entry["where"]) for body in bodies for entry in body["removed"]}
    assert {("image", "answer"), ("link", "answer"), ("image", "sources"), ("link", "sources"),
            ("html", "sources")} <= kinds, kinds
    assert not sink.connections and not sink.requests


def test_chat_completions_carry_removed_and_no_url(corpus_api: tuple[str, Sink]) -> None:
    url, sink = corpus_api
    for case in [case for case in CASES if case.answer_removes]:
        body = _post(url, "/v1/chat/completions", {"model": "rag", "messages": [
            {"role": "user", "content": case.question}]})
        content = body["choices"][0]["message"]["content"]
        assert not planted(content, sink.address), content
        assert {"kind": case.answer_removes, "host": SINK_HOST, "where": "answer"} in body["removed"], body
    assert not sink.connections
