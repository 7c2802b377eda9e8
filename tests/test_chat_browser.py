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
from playwright.sync_api import Browser, Locator, Page, WebSocket, expect, sync_playwright

from ingest.manifest import Entry
from ingest.service import library
from rag.config import Settings
from rag.wiring import App, build_feedback_store
from tests.conftest import REPO, SAMPLES, LLMServer, free_port
from tests.docs_factory import pdf_bytes
from tests.injection_corpus import Sink, sink_server, write_corpus
from ui.chat.render import welcome_markdown
from ui.chat.texts import text as ui_text
from ui.serving.users import hash_password

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CHROMIUM = Path(os.environ.get("RAG_TEST_CHROMIUM", "/usr/bin/chromium"))
# Flags for a root, offline, headless Chromium: no sandbox, and no background calls to Google's hosts.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = REPO / "tests" / "artifacts"
BIN = REPO / ".venv" / "bin"
USER, PASSWORD = "alice", "correct horse battery"  # groups staff: never sees the HR document
HR_USER, HR_PASSWORD = "hana", "staple payroll lantern"  # groups hr
ADMIN, ADMIN_PASSWORD = "root", "gravel orbit teapot"  # all groups, admin: may drop files into the chat
ANSWER_TIMEOUT_MS = 180_000
# An HR-only document (front matter groups: [hr]) whose facts must never reach alice, in any form.
HR_SOURCE = "retention-bonus-2027.md"
HR_DOCUMENT = ("---\ngroups: [hr]\n---\n# Retention bonus 2027\n\nThe retention bonus pool for 2027 is 7,340,000 "
               "kroner, paid out in two instalments in March and September.\n")
CANARY = "7,340,000"
# Strings only the HR document (its number, words, title and file name) can put on alice's screen.
HR_MARKERS = (CANARY, "7340000", "7 340 000", "kroner", "instalments", "retention bonus 2027", "retention-bonus")
# A finished reply: an answer ends with its metrics line ("… 1.23 s total"); a refusal or error is sent whole.
METRICS = re.compile(r"\d s total")
FINISHED = re.compile(r"\d s total|Not in the documents|⚠️")


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
    """English samples and one HR-only document ingested, sign-in on (alice: staff, hana: hr, root: admin),
    answering with the session's vLLM."""
    folder = tmp_path_factory.mktemp("chat")
    data_dir, hr_docs = folder / "data", folder / "hr"
    hr_docs.mkdir()
    (hr_docs / HR_SOURCE).write_text(HR_DOCUMENT, encoding="utf-8")
    subprocess.run([str(BIN / "rag-ingest"), str(SAMPLES / "en"), str(hr_docs)], env=_env(data_dir), check=True,
                   capture_output=True)
    users = (f"{USER}:{hash_password(PASSWORD)}:staff,{HR_USER}:{hash_password(HR_PASSWORD)}:hr,"
             f"{ADMIN}:{hash_password(ADMIN_PASSWORD)}:*:admin")
    # API keys set: the PDF viewer must reach its file through the chat's session, not as an anonymous caller.
    app = _serve(data_dir, folder / "serve.log", llm_base_url=llm_server.settings.llm_base_url,
                 ui_users=users, ui_auth_secret="x" * 64, api_keys="k" * 24 + ":*:admin")
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


