"""Retrieval evaluation (`rag eval`): recall@1/3/10, MRR, refusal precision/recall, latency, a suggested threshold.

Cases are JSONL: `{"question": …, "expected_source": … | "expected_text": …, "answerable": true|false}`.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rag.core.answer_types import Answer
from rag.core.errors import ConfigError
from rag.core.grounding import SupportChecker
from rag.core.sentences import language_of, question_language
from rag.core.text import has_cjk
from rag.core.types import Hit

RANKS = (1, 3, 10)
_REMOVED_NOTE = re.compile(r"\s*\(link removed(?:: [^()]*)?\)")


@dataclass(frozen=True, slots=True)
class Case:
    """One question and what a right retrieval looks like."""

    question: str
    answerable: bool = True
    expected_source: str = ""
    expected_text: str = ""

    def matches(self, hit: Hit) -> bool:
        """Whether the hit is (from) the expected passage."""
        if self.expected_text:
            return _squash(self.expected_text) in _squash(hit.text)
        return hit.source == self.expected_source or hit.source.endswith("/" + self.expected_source)


def _squash(text: str) -> str:
    return "".join(text.split()).lower()


SPLITS = ("tune", "test")


def load_cases(path: Path, split: str | None = None) -> list[Case]:
    """Cases from a JSONL file, all or one half ("tune": thresholds are fitted on it; "test": figures are reported
    on it): a line's "split", else by position (even lines tune, odd lines test). A malformed line is a ConfigError
    naming it."""
    cases = []
    lines = [(number, line) for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
             if line.strip()]
    for position, (number, line) in enumerate(lines):
        try:
            raw = json.loads(line)
            if split is not None and str(raw.get("split") or SPLITS[position % 2]) != split:
                continue
            case = Case(str(raw["question"]), bool(raw.get("answerable", True)), str(raw.get("expected_source", "")),
                        str(raw.get("expected_text", "")))
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{path}:{number}: not a case ({exc})") from exc
        if case.answerable and not (case.expected_source or case.expected_text):
            raise ConfigError(f"{path}:{number}: an answerable case needs expected_source or expected_text")
        cases.append(case)
    return cases


@dataclass
class Report:
    """What `rag eval` prints."""

    cases: int
    answerable: int
    recall: dict[str, float]
    mrr: float
    refusal_precision: float | None
    refusal_recall: float | None
    answerable_kept: float
    latency_ms: dict[str, float]
    suggested_threshold: dict[str, float | None]
    misses: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, object]:
        """The `--json` object."""
        return asdict(self)


def evaluate(cases: Sequence[Case], search: Callable[[str, int], list[Hit]],
             threshold_for: Callable[[str], float], parallel: int = 1) -> Report:
    """Run every question through `search` (top 10) and score ranks, refusals (at each question's threshold) and
    latency; suggest thresholds for English and Chinese questions separately (their scores differ in scale). With
    `parallel` > 1 that many searches run at once (an LLM that translates questions batches them); latencies then
    include the wait for a turn."""
    ranks: list[int | None] = []
    best: list[tuple[float, bool]] = []
    margins: list[tuple[float, bool]] = []
    misses: list[str] = []

    def timed(question: str) -> tuple[list[Hit], float]:
        started = time.perf_counter()
        hits = search(question, max(RANKS))
        return hits, (time.perf_counter() - started) * 1000

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        searched = list(pool.map(timed, [case.question for case in cases]))
    for case, (hits, _) in zip(cases, searched, strict=True):
        top = hits[0].score if hits else 0.0
        best.append((top, case.answerable))
        margins.append((top - threshold_for(case.question), case.answerable))
        if case.answerable:
            rank = next((n for n, hit in enumerate(hits, start=1) if case.matches(hit)), None)
            ranks.append(rank)
            if rank is None or rank > 3:
                misses.append(case.question)
    latencies = [latency for _, latency in searched]
    found = [rank for rank in ranks if rank is not None]
    recall = {f"@{k}": _ratio(sum(rank <= k for rank in found), len(ranks)) for k in RANKS}
    mrr = round(sum(1 / rank for rank in found) / len(ranks), 4) if ranks else 0.0
    precision, refusal_recall, kept = refusal_rates(margins, 0.0)
    languages = ["cjk" if has_cjk(case.question) else "en" for case in cases]
    suggested = {language: suggest_threshold([b for b, lang in zip(best, languages, strict=True) if lang == language])
                 for language in sorted(set(languages))}
    return Report(len(cases), len(ranks), recall, mrr, precision, refusal_recall, kept, percentiles(latencies),
                  suggested, misses)


def refusal_rates(best: Sequence[tuple[float, bool]], threshold: float) -> tuple[float | None, float | None, float]:
    """(refusal precision, refusal recall, share of answerable questions kept) at a threshold."""
    refused_bad = sum(score < threshold for score, answerable in best if not answerable)
    refused_good = sum(score < threshold for score, answerable in best if answerable)
    bad = sum(not answerable for _, answerable in best)
    good = len(best) - bad
    precision = _ratio(refused_bad, refused_bad + refused_good) if refused_bad + refused_good else None
    return precision, _ratio(refused_bad, bad) if bad else None, _ratio(good - refused_good, good) if good else 1.0


def suggest_threshold(best: Sequence[tuple[float, bool]]) -> float | None:
    """The threshold (0.01 steps) with the best balanced accuracy, or None without both kinds of question."""
    if all(answerable for _, answerable in best) or not any(answerable for _, answerable in best):
        return None
    scored = []
    for step in range(101):
        _, refusal_recall, kept = refusal_rates(best, step / 100)
        scored.append(((kept + (refusal_recall or 0.0)) / 2, -step, step / 100))
    return max(scored)[2]


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """p50, p95 and p99 (nearest rank), in the values' unit."""
    ordered = sorted(values)
    if not ordered:
        return {}
    return {f"p{p}": round(ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))], 2) for p in (50, 95, 99)}


