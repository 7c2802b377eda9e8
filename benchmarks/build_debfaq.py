"""Build data/eval/debfaq: the Debian FAQ as a held-out-style bilingual dev set (one answer per document).

    apt-get download debian-faq debian-faq-zh-cn && for f in debian-faq*.deb; do dpkg -x "$f" faq; done
    .venv/bin/python -m benchmarks.build_debfaq faq/usr/share/doc/debian/FAQ data/eval/debfaq

Every section of the FAQ (debian-faq / debian-faq-zh-cn 11.1) becomes one document that holds its answer only (the
heading, which is the question, is left out), and its heading becomes the question, asked over the English and over
the Chinese documents: the protocol of the held-out set of issue 28 (the question text is not in the passage).
Chapters on which the Chinese dev set was written (data/samples/zh) and the FAQ about the FAQ are left out; so are
sections with almost no answer and headings that are a tool's name rather than a question.
"""

from __future__ import annotations

import html
import json
import re
import sys
from pathlib import Path
from typing import NamedTuple

HEADING = re.compile(r'<h([23]) class="title"><a id="([^"]+)"></a>(.*?)</h\1>', re.S)
TAG = re.compile(r"<[^>]+>")
NUMBER = re.compile(r"^\s*[\d.]+\s*")
HAN = re.compile(r"[\u4e00-\u9fff]")
BLOCK_END = re.compile(r"<(/p|br|/div|/li|/dt|/dd|/pre|/tr|/h\d)[^>]*>")
PRE = re.compile(r"(<pre[^>]*>.*?</pre>)", re.S)
# pkg-basics and uptodate are in data/samples/zh (the Chinese dev set's corpus); faqinfo is about the FAQ itself.
SKIP = {"pkg-basics", "uptodate", "faqinfo", "index"}
MIN_ANSWER = 120  # characters of English answer; the Chinese one needs a third of that


class Pair(NamedTuple):
    """One FAQ section in both languages."""

    section: str
    question_en: str
    answer_en: str
    question_zh: str
    answer_zh: str


def text_of(fragment: str) -> str:
    """Plain text of an HTML fragment: one line per block, whitespace collapsed outside <pre>."""
    # The HTML wraps paragraphs at ~80 columns; those line ends are spaces.
    parts = PRE.split(fragment)
    fragment = "".join(part if part.startswith("<pre") else re.sub(r"\s+", " ", part) for part in parts)
    text = html.unescape(TAG.sub("", BLOCK_END.sub("\n", fragment)))
    lines = [re.sub(r"[ \t]+", " ", line).strip() for line in text.splitlines()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def sections(page: str) -> dict[str, tuple[str, str]]:
    """Section id → (heading without its number, text up to the next heading) of one FAQ chapter."""
    found = list(HEADING.finditer(page))
    out = {}
    for n, match in enumerate(found):
        end = found[n + 1].start() if n + 1 < len(found) else len(page)
        out[match.group(2)] = (NUMBER.sub("", text_of(match.group(3))).strip(), text_of(page[match.end():end]))
    return out


def pairs(faq: Path) -> list[Pair]:
    """The sections present in both languages whose answers say something and whose Chinese heading is Chinese."""
    found = []
    for page in sorted(faq.glob("*.en.html")):
        chapter = page.name.split(".")[0]
        if chapter in SKIP:
            continue
        english = sections(page.read_text(encoding="utf-8"))
        chinese = sections((faq / "zh-cn" / f"{chapter}.zh-cn.html").read_text(encoding="utf-8"))
        for section, (question_en, answer_en) in english.items():
            question_zh, answer_zh = chinese.get(section, ("", ""))
            if len(answer_en) >= MIN_ANSWER and len(answer_zh) >= MIN_ANSWER // 3 and HAN.search(question_zh):
                found.append(Pair(section, question_en, answer_en, question_zh, answer_zh))
    return found


def write(found: list[Pair], out: Path) -> None:
    """docs/{en,zh}/SECTION.txt and {en,zh}/questions-{en,zh}.jsonl (corpus language / question language)."""
    for lang in ("en", "zh"):
        docs = out / "docs" / lang
        docs.mkdir(parents=True, exist_ok=True)
        for pair in found:
            (docs / f"{pair.section}.txt").write_text((pair.answer_en if lang == "en" else pair.answer_zh) + "\n",
                                                      encoding="utf-8")
    for docs_lang in ("en", "zh"):
        (out / docs_lang).mkdir(parents=True, exist_ok=True)
        for q_lang in ("en", "zh"):
            lines = [json.dumps({"question": pair.question_en if q_lang == "en" else pair.question_zh,
                                 "expected_source": f"{pair.section}.txt", "answerable": True,
                                 "split": "tune" if n % 2 == 0 else "test"}, ensure_ascii=False)
                     for n, pair in enumerate(found)]
            (out / docs_lang / f"questions-{q_lang}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    built = pairs(Path(sys.argv[1]))
    write(built, Path(sys.argv[2]))
    print(f"{len(built)} sections in both languages → {sys.argv[2]}")
