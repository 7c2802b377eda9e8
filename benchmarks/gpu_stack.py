"""The whole stack on one GPU: vLLM (ERNIE-4.5-0.3B-shaped, fp8 + prefix caching), a Chroma server holding an index
ingested on the GPU, N `rag serve` workers, and a multi-process load generator. The highest request rate that holds
TTFT p99 <= 1 s, bare vLLM against the same requests through /v1/ask.

    python -m benchmarks.gpu_stack --tokenizer DIR --out results.json [--workers 1,2,4,8]   # on the GPU host
    python -m benchmarks.gpu_stack --model QWEN_DIR --out results.json --workers 1,2,4      # a real model's weights
    python -m benchmarks.gpu_stack --quick        # anywhere, in seconds: a fake LLM, a few files, CPU
    python -m benchmarks.gpu_stack --report results.json

- vLLM as benchmarks/gpu_serving.py starts it (profile `fp8`: fp8 weights, prefix caching, random weights by
  `--load-format dummy`), or with `--model` a real model's weights (the offline default LLM, which
  benchmarks/gpu_carry.sh carries as its GGUF with QWEN_GGUF=...; its answers are then written and checked as in
  production). Its stand-in tokenizer (SmolLM2's, 49,152 entries) is padded to ERNIE's 103,424 with
  entries no prompt can produce, each decoding to a word (every 8th ends a sentence): a random model emits any id,
  and an id without text would stream nothing, which the API cannot tell from a stalled model.
- Index: python3.11-doc ingested by `rag-ingest` on the GPU (RAG_PARSE_WORKERS, RAG_INGEST_WRITERS as measured by
  benchmarks/gpu_ingest.py) into a `chroma run` server; the workers read it (RAG_CHROMA_URL) and share the keyword
  index file. Questions: the Python FAQ dev set, those whose retrieval finds excerpts (the others never reach the
  LLM).
- Bare vLLM gets exactly what the API would send for each question: our prompt builder's messages with the excerpts
  our retriever finds, RAG_MAX_ANSWER_TOKENS, temperature 0, repetition penalty, streaming. `--bare-tokens 256,19`
  adds an anchor capped at 19 tokens: what the API let a random model write before its loop guard stopped it.
- TTFT, bare: from sending the request to the first streamed chunk with text. TTFT, API: from sending POST /v1/ask
  (stream=true) to its first `token` event: the first checked text a user sees (retrieval, prompt, the model's
  first sentence and its grounding check, or the quotes that replace it, are inside it). With random weights the
  model's sentences are never supported, so the API stops generating after the first and streams quoted excerpts.
- Load: rate x DURATION requests at Poisson arrivals, for each rate of a ladder, spread over CLIENTS processes
  (asyncio + httpx streaming in each); a rate holds when TTFT p99 <= 1 s, no request failed and the clients sent
  on schedule (p99 lag <= 100 ms: a late client offers less than the rate).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.app_cost import cpu_seconds  # noqa: E402
from benchmarks.common import python_docs  # noqa: E402
from benchmarks.gpu_ingest import chroma_server, free_port, ingest_process, sample, wait_http  # noqa: E402
from benchmarks.gpu_serving import BASE_FLAGS, PROFILES, SERVED, server_facts, write_model  # noqa: E402
from rag.components.models import BUNDLED_EMBED_MODEL  # noqa: E402

DUMMY_WEIGHTS = ("--load-format", "dummy")

SLO_MS = 1000.0
# vLLM server variants one run compares on one host, one after the other (rows labelled "bare+NAME", "api-4+NAME";
# the first variant's rows are unlabelled). "ngram": prompt-lookup speculation, the next tokens proposed from the
# prompt, which a grounded answer copies (on the GPU: the CPU proposer needs numba, which the GPU image lacks);
# "mbt2048": shorter engine steps (vLLM's default on this GPU is 8192 tokens a step), so a decode waits less behind
# other requests' prefills. Both aim at what the API's first text waits for: the model's whole first sentence.
VARIANTS: dict[str, list[str]] = {
    "default": [],
    "ngram": ["--speculative-config", json.dumps({"method": "ngram_gpu", "num_speculative_tokens": 4,
                                                  "prompt_lookup_max": 4, "prompt_lookup_min": 2},
                                                 separators=(",", ":"))],
    "mbt2048": ["--max-num-batched-tokens", "2048"],
}
RATES = [16.0, 32.0, 48.0, 64.0, 96.0, 128.0, 160.0, 200.0, 256.0, 320.0]
INDEX_SETTINGS = {"RAG_PARSE_WORKERS": "8", "RAG_INGEST_WRITERS": "4", "RAG_EMBED_BATCH_SIZE": "256"}
ERNIE_VOCAB = 103_424


def pad_tokenizer(folder: Path, size: int = ERNIE_VOCAB) -> int:
    """Grow a byte-level BPE tokenizer.json to `size` entries: the new ones have no merges (no text ever encodes to
    them) and decode to " z<id>" (" z<id>." for every 8th id). Returns the entries added."""
    path = folder / "tokenizer.json"
    spec = json.loads(path.read_text())
    vocab = spec["model"]["vocab"]
    taken = set(vocab.values()) | {token["id"] for token in spec.get("added_tokens", [])}
    added = 0
    for token_id in range(size):
        if token_id not in taken:
            vocab[f"\u0120z{token_id}" + ("." if token_id % 8 == 0 else "")] = token_id
            added += 1
    path.write_text(json.dumps(spec, ensure_ascii=False))
    return added


@contextmanager
def process(command: list[str], log: Path, env: dict[str, str], health: str) -> Iterator[subprocess.Popen[bytes]]:
    """A server process for the block, once `health` answers; terminated (then killed) after."""
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **env}, cwd=REPO)
    try:
        wait_http(health, proc, log, seconds=900)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def spawn_workers(stack: ExitStack, count: int, env: dict[str, str], logs: Path) -> list[tuple[str, Any, Path]]:
    """`rag serve --no-chat` workers on loopback (no keys needed there), each its own process and port, started
    together (their imports and model loads overlap each other and vLLM's start); stopped when the stack closes."""
    workers = []
    for n in range(count):
        port, log = free_port(), logs / f"worker-{n}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-c", "from ui.cli import main; main()", "serve", "--no-chat", "--port", str(port)],
                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **env}, cwd=REPO)
        stack.callback(_stop, proc)
        workers.append((f"http://127.0.0.1:{port}", proc, log))
    return workers