def _ratio(part: int, whole: int) -> float:
    return round(part / whole, 4) if whole else 0.0


@dataclass
class AnswerTally:
    """Counts behind the answer metrics of one language."""

    questions: int = 0
    answerable: int = 0
    shown: int = 0  # sentences shown
    shown_supported: int = 0  # of them, supported by an independent re-check against the listed sources
    drafted: int = 0  # sentences the model wrote
    drafted_supported: int = 0
    gold_cited: int = 0
    gold_retrieved: int = 0  # answerable questions whose expected passage was among the sources
    language_ok: int = 0
    answered: int = 0
    extracted: int = 0
    loops: int = 0
    refused_offtopic: int = 0
    refused_answerable: int = 0
    offtopic: int = 0

    def metrics(self) -> dict[str, float | int | None]:
        """The ratios `rag eval --answers` prints."""
        refused = self.refused_offtopic + self.refused_answerable
        return {
            "questions": self.questions, "shown_sentences": self.shown,
            "shown_supported": _share(self.shown_supported, self.shown),
            "draft_grounded": _share(self.drafted_supported, self.drafted),
            "gold_cited": _share(self.gold_cited, self.answerable),
            "gold_cited_when_retrieved": _share(self.gold_cited, self.gold_retrieved),
            "language_match": _share(self.language_ok, self.questions),
            "answered": _share(self.answered, self.answerable),
            "generated": _share(self.questions - self.refused_offtopic - self.refused_answerable - self.extracted,
                                self.questions - self.refused_offtopic - self.refused_answerable),
            "fallback_rate": _share(self.extracted, self.questions - self.refused_offtopic - self.refused_answerable),
            "loops": self.loops,
            "refusal_precision": _share(self.refused_offtopic, refused),
            "refusal_recall": _share(self.refused_offtopic, self.offtopic),
        }


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def tally_answer(tally: AnswerTally, case: Case, answer: Answer, recheck: Callable[[Answer], int]) -> None:
    """Add one answer to its language's tally; `recheck` counts the shown sentences the support check accepts."""
    tally.questions += 1
    shown = answer.shown_sentences
    tally.shown += len(shown)
    tally.shown_supported += recheck(answer)
    model_sentences = [s for s in answer.sentences if s.reason or (s.shown and answer.mode == "generated")]
    tally.drafted += len(model_sentences)
    tally.drafted_supported += sum(s.supported for s in model_sentences)
    tally.language_ok += language_matches(case.question, answer)
    tally.loops += answer.loop
    tally.extracted += answer.mode == "extracted"
    if not case.answerable:
        tally.offtopic += 1
        tally.refused_offtopic += answer.mode == "refused"
        return
    tally.answerable += 1
    tally.answered += answer.mode != "refused"
    tally.refused_answerable += answer.mode == "refused"
    tally.gold_retrieved += any(case.matches(source.hit) for source in answer.sources)
    tally.gold_cited += any(source.cited and case.matches(source.hit) for source in answer.sources)


