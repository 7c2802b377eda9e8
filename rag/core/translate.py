"""Question translation by the LLM, for searching documents written in the other language (issue 28).

A Chinese question over English documents (and the reverse) finds little by keywords and not much by meaning;
searching once more with the question in the documents' language finds the passage (docs, "Questions in the
other language"). A translation that fails, or does not come back in the language asked for, is no translation:
the search goes on with the question as asked.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict

from rag.core.errors import LLMUnavailable, RagError
from rag.core.ports import ChatModel
from rag.core.prompt import translate_messages
from rag.core.sentences import Language, question_language

log = logging.getLogger("rag.core.translate")

MAX_TOKENS = 80  # a question, not a paragraph: a model that starts answering instead is cut short
CACHE_SIZE = 1024
PAUSE_S = 30.0  # after the server could not be reached: questions go untranslated for this long, without waiting


def cleaned(reply: str, into: Language, question: str) -> str | None:
    """The translation in a reply: its first line without quotes; None when it is empty, not in the language asked
    for, the question itself, or far longer than the question (an answer, not a translation)."""
    line = next((line.strip() for line in reply.splitlines() if line.strip()), "")
    line = line.strip("\"'“”「」『』` ").strip()
    if not line or line == question.strip() or question_language(line) != into:
        return None
    if len(line) > 4 * len(question) + 40:
        return None
    return line


class LLMTranslator:
    """Translates questions with the served model; remembers recent translations, and pauses while it is down."""

    def __init__(self, llm: ChatModel, languages: frozenset[str] = frozenset({"en", "zh"})) -> None:
        self._llm = llm
        self.languages = languages
        self._cache: OrderedDict[tuple[str, str], str | None] = OrderedDict()
        self._lock = threading.Lock()
        self._paused_until = 0.0

    def translate(self, question: str, into: Language) -> str | None:
        """The question in language `into`, or None (the model does not write it, is down, or replied otherwise)."""
        if into not in self.languages or time.monotonic() < self._paused_until:
            return None
        key = (question, into)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        try:
            reply = self._llm.complete(translate_messages(question, into), max_tokens=MAX_TOKENS)
        except LLMUnavailable as exc:
            self._paused_until = time.monotonic() + PAUSE_S
            log.warning("questions go untranslated for %.0f s: %s", PAUSE_S, exc)
            return None
        except RagError as exc:  # not remembered: the next asking tries again
            log.warning("question not translated: %s", exc)
            return None
        translation = cleaned(reply, into, question)
        with self._lock:
            self._cache[key] = translation
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        return translation