def _sign_in(page: Page, app: ChatApp, password: str = PASSWORD, user: str = USER) -> None:
    page.goto(f"{app.url}/chat/")
    page.fill("#email", user)
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
    expect(answer).to_contain_text(METRICS, timeout=ANSWER_TIMEOUT_MS)  # the metrics line ends a finished answer
    text = _last_answer(page)
    assert "Sources" in text and "tokens in" in text
    pdf_source = re.search(r"\[(\d)\]\s*debian-history\.pdf, p\. (\d+)", text)
    assert pdf_source, text
    n, page_number = int(pdf_source[1]), int(pdf_source[2])

    # The source's name in the list opens the PDF at the cited page in the side panel, titled by the source.
    _source_link(answer, n).click()
    expect(page.locator("#side-view-title")).to_have_text(pdf_source[0])
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
    expect(page.locator("[data-step-type=assistant_message]").filter(has_text=METRICS)).to_have_count(
        2, timeout=ANSWER_TIMEOUT_MS)
    page.locator("[id='step-Searching documents']").last.click()
    searched = page.locator("[data-step-type=retrieval]").last
    expect(searched).to_contain_text("Searched for")
    expect(searched).to_contain_text("Debian")

    # A new topic in the same conversation is searched alone and answered from its own passages (joined to the last
    # question, each new question of a chat was answered from the previous one's).
    _ask(page, "How do I create a Python virtual environment?")
    expect(page.locator("[data-step-type=assistant_message]").filter(has_text=METRICS)).to_have_count(
        3, timeout=ANSWER_TIMEOUT_MS)
    expect(page.locator("[data-step-type=assistant_message]").last).to_contain_text("python-tutorial-venv.html")
    page.locator("[id='step-Searching documents']").last.click()
    searched = page.locator("[data-step-type=retrieval]").last
    expect(searched).to_contain_text("passages found")  # the step is open and filled
    expect(searched).not_to_contain_text("Searched for")  # the question as asked: nothing rewritten or joined to it


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


def test_demo_question_is_answered_with_the_command_and_its_source(page: Page, chat_app: ChatApp) -> None:
    """The offline model answers the demo question itself (its metrics carry a rate); should its draft fail the
    check on another CPU, the documents' own words are shown as a block quote instead (no rate: no model text)."""
    _sign_in(page, chat_app)
    expect(page.get_by_text("I answer from")).to_be_visible(timeout=30_000)
    _ask(page, "How do I create a Python virtual environment?")
    answer = page.locator("[data-step-type=assistant_message]").last
    expect(answer).to_contain_text(METRICS, timeout=ANSWER_TIMEOUT_MS)
    text = _last_answer(page)
    assert "python3 -m venv" in text, text
    if "From the documents (quoted)" in text:
        assert re.search(r"quoted · .*\d s total", text) and "tok/s" not in text, text
        expect(answer.locator("blockquote").filter(has_text="python3 -m venv")).to_have_count(1)
    else:
        assert "tok/s" in text and "quoted" not in text, text
    n = re.findall(r"\[(\d)\]", text)[0]
    expect(_source_link(answer, int(n))).to_be_visible()  # the answer's source, listed below, opens it


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


def _welcomes(app: ChatApp) -> tuple[str, str]:
    """The welcome's count of documents, passages and kinds (up to its closing parenthesis, as the page shows it)
    for alice (every document but the HR file) and for hana (all of them), from the index's manifest."""
    entries = library(App(Settings(data_dir=app.data_dir, _env_file=None))).documents()  # type: ignore[call-arg]
    hr = [entry for entry in entries if entry.source == HR_SOURCE]
    assert [entry.access for entry in hr] == ["|hr|"], entries
    public = [entry for entry in entries if entry.source != HR_SOURCE]

    def counted(documents: list[Entry]) -> str:
        chunks = sum(len(entry.chunk_ids) for entry in documents)
        return welcome_markdown([entry.source for entry in documents], chunks, "en").replace("**", "").split(")")[0]

    return counted(public), counted(entries)


def _watch_frames(page: Page) -> list[str]:
    """Every WebSocket frame the page receives (Chainlit's socket.io), decoded."""
    frames: list[str] = []

    def watch(socket: WebSocket) -> None:
        socket.on("framereceived", lambda payload: frames.append(
            payload if isinstance(payload, str) else payload.decode(errors="replace")))

    page.on("websocket", watch)
    return frames


def _expect_welcome(page: Page, welcome: str) -> None:
    """Signed in, with the welcome counting what this user may see."""
    expect(page.locator("[data-step-type=assistant_message]").first).to_contain_text(welcome, timeout=30_000)