def language_matches(question: str, answer: Answer) -> bool:
    """Whether the answer speaks the question's language: its own words (refusal, label, generated sentences)
    must; quotes of documents in another language are allowed only when marked as such."""
    wanted = question_language(question)
    own = answer.text.split("\n", 1)[0] if answer.mode == "extracted" else answer.text
    if language_of(own) not in (None, wanted):
        return False
    if answer.mode == "extracted" and answer.fallback != "other_language":
        return all(language_of(s.text) in (None, wanted) for s in answer.shown_sentences)
    return True


def recheck(answer: Answer) -> int:
    """How many shown sentences a fresh support check accepts against the texts of the listed sources."""
    return len(answer.shown_sentences) - len(rejected(answer))


def rejected(answer: Answer) -> list[str]:
    """The shown sentences that a fresh support check rejects against the texts of the listed sources."""
    # The assistant's own notes where sanitising took a link out ("(link removed: host)") are not the model's words;
    # the excerpts are read with their links taken out the same way (a sentence was checked with its link).
    texts = [_REMOVED_NOTE.sub("", answer.links.clean(source.hit.text).text) for source in answer.sources]
    shown = answer.shown_sentences
    verdicts = [SupportChecker(texts, language_of(s.text) or "en").check(_REMOVED_NOTE.sub("", s.text)) for s in shown]
    # A bare "Yes." is shown only on the strength of the supported sentence after it.
    return [s.text for i, (s, v) in enumerate(zip(shown, verdicts, strict=True))
            if not (v.supported or (v.reason == "verdict" and i + 1 < len(verdicts) and verdicts[i + 1].supported))]


def evaluate_answers(cases: Sequence[Case], ask: Callable[[str], Answer],
                     recheck: Callable[[Answer], int] = recheck,
                     seen: Callable[[Case, Answer], None] | None = None,
                     parallel: int = 1) -> dict[str, dict[str, float | int | None]]:
    """Ask every question and report the answer metrics per language ("en", "zh"); `seen` gets each answer.
    With `parallel` > 1 that many questions are in flight at once (the server batches them); tallied in order."""
    tallies: dict[str, AnswerTally] = {}
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        answers = pool.map(ask, [case.question for case in cases])
        for case, answer in zip(cases, answers, strict=True):
            tally = tallies.setdefault(question_language(case.question), AnswerTally())
            tally_answer(tally, case, answer, recheck)
            if seen is not None:
                seen(case, answer)
    return {language: tally.metrics() for language, tally in sorted(tallies.items())}


def answer_record(case: Case, answer: Answer) -> dict[str, object]:
    """One line of `rag eval --answers --dump`: the question, what was shown, and whether the gold was cited."""
    return {"question": case.question, "answerable": case.answerable, "mode": answer.mode,
            "fallback": answer.fallback, "answer": answer.text,
            "gold_cited": any(s.cited and case.matches(s.hit) for s in answer.sources),
            "gold_listed": any(case.matches(s.hit) for s in answer.sources), "rejected_on_recheck": rejected(answer),
            "sources": [f"[{s.n}] {s.hit.source}" + (f" p. {s.hit.page}" if s.hit.page else "")
                        for s in answer.sources]}
