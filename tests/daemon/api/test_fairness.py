"""daemon/api/fairness.py: each caller's share of the threads, the turn order, and 429 past the queue.

The scheduler runs on a real event loop with real threads; the work is a wait
on an event the test releases, so the order of starts is what is observed.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from daemon.api.fairness import Busy, Courtesy, FairScheduler


def _scheduler(threads: int = 2, running: int = 1, queued: int = 3) -> FairScheduler:
    return FairScheduler(threads, lambda caller: running, queued)


async def _started(scheduler: FairScheduler, calls: list[tuple[str, int]]) -> tuple[list[str], list]:
    """Submit ``calls`` in order; release them one at a time; the callers in the order they ran."""
    order: list[str] = []
    gate = threading.Semaphore(0)

    def work(caller: str) -> str:
        order.append(caller)
        gate.acquire(timeout=10)
        return caller

    tasks = []
    for caller, n in calls:
        for _ in range(n):
            tasks.append(asyncio.ensure_future(scheduler.run(caller, work, caller)))
            await asyncio.sleep(0)
    await asyncio.sleep(0.05)
    for _ in tasks:
        gate.release()
        await asyncio.sleep(0.02)
    results = await asyncio.gather(*tasks, return_exceptions=True)
    return order, results


def test_a_caller_with_one_request_is_served_after_one_of_each_other_caller():
    order, _ = asyncio.run(_started(_scheduler(threads=1, queued=10), [("alpha", 8), ("beta", 1), ("gamma", 1)]))
    assert order[:4] == ["alpha", "beta", "gamma", "alpha"], order  # not after alpha's eight


def test_a_caller_never_runs_more_than_its_share():
    order, _ = asyncio.run(_started(_scheduler(threads=4, running=1, queued=10), [("alpha", 5), ("beta", 1)]))
    # beta got a thread while alpha's four waited (the first two threads start in either order)
    assert sorted(order[:2]) == ["alpha", "beta"], order


def test_past_its_queue_a_caller_is_told_busy_with_a_retry_after():
    _, results = asyncio.run(_started(_scheduler(threads=1, running=1, queued=3), [("alpha", 6), ("beta", 1)]))
    busy = [r for r in results if isinstance(r, Busy)]
    assert len(busy) == 2 and all(b.caller == "alpha" and b.retry_after >= 1 for b in busy), results
    assert results[-1] == "beta"  # another caller's queue is its own


def test_a_request_given_up_while_waiting_frees_its_place():
    async def scenario() -> None:
        scheduler = _scheduler(threads=1, running=1, queued=1)
        release = threading.Event()
        first = asyncio.ensure_future(scheduler.run("alpha", release.wait, 10))
        await asyncio.sleep(0.02)
        waiting = asyncio.ensure_future(scheduler.run("alpha", lambda: "second"))
        await asyncio.sleep(0.02)
        with pytest.raises(Busy):
            await scheduler.run("alpha", lambda: "third")
        waiting.cancel()  # the client went away
        await asyncio.sleep(0.02)
        again = asyncio.ensure_future(scheduler.run("alpha", lambda: "again"))
        release.set()
        assert await first is True and await again == "again"

    asyncio.run(scenario())


def test_a_flooding_callers_request_makes_way_at_each_pause_for_another_callers():
    """Alpha has a backlog, so its running request is patient: at a pause it waits while beta's runs."""

    async def scenario() -> list[str]:
        courtesy = Courtesy()
        scheduler = FairScheduler(4, lambda caller: 1, 10, courtesy)
        events: list[str] = []
        beta_running, beta_done, alpha_paused = threading.Event(), threading.Event(), threading.Event()

        def alpha_work(n: int) -> None:
            if n == 1:
                beta_running.wait(10)
                alpha_paused.set()
                courtesy.pause()  # beta's request is running: alpha waits here until it ends
                events.append(f"alpha passed its pause, beta done: {beta_done.is_set()}")

        def beta_work() -> None:
            beta_running.set()
            alpha_paused.wait(10)
            courtesy.pause()  # beta is prompt: its pause never waits
            time.sleep(0.2)  # the rest of beta's work, while alpha is held at its pause
            events.append("beta done")
            beta_done.set()

        first = asyncio.ensure_future(scheduler.run("alpha", alpha_work, 0))
        await asyncio.sleep(0)
        backlog = [asyncio.ensure_future(scheduler.run("alpha", alpha_work, n)) for n in (1, 2, 3)]
        await first  # alpha's second request starts with two more waiting: patient
        beta = asyncio.ensure_future(scheduler.run("beta", beta_work))
        await asyncio.gather(beta, *backlog)
        return events

    assert asyncio.run(scenario()) == ["beta done", "alpha passed its pause, beta done: True"]


def test_a_pause_waits_at_most_its_bound():
    courtesy = Courtesy(max_pause_s=0.2)
    result: list[str] = []

    def patient() -> None:
        with courtesy.running(patient=True):
            courtesy.pause()
            result.append("passed")

    with courtesy.running(patient=False):  # a prompt request that never ends in time
        thread = threading.Thread(target=patient)
        thread.start()
        thread.join(5)
    assert result == ["passed"]  # a flooder is slowed, never stopped


def test_a_request_of_many_parts_never_holds_another_callers_patient_request():
    """A mem0 add of 2,500 messages was prompt for minutes: a patient request of another caller waited
    its full pause at each step meanwhile.  From its second part on it is patient itself."""
    courtesy = Courtesy(max_pause_s=30)  # a wrong wait would show as the test's own timeout below
    parted, release, passed = threading.Event(), threading.Event(), threading.Event()

    def many_parts() -> None:
        with courtesy.running(patient=False):
            courtesy.next_part()  # its second message
            parted.set()
            release.wait(30)

    def patient_request() -> None:
        with courtesy.running(patient=True):
            parted.wait(30)
            courtesy.pause()
            passed.set()

    threads = [threading.Thread(target=many_parts), threading.Thread(target=patient_request)]
    for t in threads:
        t.start()
    try:
        assert passed.wait(10), "the patient request waited on the long request"
    finally:
        release.set()
        for t in threads:
            t.join(30)


def test_a_request_of_many_parts_makes_way_between_its_parts_for_a_prompt_request():
    courtesy = Courtesy(max_pause_s=30)
    events: list[str] = []
    other_running, at_part = threading.Event(), threading.Event()

    def many_parts() -> None:
        with courtesy.running(patient=False):
            other_running.wait(10)
            at_part.set()
            courtesy.next_part()  # another caller's prompt request runs: this one waits for it
            events.append("second part")

    def prompt_request() -> None:
        with courtesy.running(patient=False):
            other_running.set()
            at_part.wait(10)
            time.sleep(0.2)  # the rest of its work, while the long request is held at its part
            events.append("prompt request done")

    threads = [threading.Thread(target=many_parts), threading.Thread(target=prompt_request)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert events == ["prompt request done", "second part"]


def test_next_part_outside_a_request_and_twice_counts_once():
    courtesy = Courtesy(max_pause_s=0.1)
    courtesy.next_part()  # no request on this thread: nothing to change, nothing to wait for
    with courtesy.running(patient=False):
        courtesy.next_part()
        courtesy.next_part()
    assert courtesy._prompt == 0