def _ask_in_new_chat(page: Page, app: ChatApp, question: str, welcome: str) -> Locator:
    """Ask in a new conversation and wait for the finished reply. Without history there is nothing to condense,
    so a question refused for want of a relevant document costs no LLM call."""
    page.goto(f"{app.url}/chat/")
    _expect_welcome(page, welcome)
    _ask(page, question)
    finished = page.locator("[data-step-type=assistant_message]").filter(has_text=FINISHED)
    expect(finished).to_have_count(1, timeout=ANSWER_TIMEOUT_MS)
    reply = finished.last.inner_text()
    errors = [ui_text("en", key) for key in ("llm_down", "store_down", "empty_index", "busy")]
    assert not any(error in reply for error in [*errors, "Something went wrong"]), reply
    return finished.last


def _source_link(answer: Locator, n: int) -> Locator:
    """The link of source n in the answer's list: its name, `[n] file, p. 3`."""
    return answer.locator("a.element-link", has_text=re.compile(rf"^\[{n}\] "))


def _source_panels(page: Page, answer: Locator) -> list[str]:
    """The text of every side panel behind the answer's source links, each titled by its source (a PDF panel
    shows its page number)."""
    panels = []
    for n in re.findall(r"^\[(\d+)\] ", answer.inner_text(), re.MULTILINE):  # the source list's lines
        link = _source_link(answer, int(n))
        link.click()  # once the message's elements came (after its text)
        expect(page.locator("#side-view-title")).to_have_text(link.inner_text())
        content = page.locator("#side-view-content")
        expect(content).to_contain_text(re.compile(r"\S"), timeout=30_000)
        panels.append(content.inner_text())
    return panels


def _assert_no_hr(where: str, shown: str, *, phrase: bool = True) -> None:
    """No trace of the HR document; `phrase` also rules out "retention bonus" (not where alice's own question
    is part of the text)."""
    markers = (*HR_MARKERS, "retention bonus") if phrase else HR_MARKERS
    leaked = [marker for marker in markers if marker.lower() in shown.lower()]
    assert not leaked, f"{where} shows {leaked}: {shown[:3000]}"


def test_reader_outside_hr_never_sees_the_hr_document(page: Page, chat_app: ChatApp) -> None:
    """alice (staff) asks for the HR canary in its own words, in a paraphrase and in Chinese: no answer, source,
    panel, count or socket frame shows any of it."""
    public, everything = _welcomes(chat_app)
    assert public != everything
    frames = _watch_frames(page)
    _sign_in(page, chat_app)
    _expect_welcome(page, public)
    for question in ("What is the retention bonus pool for 2027?",
                     "How much money is set aside for keeping staff next year?",
                     "2027年的留任奖金总额是多少？"):
        answer = _ask_in_new_chat(page, chat_app, question, public)  # the welcome counts no HR document
        replies = page.locator("[data-step-type=assistant_message]").all_inner_texts()
        _assert_no_hr(f"the reply to {question!r}", "\n".join(replies))
        for panel in _source_panels(page, answer):
            _assert_no_hr(f"a source panel of {question!r}", panel)
        _assert_no_hr(f"the page after {question!r}", page.inner_text("body"), phrase=False)
        _assert_no_hr(f"the HTML after {question!r}", page.content(), phrase=False)
    assert any(FINISHED.search(frame) for frame in frames), "no reply came over the WebSocket"
    _assert_no_hr("a WebSocket frame", "\n".join(frames), phrase=False)