def ready(workers: list[tuple[str, Any, Path]]) -> list[str]:
    """The workers' URLs once each answers /healthz."""
    for url, proc, log in workers:
        wait_http(f"{url}/healthz", proc, log, seconds=300)
    return [url for url, _, _ in workers]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def questions_with_excerpts(settings_env: dict[str, str], limit: int) -> list[tuple[str, list[dict[str, Any]]]]:
    """(question, the messages /v1/ask would send to the LLM) for dev-set questions whose retrieval finds excerpts."""
    from rag.config import Settings
    from rag.core.access import LOCAL_OPERATOR
    from rag.core.answer import relevant, unmentioned
    from rag.core.prompt import answer_messages
    from rag.tools.evaluate import load_cases
    from rag.wiring import build_retriever

    chosen: dict[str, Any] = {k[4:].lower(): v for k, v in settings_env.items() if k.startswith("RAG_")}
    settings = Settings(_env_file=None, **chosen)  # type: ignore[call-arg]
    retriever = build_retriever(settings)
    threshold = settings.tuning.refusal_threshold
    found = []
    for case in load_cases(REPO / "data" / "eval" / "python-faq" / "questions.jsonl"):
        hits = relevant(retriever.search(case.question, settings.top_k, LOCAL_OPERATOR), threshold)
        if hits and not unmentioned(case.question, hits):
            found.append((case.question, [dict(m) for m in answer_messages(case.question, hits)]))
        if len(found) >= limit:
            break
    return found


def bare_body(messages: list[dict[str, Any]], model: str, max_tokens: int, penalty: float) -> dict[str, Any]:
    """The chat request rag.components.llm.LLM sends for an answer."""
    return {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0.0, "stream": True,
            "repetition_penalty": penalty,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}


