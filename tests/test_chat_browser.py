"""The chat UI in a real browser (Debian's headless Chromium driven by Playwright) against `rag serve` and real vLLM.

Screenshots land in tests/artifacts/ (not committed).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from rag.config import Settings
from rag.wiring import build_feedback_store
from tests.conftest import REPO, SAMPLES, LLMServer, free_port
from ui.chat.users import hash_password

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CHROMIUM = Path(os.environ.get("RAG_TEST_CHROMIUM", "/usr/bin/chromium"))
# Flags for a root, offline, headless Chromium: no sandbox, and no background calls to Google's hosts.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = REPO / "tests" / "artifacts"
BIN = REPO / ".venv" / "bin"
USER, PASSWORD = "alice", "correct horse battery"
ANSWER_TIMEOUT_MS = 180_000


@dataclass
class ChatApp:
    """A `rag serve` process with the chat at /chat."""

    url: str
    data_dir: Path
    process: subprocess.Popen[bytes]


def _env(data_dir: Path, **settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAG_")}
    env |= {"RAG_DATA_DIR": str(data_dir), "TOKENIZERS_PARALLELISM": "false"}
    return env | {f"RAG_{key.upper()}": value for key, value in settings.items()}


def _serve(data_dir: Path, log: Path, **settings: str) -> ChatApp:
    port = free_port()
    with log.open("wb") as out:
        process = subprocess.Popen([str(BIN / "rag"), "serve", "--port", str(port)], env=_env(data_dir, **settings),
                                   stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"rag serve exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return ChatApp(url, data_dir, process)
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    process.terminate()
    raise AssertionError(f"rag serve did not start: {log.read_text()[-2000:]}")


def _stop(app: ChatApp) -> None:
    app.process.terminate()
    app.process.wait(timeout=30)


@pytest.fixture(scope="module")
def chat_app(tmp_path_factory: pytest.TempPathFactory, llm_server: LLMServer) -> Iterator[ChatApp]:
    """English samples ingested, sign-in on, answering with the session's vLLM."""
    data_dir = tmp_path_factory.mktemp("chat") / "data"
    subprocess.run([str(BIN / "rag-ingest"), str(SAMPLES / "en")], env=_env(data_dir), check=True,
                   capture_output=True)
    app = _serve(data_dir, data_dir.parent / "serve.log", llm_base_url=llm_server.settings.llm_base_url,
                 ui_users=f"{USER}:{hash_password(PASSWORD)}:staff", ui_auth_secret="x" * 64)
    yield app
    _stop(app)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs Debian's chromium (apt-get install chromium)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US")
    yield context.new_page()
    context.close()


def _sign_in(page: Page, app: ChatApp, password: str = PASSWORD) -> None:
    page.goto(f"{app.url}/chat/")
    page.fill("#email", USER)
    page.fill("#password", password)
    page.locator("button[type=submit]").click()


def _ask(page: Page, question: str) -> None:
    page.locator("#chat-input").fill(question)
    page.keyboard.press("Enter")


def _last_answer(page: Page) -> str:
    return page.locator("[data-step-type=assistant_message]").last.inner_text()


def test_sign_in_ask_read_sources_open_pdf_and_rate(page: Page, chat_app: ChatApp) -> None:
    _sign_in(page, chat_app, password="wrong")
    expect(page.get_by_text("Unable to sign in")).to_be_visible()
    _sign_in(page, chat_app)
    expect(page.get_by_text("I answer from 8 documents indexed")).to_be_visible(timeout=30_000)

    question = "When was the Debian project founded?"
    _ask(page, question)
    expect(page.get_by_text("Searching documents")).to_be_visible(timeout=30_000)
    answer = page.locator("[data-step-type=assistant_message]").last
    expect(answer).to_contain_text("tok/s", timeout=ANSWER_TIMEOUT_MS)  # the metrics line ends a finished answer
    text = _last_answer(page)
    assert "Sources" in text and "tokens in" in text
    pdf_source = re.search(r"\[(\d)\]\s*debian-history\.pdf, p\. (\d+)", text)
    assert pdf_source, text
    n, page_number = int(pdf_source[1]), int(pdf_source[2])

    # [n] in the source list opens the PDF at the cited page in the side panel.
    answer.locator("a", has_text=f"[{n}]").last.click()
    expect(page.locator("#side-view-title")).to_have_text(f"[{n}]")
    expect(page.locator("#side-view-content")).to_contain_text(f"{page_number} / ", timeout=30_000)
    expect(page.locator("#side-view-content canvas").first).to_be_visible()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "chat-answer.png"))

    answer.locator("button:has(svg.lucide-thumbs-down)").click()
    page.locator("[role=dialog] textarea").fill("The founding date should come first.")
    page.get_by_role("button", name="Submit feedback").click()
    rating = _wait_for_feedback(chat_app)
    assert (rating.rating, rating.comment, rating.user, rating.channel) == (
        -1, "The founding date should come first.", USER, "chat")
    assert rating.question == question
    stored_words = re.findall(r"[A-Za-z]+", rating.answer)[:8]  # the page shows it rendered from Markdown
    assert stored_words and " ".join(stored_words) in " ".join(re.findall(r"[A-Za-z]+", text))
    assert any(str(source["source"]).endswith("debian-history.pdf") for source in rating.sources)

    # A follow-up is searched for together with the conversation (the condensed question mentions Debian).
    _ask(page, "Who founded it?")
    expect(page.locator("[data-step-type=assistant_message]").filter(has_text="tok/s")).to_have_count(
        2, timeout=ANSWER_TIMEOUT_MS)
    page.locator("[id='step-Searching documents']").last.click()
    searched = page.locator("[data-step-type=retrieval]").last
    expect(searched).to_contain_text("Searched for")
    expect(searched).to_contain_text("Debian")