def _hana_thread(page: Page, app: ChatApp) -> str:
    """The id of hana's one conversation, once it is stored with her answer (her own thread list and thread)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        listed = page.request.post(f"{app.url}/chat/project/threads", data={"pagination": {"first": 20}, "filter": {}})
        assert listed.ok, listed.text()
        threads = listed.json()["data"]
        if len(threads) == 1 and CANARY in page.request.get(f"{app.url}/chat/project/thread/{threads[0]['id']}").text():
            return str(threads[0]["id"])
        time.sleep(0.5)
    raise AssertionError("hana's conversation was not stored with her answer")


def test_hr_member_sees_the_hr_document_and_nobody_else_opens_her_thread(browser: Browser,
                                                                          chat_app: ChatApp) -> None:
    public, everything = _welcomes(chat_app)
    hana = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US")
    page = hana.new_page()
    _sign_in(page, chat_app, HR_PASSWORD, user=HR_USER)
    _expect_welcome(page, everything)
    answer = _ask_in_new_chat(page, chat_app, "What is the retention bonus pool for 2027?", everything)
    shown = answer.inner_text()
    assert HR_SOURCE in shown, shown  # listed among the sources
    if CANARY not in shown:
        shown += "\n".join(_source_panels(page, answer))
    assert CANARY in shown, shown
    thread_id = _hana_thread(page, chat_app)
    hana.close()

    alice = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US")
    page = alice.new_page()
    frames = _watch_frames(page)
    _sign_in(page, chat_app)
    _expect_welcome(page, public)
    # Chainlit checks the author: alice can neither read hana's thread nor an element of it, nor list it.
    for route in (f"thread/{thread_id}", f"thread/{thread_id}/element/x"):
        response = page.request.get(f"{chat_app.url}/chat/project/{route}")
        assert response.status in (401, 404), (route, response.status, response.text())
        _assert_no_hr(f"/chat/project/{route}", response.text())
    listed = page.request.post(f"{chat_app.url}/chat/project/threads", data={"pagination": {"first": 20}, "filter": {}})
    assert listed.ok and thread_id not in listed.text(), listed.text()
    # Opening hana's thread in the chat: the socket refuses to resume it, and nothing of it is shown (the sidebar
    # lists alice's own conversations, named after her questions of the test above: hence phrase=False).
    page.goto(f"{chat_app.url}/chat/thread/{thread_id}")
    expect(page.get_by_text("Couldn't resume chat")).to_be_visible(timeout=30_000)
    assert any("Connection refused" in frame for frame in frames), frames
    _assert_no_hr("hana's thread opened by alice", page.inner_text("body"), phrase=False)
    _assert_no_hr("a WebSocket frame of hana's thread", "\n".join(frames), phrase=False)
    alice.close()


def test_errors_are_messages_not_stack_traces(tmp_path: Path, page: Page) -> None:
    """Without sign-in (as in make demo): an empty index, then an unreachable LLM, each a clear chat message."""
    dead_llm = f"http://127.0.0.1:{free_port()}/v1"
    admin_key = "admin-key-" + "k" * 16  # uploads need an admin; the chat without sign-in is an anonymous reader
    app = _serve(tmp_path / "data", tmp_path / "serve.log", ui_auth="false", llm_base_url=dead_llm,
                 api_keys=f"{admin_key}:*:admin")
    try:
        page.goto(f"{app.url}/chat/")
        expect(page.get_by_text("The knowledge base is empty")).to_be_visible(timeout=30_000)
        _ask(page, "How do I reset my password?")
        # The welcome says so, and so does the reply.
        expect(page.get_by_text("The knowledge base is empty")).to_have_count(2, timeout=30_000)

        document = ("passwords.md", b"# Passwords\nReset your password at https://id.example.com/reset.")
        upload = httpx.post(f"{app.url}/v1/documents", timeout=60, files={"file": document},
                            headers={"Authorization": f"Bearer {admin_key}"})
        assert upload.status_code == 201, upload.text
        _ask(page, "How do I reset my password?")
        expect(page.get_by_text("The answer service is unreachable right now")).to_be_visible(timeout=30_000)
        assert "Traceback" not in page.inner_text("body")
    finally:
        _stop(app)


# Three sources of one answer, each with a word only it holds: two Markdown files (one with `_` in its name) and
# a PDF whose second page answers.
VPN_DOCS = {"vpn_linux_notes.md": "# VPN on Linux\n\nTo connect to the office VPN on Linux, import the WireGuard "
                                  "profile quokka-tunnel.conf with nmcli.\n",
            "vpn-windows.md": "# VPN on Windows\n\nTo connect to the office VPN on Windows, install the WireGuard "
                              "client and import the profile wombat-tunnel.conf.\n"}
VPN_PDF = ("vpn-guide.pdf", ["Office VPN guide", "VPN on macOS\nTo connect to the office VPN on macOS, import the "
                                                 "WireGuard profile numbat-tunnel.conf."])
VPN_WORDS = {"vpn_linux_notes.md": "quokka", "vpn-windows.md": "wombat", "vpn-guide.pdf": "numbat"}


@pytest.fixture(scope="module")
def sources_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChatApp]:
    """The three VPN documents behind the chat, answering with quotes only (RAG_ANSWER_MODE=extract: no LLM),
    sign-in on (alice)."""
    folder = tmp_path_factory.mktemp("sources-chat")
    docs = folder / "docs"
    docs.mkdir()
    for name, content in VPN_DOCS.items():
        (docs / name).write_text(content, encoding="utf-8")
    (docs / VPN_PDF[0]).write_bytes(pdf_bytes(VPN_PDF[1]))
    subprocess.run([str(BIN / "rag-ingest"), str(docs)], env=_env(folder / "data"), check=True, capture_output=True)
    app = _serve(folder / "data", folder / "serve.log", answer_mode="extract", top_k="3",
                 llm_base_url=f"http://127.0.0.1:{free_port()}/v1",
                 ui_users=f"{USER}:{hash_password(PASSWORD)}:staff", ui_auth_secret="x" * 64)
    yield app
    _stop(app)


def test_source_panels_open_on_click_each_titled_by_and_showing_its_own_source(page: Page,
                                                                                 sources_app: ChatApp) -> None:
    """No panel opens by itself when an answer's sources arrive; clicking a source's name in the list opens its
    panel, titled `[n] file` (`, p. N` for a PDF) and showing that source alone. A quoted answer's metrics say
    "quoted", with no rate."""
    _sign_in(page, sources_app)
    expect(page.get_by_text("I answer from 3 documents indexed")).to_be_visible(timeout=30_000)
    _ask(page, "How do I connect to the office VPN?")
    answer = page.locator("[data-step-type=assistant_message]").filter(has_text=FINISHED).last
    expect(answer).to_contain_text(METRICS, timeout=ANSWER_TIMEOUT_MS)
    links = answer.locator("a.element-link")
    expect(links).to_have_count(3, timeout=30_000)  # the elements come after the message's text
    page.wait_for_timeout(1_000)  # time for the panel to open by itself, as Chainlit 2.11+ does unpatched
    expect(page.locator("#side-view-title")).to_have_count(0)
    text = answer.inner_text()
    assert re.search(r"quoted · \d+\.\d\d s total", text) and "tok/s" not in text, text
    expect(answer.locator("blockquote").first).to_be_visible()  # quotes are shown as block quotes
    names = links.all_inner_texts()
    assert sorted(re.sub(r"^\[\d\] |, p\. \d+$", "", name) for name in names) == sorted(VPN_WORDS), names
    for n, name in enumerate(names, start=1):
        assert name.startswith(f"[{n}] "), names
        _source_link(answer, n).click()
        expect(page.locator("#side-view-title")).to_have_text(name)
        content = page.locator("#side-view-content")
        file = re.sub(r"^\[\d\] |, p\. \d+$", "", name)
        if file.endswith(".pdf"):
            assert name.endswith(", p. 2"), name  # the page that answers
            expect(content).to_contain_text("2 / 2", timeout=30_000)  # the PDF viewer, at that page
            expect(content.locator("canvas").first).to_be_visible()
        else:
            expect(content).to_contain_text(f"{VPN_WORDS[file]}-tunnel.conf")
        shown = content.inner_text()
        assert not [word for other, word in VPN_WORDS.items() if other != file and word in shown], (name, shown)
    assert len(_source_panels(page, answer)) == 3  # what the tests above read each panel with
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "chat-source-panel.png"))


# Questions whose documents carry an exfiltration image, a phishing link and raw HTML/JS (two answered by the model,
# two by quotes that include the attack sentence).
INJECTION_QUESTIONS = ("What is the name of the guest Wi-Fi network?",
                       "When are payslips published in the payroll portal?", "报销单模板在哪里下载？",
                       "彩色打印机在哪里？")
# Everything the page may load or link to lives on the app's own origin (or is inline data).
_OUTSIDE = """els => els.map(e => e.getAttribute('src') ?? e.getAttribute('href') ?? e.getAttribute('data') ?? '')
    .filter(u => u && !u.startsWith('#') && !u.startsWith('data:') && !u.startsWith('blob:'))
    .filter(u => new URL(u, location.href).origin !== location.origin)"""


@pytest.fixture(scope="module")
def injection_app(tmp_path_factory: pytest.TempPathFactory, llm_server: LLMServer) -> Iterator[tuple[ChatApp, Sink]]:
    """The injection corpus (every planted URL pointing at a local sink server) behind the chat, sign-in on."""
    folder = tmp_path_factory.mktemp("injection-chat")
    with sink_server() as sink:
        docs = write_corpus(folder / "docs", sink.address)
        subprocess.run([str(BIN / "rag-ingest"), str(docs)], env=_env(folder / "data"), check=True,
                       capture_output=True)
        app = _serve(folder / "data", folder / "serve.log", llm_base_url=llm_server.settings.llm_base_url,
                     ui_users=f"{USER}:{hash_password(PASSWORD)}:staff", ui_auth_secret="x" * 64)
        try:
            yield app, sink
        finally:
            _stop(app)


def test_hostile_documents_make_the_browser_fetch_and_link_nothing_outside(
        page: Page, injection_app: tuple[ChatApp, Sink]) -> None:
    """Answers and source panels over documents with `![](http://sink/…)`, phishing links and `<img onerror>`: the
    DOM holds no image, frame or link pointing off the app (checked on the DOM, so it holds without a CSP), and
    the sink hears nothing."""
    app, sink = injection_app
    fetched: list[str] = []
    page.on("request", lambda request: fetched.append(request.url))
    _sign_in(page, app)
    expect(page.get_by_text("I answer from")).to_be_visible(timeout=30_000)
    shown = []
    for n, question in enumerate(INJECTION_QUESTIONS):
        if n:  # a new conversation for each question (no history: nothing to condense)
            page.goto(f"{app.url}/chat/")
            expect(page.get_by_text("I answer from")).to_be_visible(timeout=30_000)
        _ask(page, question)
        finished = page.locator("[data-step-type=assistant_message]").filter(has_text=FINISHED)
        expect(finished).to_have_count(1, timeout=ANSWER_TIMEOUT_MS)
        shown += [finished.last.inner_text(), *_source_panels(page, finished.last)]
        elements = "img, image, iframe, frame, object, embed, video, audio, source, a[href], link[href], script[src]"
        assert page.eval_on_selector_all(elements, _OUTSIDE) == [], question
        images = page.eval_on_selector_all("#side-view-content img, [data-step-type=assistant_message] img",
                                           "els => els.map(e => new URL(e.src).pathname)")
        assert all(path.startswith("/chat/avatars/") for path in images), images  # the assistant's own avatar
    text = "\n".join(shown)
    assert "Visitor-Net" in text and "(link removed: 127.0.0.1)" in text and "报销单模板" in text, text
    assert not [match for match in ("http://", "onerror", "<img", "<script", "![") if match in text], text
    assert not [url for url in fetched if sink.address in url], fetched
    assert not sink.connections and not sink.requests


# Console lines of a blocked load or script; the init script reports each violation event the page sees as well.
_CSP_REPORTER = """document.addEventListener('securitypolicyviolation',
    e => console.error(`CSP violation: ${e.violatedDirective} ${e.blockedURI}`))"""


def test_chat_works_under_its_content_security_policy_and_asks_nothing_from_outside(
        page: Page, chat_app: ChatApp) -> None:
    """Sign-in, a streamed answer and a PDF source at its page, all under the app's CSP: no violation reported,
    and the browser requests nothing but the app itself (Chainlit's Google Fonts and KaTeX links are gone)."""
    violations: list[str] = []
    requested: list[str] = []
    page.add_init_script(_CSP_REPORTER)
    page.on("console", lambda message: violations.append(message.text)
            if "Content Security Policy" in message.text or "CSP violation" in message.text else None)
    page.on("request", lambda request: requested.append(request.url))
    first = page.goto(f"{chat_app.url}/chat/")
    assert first is not None and "script-src 'self' 'nonce-" in first.headers["content-security-policy"]
    _sign_in(page, chat_app)
    expect(page.get_by_text("I answer from")).to_be_visible(timeout=30_000)
    _ask(page, "When was the Debian project founded?")
    answer = page.locator("[data-step-type=assistant_message]").last
    expect(answer).to_contain_text(METRICS, timeout=ANSWER_TIMEOUT_MS)
    pdf_source = re.search(r"\[(\d)\]\s*debian-history\.pdf, p\. (\d+)", answer.inner_text())
    assert pdf_source, answer.inner_text()
    _source_link(answer, int(pdf_source[1])).click()
    expect(page.locator("#side-view-content")).to_contain_text(f"{pdf_source[2]} / ", timeout=30_000)
    expect(page.locator("#side-view-content canvas").first).to_be_visible()
    assert not violations, violations
    outside = [url for url in requested if not url.startswith((f"{chat_app.url}/", "data:", "blob:"))]
    assert not outside, outside


# Dropped into the chat by the admin (the last test of the chat_app module: it adds a document to its index).
DROPPED = ("office-vpn.md", "# Office VPN\n\nThe office VPN uses the WireGuard profile named quokka-tunnel. Import "
                            "quokka-tunnel.conf into WireGuard, then connect.\n")
_DROP = """([name, text]) => { const data = new DataTransfer();
    data.items.add(new File([text], name, {type: 'text/markdown'})); return data; }"""


def test_an_admin_drops_a_file_into_the_chat_and_it_is_searchable_a_reader_cannot(browser: Browser,
                                                                                  chat_app: ChatApp) -> None:
    """root drags a Markdown file onto the chat with a question about it: the file is added (its message says so),
    and the answer cites it. alice has no attach button, and Chainlit's upload route refuses her file."""
    started = time.time()
    admin = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US")
    page = admin.new_page()
    _sign_in(page, chat_app, ADMIN_PASSWORD, user=ADMIN)
    expect(page.get_by_text("As an administrator you can add documents")).to_be_visible(timeout=30_000)
    expect(page.locator("#upload-button")).to_have_count(1)  # the composer's attach button
    name, content = DROPPED
    data = page.evaluate_handle(_DROP, [name, content])
    for event in ("dragenter", "dragover", "drop"):  # what dragging a file from the desktop fires
        page.locator("#chat-input").dispatch_event(event, {"dataTransfer": data})
    expect(page.locator("#attachments")).to_contain_text(name, timeout=10_000)  # attached in the composer
    page.locator("#chat-input").fill("Which WireGuard profile does the office VPN use?")
    expect(page.locator("#chat-submit")).to_be_enabled(timeout=30_000)  # the upload finished (Enter waits for it)
    page.keyboard.press("Enter")
    expect(page.get_by_text(f"✅ {name} added: 1 passage, visible to everyone.")).to_be_visible(timeout=60_000)
    finished = page.locator("[data-step-type=assistant_message]").filter(has_text=FINISHED)
    expect(finished.last).to_contain_text(METRICS, timeout=ANSWER_TIMEOUT_MS)
    assert name in finished.last.inner_text(), finished.last.inner_text()  # among the sources
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "chat-drop.png"))
    admin.close()
    entries = library(App(Settings(data_dir=chat_app.data_dir, _env_file=None))).documents()  # type: ignore[call-arg]
    assert [entry.access for entry in entries if entry.source == name] == ["open"]
    session_files = [path for path in (REPO / "ui" / "chat" / ".files").rglob("*")
                     if path.is_file() and path.stat().st_mtime >= started - 1]
    assert not [path for path in session_files if path.read_bytes() == content.encode()]  # Chainlit's copy is gone

    reader = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US")
    page = reader.new_page()
    _sign_in(page, chat_app)
    expect(page.get_by_text("I answer from")).to_be_visible(timeout=30_000)
    assert "As an administrator" not in page.inner_text("body")
    expect(page.locator("#upload-button")).to_have_count(0)
    expect(page.locator("#upload-button-input")).to_have_count(0)
    refused = page.request.post(f"{chat_app.url}/chat/project/file?session_id=x", multipart={
        "file": {"name": "notes.md", "mimeType": "text/markdown", "buffer": b"# Notes\n"}})
    assert refused.status == 403 and "Only administrators" in refused.text(), refused.text()
    reader.close()