async def one_bare(client: Any, url: str, body: dict[str, Any]) -> dict[str, Any]:
    """One streamed chat completion: status, first text, first complete sentence, end, completion tokens."""
    from rag.core.sentences import SentenceBuffer

    sent, first, sentence, tokens, status = time.perf_counter(), None, None, 0, 0
    buffer = SentenceBuffer()
    try:
        async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
            status = response.status_code
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                text = chunk["choices"][0]["delta"].get("content") if chunk.get("choices") else None
                if text:
                    first = first or time.perf_counter()
                    # The API's unit: the query path shows nothing before a whole sentence is written and checked.
                    if sentence is None and buffer.feed(text):
                        sentence = time.perf_counter()
                if chunk.get("usage"):
                    tokens = chunk["usage"]["completion_tokens"]
    except Exception as exc:  # counted as a failure, never fatal to the cell
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:200], "sent": sent}
    end = time.perf_counter()
    # A real model may end at once (an empty answer): that is an answer, its first text is its end; a last
    # sentence without a following word is complete at the end.
    return {"ok": status == 200, "status": status, "sent": sent, "first": first or end, "sentence": sentence or end,
            "end": end, "tokens": tokens}


async def one_ask(client: Any, url: str, question: str) -> dict[str, Any]:
    """One POST /v1/ask with stream=true: status, the first `token` event, end, the answer's outcome and usage."""
    sent, first, event, done, status = time.perf_counter(), None, "", None, 0
    try:
        async with client.stream("POST", f"{url}/v1/ask", json={"question": question, "stream": True}) as response:
            status = response.status_code
            async for line in response.aiter_lines():
                if line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:"):
                    if event == "token" and first is None:
                        first = time.perf_counter()
                    elif event in ("done", "error"):
                        done = json.loads(line[5:])
    except Exception as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:200], "sent": sent}
    answer = done or {}
    return {"ok": status == 200 and first is not None and "error" not in answer, "status": status, "sent": sent,
            "first": first, "end": time.perf_counter(), "tokens": answer.get("usage", {}).get("completion_tokens"),
            "mode": answer.get("mode"), "fallback": answer.get("fallback"), "timings": answer.get("timings")}


def samples(llm_url: str, worker: str, model: str, asked: list[tuple[str, list[dict[str, Any]]]],
            penalty: float) -> list[Any]:
    """What the model and the API answer to a few questions, printed and kept: a run's answers can be read."""
    import httpx

    kept = []
    for question, messages in asked:
        text = []
        body = bare_body(messages, model, 256, penalty)
        with httpx.stream("POST", f"{llm_url}/v1/chat/completions", json=body, timeout=120) as response:
            for line in response.iter_lines():
                if line.startswith("data: {"):
                    text += [c["delta"].get("content") or "" for c in json.loads(line[6:]).get("choices", [])]
        ask = httpx.post(f"{worker}/v1/ask", json={"question": question}, timeout=120).json()
        kept.append({"question": question, "bare": "".join(text),
                     "answer": ask.get("answer"), "mode": ask.get("mode"), "fallback": ask.get("fallback"),
                     "withheld": ask.get("withheld")})
        print(json.dumps(kept[-1], ensure_ascii=False), flush=True)
    return kept


async def drive(kind: str, urls: list[str], payloads: list[Any], rate: float, duration: float, seed: int,
                start_at: float) -> list[dict[str, Any]]:
    """rate x duration requests at Poisson arrivals from wall-clock `start_at`, round robin over urls; each result
    records how late it was sent against its schedule (a late client would offer less than the rate)."""
    import httpx

    rng = random.Random(seed)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(timeout=httpx.Timeout(300, connect=20), limits=limits) as client:
        await asyncio.sleep(max(0.0, start_at - time.time()))
        began, at, tasks = time.perf_counter(), 0.0, []
        for n in range(seed, seed + max(1, round(rate * duration))):
            at += rng.expovariate(rate)
            await asyncio.sleep(max(0.0, began + at - time.perf_counter()))
            lag = time.perf_counter() - began - at
            url, payload = urls[n % len(urls)], payloads[n % len(payloads)]
            tasks.append(asyncio.create_task(one_bare(client, url, payload) if kind == "bare"
                                             else one_ask(client, url, payload)))
            tasks[-1].add_done_callback(partial(_note_lag, lag=lag))
        return list(await asyncio.gather(*tasks))