def _wait_for_feedback(app: ChatApp, timeout: float = 20.0):  # type: ignore[no-untyped-def]
    store = build_feedback_store(Settings(data_dir=app.data_dir, _env_file=None))  # type: ignore[call-arg]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ratings := store.recent(1):
            return ratings[0]
        time.sleep(0.3)
    raise AssertionError("no feedback was stored")


def test_off_topic_question_gets_a_distinct_not_in_documents_reply(page: Page, chat_app: ChatApp) -> None:
    _sign_in(page, chat_app)
    expect(page.get_by_text("I answer from")).to_be_visible(timeout=30_000)
    _ask(page, "What is a good recipe for chocolate cake?")
    reply = page.locator("[data-step-type=assistant_message] blockquote").last
    expect(reply).to_contain_text("Not in the documents", timeout=60_000)
    expect(reply).to_contain_text("contact the helpdesk")


def test_quoted_answer_is_shown_as_a_block_quote_with_its_source(page: Page, chat_app: ChatApp) -> None:
    """The offline model's draft for this question fails the check; the chat shows the documents' own words."""
    _sign_in(page, chat_app)
    expect(page.get_by_text("I answer from")).to_be_visible(timeout=30_000)
    _ask(page, "How do I create a Python virtual environment?")
    answer = page.locator("[data-step-type=assistant_message]").last
    expect(answer).to_contain_text("tok/s", timeout=ANSWER_TIMEOUT_MS)
    text = _last_answer(page)
    assert "From the documents (quoted)" in text, text
    quote = answer.locator("blockquote").filter(has_text="python3 -m venv")
    expect(quote).to_have_count(1)
    expect(quote.locator("a", has_text=re.compile(r"\[\d\]")).first).to_be_visible()  # [n] opens the source


def test_chinese_browser_gets_chinese_ui(browser: Browser, chat_app: ChatApp) -> None:
    context = browser.new_context(locale="zh-CN", extra_http_headers={"Accept-Language": "zh-CN,zh;q=0.9"})
    page = context.new_page()
    page.goto(f"{chat_app.url}/chat/")
    expect(page.get_by_text("登录知识库")).to_be_visible(timeout=30_000)
    page.fill("#email", USER)
    page.fill("#password", PASSWORD)
    page.locator("button[type=submit]").click()
    expect(page.get_by_text("可以向我询问公司文档中的内容")).to_be_visible(timeout=30_000)
    context.close()


def test_errors_are_messages_not_stack_traces(tmp_path: Path, page: Page) -> None:
    """Without sign-in (as in make demo): an empty index, then an unreachable LLM, each a clear chat message."""
    dead_llm = f"http://127.0.0.1:{free_port()}/v1"
    app = _serve(tmp_path / "data", tmp_path / "serve.log", ui_auth="false", llm_base_url=dead_llm)
    try:
        page.goto(f"{app.url}/chat/")
        expect(page.get_by_text("The knowledge base is empty")).to_be_visible(timeout=30_000)
        _ask(page, "How do I reset my password?")
        # The welcome says so, and so does the reply.
        expect(page.get_by_text("The knowledge base is empty")).to_have_count(2, timeout=30_000)

        upload = httpx.post(f"{app.url}/v1/documents", timeout=60, files={
            "file": ("passwords.md", b"# Passwords\nReset your password at https://id.example.com/reset.")})
        assert upload.status_code == 201, upload.text
        _ask(page, "How do I reset my password?")
        expect(page.get_by_text("The answer service is unreachable right now")).to_be_visible(timeout=30_000)
        assert "Traceback" not in page.inner_text("body")
    finally:
        _stop(app)
