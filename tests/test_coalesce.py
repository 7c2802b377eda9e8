"""rag.components.coalesce: calls that arrive together from many threads run as one batch, each gets its own
result, an error reaches every call of its batch, and a lone call never waits."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from rag.components.coalesce import Coalescer


class Doubler:
    """Doubles numbers a batch at a time; the first batch blocks until released (so others queue behind it)."""

    def __init__(self, fail_on: int | None = None) -> None:
        self.batches: list[list[int]] = []
        self.started, self.release = threading.Event(), threading.Event()
        self.fail_on = fail_on

    def __call__(self, items: list[int]) -> list[int]:
        self.batches.append(items)
        if len(self.batches) == 1:
            self.started.set()
            assert self.release.wait(10)
        if self.fail_on in items:
            raise ValueError(f"cannot double {self.fail_on}")
        return [2 * item for item in items]


def _queued_behind_a_running_batch(doubler: Doubler, coalescer: Coalescer[int, int], items: list[int],
                                   pool: ThreadPoolExecutor) -> list[object]:
    """Run call 0 (it blocks in the model), queue `items` behind it, release it; each call's result or error."""
    def call(item: int) -> object:
        try:
            return coalescer(item)
        except ValueError as exc:
            return exc

    first = pool.submit(call, 0)
    assert doubler.started.wait(10)
    rest = [pool.submit(call, item) for item in items]
    while len(coalescer._waiting) < len(items):  # every call queued before the release
        threading.Event().wait(0.005)
    doubler.release.set()
    return [first.result(10), *(future.result(10) for future in rest)]


def test_a_lone_call_runs_at_once_alone() -> None:
    doubler = Doubler()
    doubler.release.set()
    coalescer = Coalescer(doubler)
    assert [coalescer(3), coalescer(4)] == [6, 8]
    assert doubler.batches == [[3], [4]]


def test_calls_arriving_during_a_batch_go_together_in_the_next_each_with_its_result() -> None:
    doubler = Doubler()
    coalescer = Coalescer(doubler)
    with ThreadPoolExecutor(8) as pool:
        results = _queued_behind_a_running_batch(doubler, coalescer, [1, 2, 3, 4, 5], pool)
    assert results == [0, 2, 4, 6, 8, 10]
    assert doubler.batches[0] == [0] and sorted(doubler.batches[1]) == [1, 2, 3, 4, 5]
    assert coalescer.batches == 2


def test_batches_hold_at_most_most_items() -> None:
    doubler = Doubler()
    coalescer = Coalescer(doubler, most=2)
    with ThreadPoolExecutor(8) as pool:
        results = _queued_behind_a_running_batch(doubler, coalescer, [1, 2, 3, 4, 5], pool)
    assert results == [0, 2, 4, 6, 8, 10]
    assert [len(batch) for batch in doubler.batches] == [1, 2, 2, 1]


def test_an_error_reaches_every_call_of_its_batch_and_the_next_call_still_runs() -> None:
    doubler = Doubler(fail_on=2)
    coalescer = Coalescer(doubler)
    with ThreadPoolExecutor(8) as pool:
        results = _queued_behind_a_running_batch(doubler, coalescer, [1, 2, 3], pool)
    assert results[0] == 0 and all(isinstance(result, ValueError) for result in results[1:])
    assert coalescer(7) == 14
    with pytest.raises(ValueError, match="cannot double 2"):
        coalescer(2)


def test_the_last_results_are_remembered_and_the_oldest_forgotten() -> None:
    doubler = Doubler()
    doubler.release.set()
    coalescer = Coalescer(doubler, remember=2)
    assert [coalescer(1), coalescer(2), coalescer(1), coalescer(3), coalescer(2)] == [2, 4, 2, 6, 4]
    assert doubler.batches == [[1], [2], [3], [2]]  # 1 came back from memory; 2 was forgotten when 3 came