def _note_lag(task: asyncio.Task[dict[str, Any]], lag: float) -> None:
    task.result()["lag"] = lag


def client_process(kind: str, urls: list[str], payloads: list[Any], rate: float, duration: float, seed: int,
                   start_at: float) -> list[dict[str, Any]]:
    """One load-generator process (its own event loop and connections)."""
    return asyncio.run(drive(kind, urls, payloads, rate, duration, seed, start_at))


def cell(pool: Any, clients: int, kind: str, urls: list[str], payloads: list[Any], rate: float,
         duration: float, pids: Sequence[int] = ()) -> dict[str, Any]:
    """One rate: `clients` processes share it (Poisson streams add up to one); TTFT percentiles, throughput, and
    the CPU the `pids` (the workers) spent per answer."""
    start_at = time.time() + 0.5
    jobs = [(kind, urls, payloads, rate / clients, duration, 7919 * c + int(rate), start_at) for c in range(clients)]
    before = cpu_seconds(list(pids))
    results = [r for part in pool.starmap(client_process, jobs) for r in part]
    row = summarize(kind, rate, results, duration)
    answers = sum(r["ok"] for r in results)
    if pids and answers:
        row["worker_cpu_ms_per_answer"] = round((cpu_seconds(list(pids)) - before) * 1000 / answers, 1)
    return row


def summarize(kind: str, rate: float, results: list[dict[str, Any]], duration: float) -> dict[str, Any]:
    """TTFT p50/p99 (ms), throughput (answers over first send to last end), send lag p99, failures, tokens."""
    good = [r for r in results if r["ok"]]
    ttft = sorted((r["first"] - r["sent"]) * 1000 for r in good)
    tokens = [r["tokens"] for r in good if r.get("tokens") is not None]
    modes: dict[str, int] = {}
    for r in good:
        if r.get("mode"):
            key = f"{r['mode']}:{r.get('fallback') or ''}"
            modes[key] = modes.get(key, 0) + 1
    errors = [r.get("error") or f"status {r.get('status')}" for r in results if not r["ok"]]
    span = max((r["end"] for r in good), default=0.0) - min((r["sent"] for r in results), default=0.0)
    row = {"kind": kind, "rate": rate, "requests": len(results), "failed": len(errors), "errors": errors[:3],
           "achieved_rps": round(len(good) / span, 1) if span > 0 else 0.0, "ttft_p50_ms": _pct(ttft, 50),
           "ttft_p99_ms": _pct(ttft, 99), "lag_p99_ms": _pct(sorted(r.get("lag", 0.0) * 1000 for r in results), 99),
           "tokens_mean": round(statistics.mean(tokens), 1) if tokens else None, "modes": modes}
    if kind == "bare":
        ttfs = sorted((r.get("sentence", r["first"]) - r["sent"]) * 1000 for r in good)
        return row | {"ttfs_p50_ms": _pct(ttfs, 50), "ttfs_p99_ms": _pct(ttfs, 99)}
    return row | {"by_mode": by_mode(good), "server_ms": server_split(good)}


