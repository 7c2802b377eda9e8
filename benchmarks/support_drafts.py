"""Dump the model's draft sentences with the excerpts they were written from, for labelling the support check.

    python -m benchmarks.support_drafts CASES.jsonl OUT.jsonl [--every 2 --offset 0]

Runs the real query path (RAG_* settings: the index in RAG_DATA_DIR, the LLM at RAG_LLM_BASE_URL) in `generate`
mode, so every sentence the model writes is judged and kept, shown or not. One JSON line per sentence: the
question, the retrieved excerpts (numbered from 1), the sentence and today's verdict. `label` is left empty for a
person to fill ("supported" / "unsupported"); rag.core.grounding is calibrated on the labelled file.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rag.config import load_settings
from rag.core.access import LOCAL_OPERATOR
from rag.tools.evaluate import load_cases
from rag.wiring import build_engine


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("cases", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--every", type=int, default=1, help="take every n-th case")
    parser.add_argument("--offset", type=int, default=0, help="starting at this one")
    args = parser.parse_args(argv)
    settings = load_settings().model_copy(update={"answer_mode": "generate"})
    engine = build_engine(settings)
    cases = [case for case in load_cases(args.cases) if case.answerable][args.offset::args.every]
    with args.out.open("a", encoding="utf-8") as out:
        for case in cases:
            answer = engine.ask(case.question, principal=LOCAL_OPERATOR)
            excerpts = [source.hit.text for source in answer.sources]
            for sentence in answer.sentences:
                row = {"question": case.question, "excerpts": excerpts, "sentence": sentence.text,
                       "check": sentence.supported, "reason": sentence.reason, "label": ""}
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
            out.flush()
            print(f"{len(answer.sentences)} sentences: {case.question}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
