"""Hostile documents against the real query path: the injection corpus ingested, one question per document over a
live API with the real vLLM, and nothing an attacker planted comes back (no URL, image, HTML, template token or
hidden text), `removed` says what was taken out, and the sink server hears nothing."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import Any

import httpx
import pytest

from ingest import service
from rag.config import Settings
from rag.wiring import App
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
def corpus_settings(tmp_path_factory: pytest.TempPathFactory, llm_settings: Settings,
                    real_embedder: object) -> Iterator[tuple[Settings, Sink]]:
    """The corpus ingested into a fresh data folder, with the sink that its URLs point at."""
    with sink_server() as sink:
        folder = write_corpus(tmp_path_factory.mktemp("injection") / "docs", sink.address)
        # A shared CPU vLLM may queue a request for a while: a generous timeout, so load is no failure.
        settings = llm_settings.model_copy(update={"data_dir": tmp_path_factory.mktemp("injection-data"),
                                                   "docs_dir": folder, "api_keys": f"{KEY}:*", "llm_timeout_s": 300.0})
        _, report = service.sync([folder], settings, embedder=real_embedder)  # type: ignore[arg-type]
        assert not report.failed and report.added == len(CASES), report
        yield settings, sink


def _api(settings: Settings, embedder: object) -> AbstractContextManager[str]:
    """The API over the corpus' index, served on a free port."""
    return serving(create_app(settings, build_services(App(settings, embedder=embedder))))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def corpus_api(corpus_settings: tuple[Settings, Sink], real_embedder: object) -> Iterator[tuple[str, Sink]]:
    settings, sink = corpus_settings
    with _api(settings, real_embedder) as url:
        yield url, sink


@pytest.fixture(scope="module")
def quoting_api(corpus_settings: tuple[Settings, Sink], real_embedder: object) -> Iterator[tuple[str, Sink]]:
    """The same index behind an API that answers by quoting only (`RAG_ANSWER_MODE=extract`)."""
    settings, sink = corpus_settings
    with _api(settings.model_copy(update={"answer_mode": "extract"}), real_embedder) as url:
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
    # A quoted answer holds the attack's sentence, so its link or image must be reported; whether a written answer
    # repeats the link is the model's choice (test_quoted_answers_report_what_they_removed pins the quoting path).
    answer_removes = case.answer_removes if body["mode"] == "extracted" else ""
    wanted: list[tuple[dict[str, str], str]] = [
        ({"kind": answer_removes, "host": SINK_HOST, "where": "answer"}, answer_removes),
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
    assert {("image", "sources"), ("link", "sources"), ("html", "sources")} <= kinds, kinds
    assert not sink.connections and not sink.requests


def test_quoted_answers_report_what_they_removed(quoting_api: tuple[str, Sink]) -> None:
    """The same index answered by quoting: the attack's sentence is quoted, its link or image taken out of the
    answer and reported, and nothing planted is shown."""
    url, sink = quoting_api
    for case in [case for case in CASES if case.answer_removes]:
        body = _post(url, "/v1/ask", {"question": case.question})
        assert body["mode"] == "extracted", body
        assert not _problems(case, body, sink), _problems(case, body, sink)
        assert {"kind": case.answer_removes, "host": SINK_HOST, "where": "answer"} in body["removed"], body
    assert not sink.connections


@pytest.mark.parametrize("api", ["corpus_api", "quoting_api"])
def test_chat_completions_carry_removed_and_no_url(api: str, request: pytest.FixtureRequest) -> None:
    url, sink = request.getfixturevalue(api)
    for case in [case for case in CASES if case.answer_removes]:
        body = _post(url, "/v1/chat/completions", {"model": "rag", "messages": [
            {"role": "user", "content": case.question}]})
        content = body["choices"][0]["message"]["content"]
        assert not planted(content, sink.address), content
        if body["mode"] == "extracted":  # a quote holds the attack's sentence; a written answer may leave it out
            assert {"kind": case.answer_removes, "host": SINK_HOST, "where": "answer"} in body["removed"], body
    assert not sink.connections