def by_mode(good: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """TTFT p50/p99 per outcome (generated, extracted, refused): a quoted answer's first text waits for the
    model's whole unsupported draft, a written one's for its first checked sentence."""
    modes: dict[str, list[float]] = {}
    for r in good:
        modes.setdefault(r.get("mode") or "-", []).append((r["first"] - r["sent"]) * 1000)
    return {mode: {"n": len(ms), "ttft_p50_ms": _pct(sorted(ms), 50), "ttft_p99_ms": _pct(sorted(ms), 99)}
            for mode, ms in sorted(modes.items())}


def server_split(good: list[dict[str, Any]]) -> dict[str, Any]:
    """Where the API's TTFT goes, p50/p99 ms: the answer's own timings (from the engine's start: retrieval, the
    model's first token, the first checked text) and the rest of the client's TTFT (HTTP, the wait for a thread
    and for the GIL before the engine starts, the event's way back)."""
    split: dict[str, list[float]] = {"retrieve": [], "draft_first": [], "shown_first": [], "outside": []}
    for r in good:
        timings = r.get("timings") or {}
        if timings.get("first_token_ms") is None:
            continue
        split["retrieve"].append(timings["retrieve_ms"])
        split["draft_first"] += [timings["draft_first_token_ms"]] if timings.get("draft_first_token_ms") else []
        split["shown_first"].append(timings["first_token_ms"])
        split["outside"].append((r["first"] - r["sent"]) * 1000 - timings["first_token_ms"])
    return {name: [_pct(sorted(ms), 50), _pct(sorted(ms), 99)] for name, ms in split.items() if ms}


def _pct(values: list[float], p: int) -> float | None:
    return round(values[min(len(values) - 1, int(len(values) * p / 100))], 1) if values else None


def holds(row: dict[str, Any], key: str = "ttft_p99_ms") -> bool:
    """TTFT p99 (or another p99: `key`) within the SLO, nothing failed, and the clients kept to the schedule (send
    lag p99 <= 100 ms)."""
    return (row["failed"] == 0 and row.get(key) is not None and row[key] <= SLO_MS
            and (row.get("lag_p99_ms") or 0.0) <= 100.0)


def ladder(pool: Any, clients: int, kind: str, label: str, urls: list[str], payloads: list[Any], rates: list[float],
           duration: float, pids: Sequence[int] = ()) -> list[dict[str, Any]]:
    """Rates in increasing order until one does not hold (it is kept, as the first miss)."""
    rows = []
    for rate in rates:
        rows.append({"config": label, **cell(pool, clients, kind, urls, payloads, rate, duration, pids)})
        print(json.dumps(rows[-1]), flush=True)
        if not holds(rows[-1]):
            break
    return rows


def best(rows: list[dict[str, Any]], label: str, key: str = "ttft_p99_ms") -> float:
    """The highest rate that held for a config (0 when none did)."""
    return max((r["rate"] for r in rows if r["config"] == label and holds(r, key)), default=0.0)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Index, LLM, workers, then the ladders: bare vLLM, then /v1/ask through 1..N workers."""
    scratch = Path(tempfile.mkdtemp(prefix="gpu-stack-"))
    logs = Path(args.logs or scratch)
    logs.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(), "slo_ms": SLO_MS,
                              "clients": args.clients, "duration_s": args.duration, "rows": []}
    try:
        with ExitStack() as stack, multiprocessing.get_context("spawn").Pool(args.clients) as pool:
            docs = Path(args.docs) if args.docs else python_docs(["faq" if args.quick else "all"], scratch / "docs")
            if args.quick:
                docs = sample(docs, scratch / "sample", 8)
            url = stack.enter_context(chroma_server(scratch / "chroma"))
            # MiniLM alone: the model that travels (the default pair's e5 half does not), as on 2026-12-01.
            env = {"RAG_CHROMA_URL": url, "RAG_DATA_DIR": str(scratch / "data"), "RAG_EMBED_DEVICE": "cpu",
                   "RAG_EMBED_MODEL": BUNDLED_EMBED_MODEL}
            indexed = ingest_process(docs, {**env, **INDEX_SETTINGS, "RAG_EMBED_DEVICE": args.ingest_device},
                                     scratch / "data")
            result["index"] = indexed["report"] | {"wall_s": indexed["wall_s"]}
            port, model = free_port(), "fake" if args.quick else SERVED
            env |= {"RAG_LLM_BASE_URL": f"http://127.0.0.1:{port}/v1", "RAG_LLM_MODEL": model,
                    "RAG_MAX_CONCURRENT_GENERATIONS": "256", "OMP_NUM_THREADS": str(args.omp_threads)}
            spawned = spawn_workers(stack, max(args.workers), env, logs)
            llm = stack.enter_context(ExitStack())  # one vLLM at a time: each variant's replaces the last
            llm_url = llm.enter_context(llm_server(args, port, scratch, logs, result, args.variants[0]))
            workers = ready(spawned)
            asked = questions_with_excerpts(env, args.questions)
            if not asked:
                raise RuntimeError("no dev-set question finds excerpts in this index: nothing would reach the LLM")
            result["questions"] = len(asked)
            from rag.config import Settings

            defaults = Settings(_env_file=None)  # type: ignore[call-arg]
            result["samples"] = samples(llm_url, workers[0], model, asked[:args.samples],
                                        defaults.llm_repetition_penalty)
            if args.samples_only:
                return result
            for number, variant in enumerate(args.variants):
                if number:
                    llm.close()
                    try:
                        llm_url = llm.enter_context(llm_server(args, port, scratch, logs, result, variant))
                    except RuntimeError as exc:  # this vLLM refused the variant's flags: the others still count
                        result.setdefault("variant_errors", {})[variant] = str(exc)[-2000:]
                        continue
                suffix = f"+{variant}" if number else ""
                result["rows"] += ladders(args, pool, llm_url, model, asked, workers, spawned, suffix, result)
            result["gpu_memory_mib"] = _gpu_memory()
    finally:
        _save(args, result)
        shutil.rmtree(scratch, ignore_errors=True)
    return result


def ladders(args: argparse.Namespace, pool: Any, llm_url: str, model: str, asked: list[tuple[str, Any]],
            workers: list[str], spawned: list[tuple[str, Any, Path]], suffix: str,
            result: dict[str, Any]) -> list[dict[str, Any]]:
    """Bare vLLM's ladder (each anchor), then /v1/ask's through each worker count, on the running vLLM."""
    from rag.config import Settings

    defaults = Settings(_env_file=None)  # type: ignore[call-arg]
    rows: list[dict[str, Any]] = []
    for n, tokens in enumerate(args.bare_tokens or [defaults.max_answer_tokens]):
        # Each anchor: the API's requests with this many output tokens at most (the default: what the API asks
        # for; a small one: what the API's early stop lets the model write).
        bodies = [bare_body(m, model, tokens, defaults.llm_repetition_penalty) for _, m in asked]
        label = ("bare" if n == 0 else f"bare-{tokens}") + suffix
        if n == 0:
            ladder(pool, args.clients, "bare", label, [llm_url], bodies, args.rates[:2], 2.0)  # warm-up
        rows += ladder(pool, args.clients, "bare", label, [llm_url], bodies, args.rates, args.duration)
    questions = [q for q, _ in asked]
    for n in args.workers:
        pids = [proc.pid for _, proc, _ in spawned[:n]]
        rows += ladder(pool, args.clients, "ask", f"api-{n}{suffix}", workers[:n], questions, args.rates,
                       args.duration, pids)
        _save(args, result | {"rows": result["rows"] + rows})
    return rows


def _save(args: argparse.Namespace, result: dict[str, Any]) -> None:
    """The best rates and the ratios to bare vLLM on the same server variant, by TTFT and by the bare time to the
    first whole sentence (what the API waits for before it can check and show anything)."""
    rows = result["rows"]
    labels = dict.fromkeys(row["config"] for row in rows)
    result["best"] = {label: best(rows, label) for label in labels}
    result["best_bare_sentence"] = {label: best(rows, label, "ttfs_p99_ms") for label in labels
                                    if label.startswith("bare")}
    result["ratio_to_bare"], result["ratio_to_bare_sentence"] = {}, {}
    for label, rate in result["best"].items():
        bare = "bare" + label.partition("+")[1] + label.partition("+")[2]
        if label.startswith("api") and result["best"].get(bare):
            result["ratio_to_bare"][label] = round(rate / result["best"][bare], 3)
        if label.startswith("api") and result["best_bare_sentence"].get(bare):
            result["ratio_to_bare_sentence"][label] = round(rate / result["best_bare_sentence"][bare], 3)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))


@contextmanager
def llm_server(args: argparse.Namespace, port: int, scratch: Path, logs: Path, result: dict[str, Any],
               variant: str = "default") -> Iterator[str]:
    """vLLM with the fp8 production profile on the ERNIE-shaped model (and a VARIANTS entry's flags), or (quick)
    the fake LLM: its URL."""
    name = "" if variant == args.variants[0] else f"-{variant}"  # the log's name
    if args.quick:
        command = [sys.executable, "-m", "benchmarks.gpu_stack", "--fake-llm", str(port)]
        with process(command, logs / f"fake-llm{name}.log", {}, f"http://127.0.0.1:{port}/health"):
            result.setdefault("vllm_variants", {})[variant] = {"flags": VARIANTS[variant]}
            yield f"http://127.0.0.1:{port}"
        return

    if args.model:  # a real model's weights: its answers are written, checked and streamed as in production
        model, flags = Path(args.model), [flag for flag in BASE_FLAGS if flag not in DUMMY_WEIGHTS]
        if args.model_config:  # a GGUF: its tokenizer and config from a folder beside it
            flags += ["--tokenizer", args.model_config, "--hf-config-path", args.model_config]
        result["model"] = model.name
    else:
        model, flags = scratch / "ernie-4.5-0.3b-shaped", BASE_FLAGS
        write_model(model, Path(args.tokenizer))
        result["tokenizer_padded"] = pad_tokenizer(model)
    # fp8 weights and prefix caching, the production profile; a GGUF keeps its own quantization (Q4_K_M).
    profile = ["--enable-prefix-caching"] if model.suffix == ".gguf" else PROFILES[args.profile]
    command = [args.python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--served-model-name",
               SERVED, "--host", "127.0.0.1", "--port", str(port), *flags, *profile,
               "--stream-interval", str(args.stream_interval), *args.vllm_flags.split(), *VARIANTS[variant]]
    started = time.perf_counter()
    log = logs / f"vllm{name}.log"
    with process(command, log, {}, f"http://127.0.0.1:{port}/health"):
        facts = {**server_facts(log), "start_s": round(time.perf_counter() - started, 1), "flags": command[8:]}
        result.setdefault("vllm_variants", {})[variant] = facts
        result.setdefault("vllm", facts)
        yield f"http://127.0.0.1:{port}"


def _gpu_memory() -> str | None:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.used", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20).stdout.strip() or None
    except OSError:
        return None


def fake_llm(port: int) -> None:
    """An OpenAI-compatible streaming server for --quick: answers with the first excerpt's opening words, a token
    every millisecond (grounded, so the API streams the model's own sentences)."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    async def chat(request: Request) -> StreamingResponse:
        body = await request.json()
        text = body["messages"][-1]["content"].split("\n\n")[1]
        words = " ".join(text.split()[2:40]).split(" ")

        async def events() -> Any:
            for n, word in enumerate(words):
                await asyncio.sleep(0.001)
                usage = {"prompt_tokens": 100, "completion_tokens": n + 1, "total_tokens": n + 101}
                chunk = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "fake",
                         "choices": [{"index": 0, "delta": {"content": (" " if n else "") + word},
                                      "finish_reason": None}], "usage": usage}
                yield f"data: {json.dumps(chunk)}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/health", lambda r: JSONResponse({})),
                            Route("/v1/models", lambda r: JSONResponse({"data": [{"id": "fake"}]})),
                            Route("/v1/chat/completions", chat, methods=["POST"])])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def report(paths: list[Path]) -> None:
    """Per config: each rate's TTFT and achieved rate; the best rate holding the SLO and its ratio to bare vLLM."""
    for path in paths:
        result = json.loads(path.read_text())
        print(f"{result['date']} · {result.get('gpu_memory_mib') or 'CPU'} · {result['cpus']} CPUs · vLLM "
              f"{result.get('vllm', {}).get('vllm', '-')} · {result['clients']} client processes · "
              f"{result['duration_s']} s a cell · {result['questions']} questions\n")
        print("| config | offered req/s | answers/s | TTFT p50 ms | TTFT p99 ms | bare: first sentence p50 / p99 ms | "
              "send lag p99 ms | failed | output tokens | holds |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in result["rows"]:
            sentence = f"{r['ttfs_p50_ms']} / {r['ttfs_p99_ms']}" if "ttfs_p99_ms" in r else "–"
            print(f"| {r['config']} | {r['rate']:g} | {r['achieved_rps']} | {r['ttft_p50_ms']} | {r['ttft_p99_ms']} | "
                  f"{sentence} | {r['lag_p99_ms']} | {r['failed']} | {r['tokens_mean']} | "
                  f"{'yes' if holds(r) else 'no'} |")
        for r in result["rows"]:
            if r.get("by_mode"):
                modes = ", ".join(f"{mode} {m['n']} at {m['ttft_p50_ms']} / {m['ttft_p99_ms']}"
                                  for mode, m in r["by_mode"].items())
                split = ", ".join(f"{name} {ms[0]} / {ms[1]}" for name, ms in r["server_ms"].items())
                print(f"\n{r['config']} at {r['rate']:g}: TTFT p50 / p99 ms by outcome: {modes}; in the server "
                      f"(p50 / p99 ms): {split}; workers' CPU {r.get('worker_cpu_ms_per_answer')} ms per answer")
        print("\nbest rate holding TTFT p99 <= 1 s: " + ", ".join(f"{k} {v:g}" for k, v in result["best"].items()) +
              "; ratio to bare: " + ", ".join(f"{k} {v}" for k, v in result["ratio_to_bare"].items()))
        if result.get("best_bare_sentence"):
            print("bare vLLM holding its first whole sentence's p99 <= 1 s: " +
                  ", ".join(f"{k} {v:g}" for k, v in result["best_bare_sentence"].items()) + "; ratio to it: " +
                  ", ".join(f"{k} {v}" for k, v in result.get("ratio_to_bare_sentence", {}).items()))
        for variant, error in result.get("variant_errors", {}).items():
            print(f"variant {variant} did not start: {error[-300:]}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fake LLM, a few files, CPU: a smoke test in seconds")
    parser.add_argument("--tokenizer", help="a tokenizer folder with a chat template (vocabulary < 103,424)")
    parser.add_argument("--model", help="serve this model folder's real weights (e.g. the offline default LLM, "
                        "scripts/convert_gguf.py) instead of the ERNIE-shaped random ones")
    parser.add_argument("--profile", default="fp8", choices=sorted(PROFILES), help="vLLM's profile (gpu_serving)")
    parser.add_argument("--model-config", help="with a GGUF --model: the folder of its tokenizer and config")
    parser.add_argument("--docs", help="the folder to ingest (default: python3.11-doc, fetched into data/cache)")
    parser.add_argument("--workers", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 4, 8])
    parser.add_argument("--rates", type=lambda s: [float(x) for x in s.split(",")], default=RATES)
    parser.add_argument("--duration", type=float, default=6.0, help="seconds of arrivals per cell")
    parser.add_argument("--clients", type=int, default=max(2, (os.cpu_count() or 2) // 3))
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--bare-tokens", type=lambda s: [int(x) for x in s.split(",")], default=None,
                        help="max_tokens of the bare anchors (first: `bare`; default RAG_MAX_ANSWER_TOKENS)")
    parser.add_argument("--samples", type=int, default=4, help="answers printed before the load, bare and API")
    parser.add_argument("--stream-interval", type=int, default=4, help="vLLM's tokens per chunk, as deployed")
    parser.add_argument("--vllm-flags", default="", help="more vLLM flags (e.g. --enforce-eager: a quick start)")
    parser.add_argument("--variants", type=lambda s: s.split(","), default=["default"],
                        help=f"vLLM server variants, one after the other on this host: {', '.join(VARIANTS)}")
    parser.add_argument("--samples-only", action="store_true", help="stop after the samples (no load)")
    parser.add_argument("--omp-threads", type=int, default=2, help="OMP_NUM_THREADS of each worker")
    parser.add_argument("--ingest-device", default="cuda")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that has vLLM")
    parser.add_argument("--logs", default=os.environ.get("OUT"))
    parser.add_argument("--out", help="write the results here (JSON)")
    parser.add_argument("--report", nargs="+", type=Path)
    parser.add_argument("--fake-llm", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.fake_llm:
        fake_llm(args.fake_llm)
        return
    if args.report:
        report(args.report)
        return
    if unknown := [v for v in args.variants if v not in VARIANTS]:
        parser.error(f"unknown --variants {', '.join(unknown)}: choose from {', '.join(VARIANTS)}")
    if args.quick:
        args.workers, args.rates, args.duration, args.clients = [1], [4.0, 8.0], 1.0, 2
        args.questions, args.ingest_device = 4, "cpu"
    if not args.quick and not args.tokenizer and not args.model:
        parser.error("--tokenizer is needed to serve the ERNIE-shaped model (or --model, a real one)")
    run(args)
    if args.out:
        report([Path(args.out)])


if __name__ == "__main__":
    main()
