"""Text helpers shared by search, grounding and extraction: Han detection, stopwords, and search tokens (Snowball
stems for English, jieba words for Chinese)."""

from __future__ import annotations

import logging
import re
from functools import lru_cache
from typing import Any

HAN_RANGE = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # CJK ideographs: extension A, unified, compatibility
HAN_CHAR = re.compile(f"[{HAN_RANGE}]")
_CJK = HAN_CHAR
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
# Runs of Han characters, and runs of anything else that is a word character.
_RUNS = re.compile(f"[{HAN_RANGE}]+|[^\\W_{HAN_RANGE}]+")
# Words so common that they only add noise to a short question.
_STOPWORDS_EN = """a an and are as at be by can do does for from how i in is it of on or that the this to was what
when where which who why will with you your my me we our if not no there their they been has have had into about"""
_STOPWORDS_ZH = """的 了 是 在 和 与 或 我 你 他 她 它 们 这 那 吗 呢 吧 啊 就 都 也 还 要 会 能
可以 什么 怎么 如何 为什么 哪 哪些 一个 有 没有 把 被 对 中 上 下 以 及 之 其 为 于"""
STOPWORDS = frozenset(_STOPWORDS_EN.split()) | frozenset(_STOPWORDS_ZH.split())


def has_cjk(text: str) -> bool:
    """Whether the text contains Chinese (Han) characters."""
    return _CJK.search(text) is not None


def cjk_share(text: str) -> float:
    """The share of Han characters among the letters and digits of a text (0 for pure English)."""
    # Counted in C (map over str.isalnum, findall): a search ranks ~70 chunks of ~1,500 characters by it, and a
    # Python loop over their characters cost ~1.4 CPU ms an answer. Han characters are letters (isalnum).
    letters = sum(map(str.isalnum, text))
    return len(_CJK.findall(text)) / letters if letters else 0.0


def tokenize(text: str) -> list[str]:
    """Search tokens: English words lower-cased and stemmed (Snowball), Chinese words cut by jieba (search mode:
    long words and the shorter words inside them); no stopwords."""
    tokens: list[str] = []
    for run in _RUNS.findall(text.lower()):
        if _CJK.match(run):
            tokens += [w for w in _jieba_words(run) if w not in STOPWORDS]
        else:
            tokens += stem([w for w in _WORD.findall(run) if w not in STOPWORDS])
    return tokens


def _jieba_words(run: str) -> list[str]:
    return list(_jieba().cut_for_search(run))


@lru_cache(maxsize=1)
def _jieba() -> Any:
    """jieba, quiet: it logs its dictionary loading at DEBUG to a stderr handler of its own, which the CLI's
    reader saw before every Chinese answer."""
    import jieba

    jieba.setLogLevel(logging.WARNING)
    return jieba


@lru_cache(maxsize=1)
def _stemmer() -> Any:
    import Stemmer

    return Stemmer.Stemmer("english")


def stem(words: list[str]) -> list[str]:
    """English words stemmed (Snowball), as the keyword index stems them."""
    return list(_stemmer().stemWords(words)) if words else []
