"""A fair share of the API's threads for every caller: bounded per token, round robin between tokens.

Before this, every request ran in one shared thread pool in arrival order: 300
concurrent searches from one agent took every thread, and another agent's
single search waited behind all of them (22 s).  Now each caller (a token: an
agent, the administrator; callers without one share a key) runs at most
``running`` requests at once and may have ``queued`` more waiting; past that it
is refused at once (:class:`Busy`, HTTP 429 with Retry-After) instead of
piling up.  When a thread frees, it goes to the next caller in turn that has
one waiting, so a caller with one request is served after at most one request
of each other caller, however many those have queued.

The bookkeeping runs on the event loop (every method but the work itself), so
it needs no lock; the work runs on a thread of this scheduler's own limiter.

A turn of its own is not enough on two cores: a flooding caller always has one
request running, and a search is mostly two model encodes that take both cores
(or wait for each other's model lock), so another caller's single search ran
2.6x slower than alone (bench/bench_flood.py).  So a request started while its
caller has more waiting (or right after its last one) is *patient*: at each
costly step (:meth:`Courtesy.pause`, before a model encode) it waits while a
request of a caller without a backlog runs, for at most MAX_PAUSE_S each time.
That caller's search then waits for at most the one step the flooder is in.

One request can hold the work of many: a mem0 add of 2,500 messages is 2,500 writes (an
embedding, a duplicate check and a store write each).  Such a request was *prompt* for its
whole length (minutes on the seed's machine), so every patient request of every other caller
waited MAX_PAUSE_S at each of its pauses meanwhile (a 5.6 s stall).  A route doing several parts
calls :meth:`Courtesy.next_part` between them: from its second part on it is charged like a
flood's further requests (patient), so its length is its own caller's, never another's.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import anyio.to_thread
from anyio import CapacityLimiter

T = TypeVar("T")

_SMOOTHING = 0.2  # weight of the newest duration in a caller's mean (for Retry-After)
MAX_RETRY_AFTER_S = 60
# A request admitted within this long of its caller's last one ending is a flood's (no time to read
# an answer between them); and a patient request waits at most this long at each pause.
BACK_TO_BACK_S = 0.02
MAX_PAUSE_S = 1.0


class Courtesy:
    """Where a flooding caller's running request lets the requests of other callers pass.

    Thread-safe: :meth:`running` wraps the work on its API thread, :meth:`pause`
    is called from that same thread (the local search, before each model encode).
    """

    def __init__(self, max_pause_s: float = MAX_PAUSE_S) -> None:
        self.max_pause_s = max_pause_s
        self._prompt = 0  # requests running now that no other request should slow down
        self._changed = threading.Condition()
        self._thread = threading.local()

    @contextmanager
    def running(self, patient: bool) -> Iterator[None]:
        """The request running in this thread meanwhile; ``patient``: it makes way at each pause."""
        self._thread.patient = patient
        self._thread.inside = True
        if not patient:
            with self._changed:
                self._prompt += 1
        try:
            yield
        finally:
            self._stop_being_prompt()
            self._thread.patient = False
            self._thread.inside = False

    def next_part(self) -> None:
        """Between the parts of a request that does the work of several (each message of a mem0 add):
        from here on the request is patient, and it makes way now for a prompt request of another caller."""
        if getattr(self._thread, "inside", False):
            self._stop_being_prompt()
            self.pause()

    def _stop_being_prompt(self) -> None:
        """The request of this thread no longer holds up the patient requests of other callers."""
        if getattr(self._thread, "inside", False) and not self._thread.patient:
            self._thread.patient = True
            with self._changed:
                self._prompt -= 1
                self._changed.notify_all()

    def pause(self) -> None:
        """Before a costly step: a patient request waits while a prompt one runs (bounded)."""
        if getattr(self._thread, "patient", False):
            with self._changed:
                self._changed.wait_for(lambda: self._prompt == 0, timeout=self.max_pause_s)


class Busy(Exception):
    """A caller with as many requests running and queued as it may have (HTTP 429)."""

    def __init__(self, caller: Hashable, waiting: int, retry_after: int) -> None:
        super().__init__(
            f"too many requests at once from this caller ({waiting} waiting, more are refused until they are "
            f"answered): retry in {retry_after} s"
        )
        self.caller = caller
        self.retry_after = retry_after


class FairScheduler:
    def __init__(
        self, threads: int, running: Callable[[Hashable], int], queued: int, courtesy: Courtesy | None = None
    ) -> None:
        """``threads``: requests of all callers running at once; ``running(caller)``: that caller's
        share; ``queued``: how many more a caller may have waiting; ``courtesy``: where the
        requests of a caller with a backlog make way for the others' (None: they do not)."""
        self.threads = threads
        self.running_for = running
        self.queued = queued
        self.courtesy = courtesy
        self._last_end: dict[Hashable, float] = {}
        self._limiter: CapacityLimiter | None = None  # made on the event loop, at the first request
        self._running: Counter = Counter()
        self._waiting: dict[Hashable, deque[asyncio.Future]] = {}
        self._turns: deque[Hashable] = deque()  # callers with a request waiting, next in turn first
        self._busy = 0
        self._mean_s: dict[Hashable, float] = {}

    async def run(self, caller: Hashable, fn: Callable[..., T], *args: object) -> T:
        """``fn(*args)`` on a thread once ``caller``'s turn comes; Busy when its queue is full."""
        arrived = time.monotonic()
        await self._admit(caller)
        started = time.monotonic()
        patient = self._flooding(caller, arrived)
        courtesy = self.courtesy

        def work() -> T:
            if courtesy is None:
                return fn(*args)
            with courtesy.running(patient):
                return fn(*args)

        try:
            if self._limiter is None:
                self._limiter = CapacityLimiter(self.threads)
            return await anyio.to_thread.run_sync(work, limiter=self._limiter)
        finally:
            self._release(caller, time.monotonic() - started)

    def _flooding(self, caller: Hashable, arrived: float) -> bool:
        """A request that starts with more of its caller's waiting, or came right after its last one."""
        if self._waiting.get(caller) or self._running[caller] > 1:
            return True
        last = self._last_end.get(caller)
        return last is not None and arrived - last < BACK_TO_BACK_S

    def retry_after(self, caller: Hashable, waiting: int) -> int:
        """Seconds until a caller with ``waiting`` queued requests likely has room again."""
        mean = self._mean_s.get(caller, 1.0)
        wait = (waiting + 1) * mean / max(1, self.running_for(caller))
        return max(1, min(MAX_RETRY_AFTER_S, math.ceil(wait)))

    async def _admit(self, caller: Hashable) -> None:
        waiting = self._waiting.get(caller)
        if not waiting and self._running[caller] < self.running_for(caller) and self._busy < self.threads:
            self._start(caller)
            return
        depth = len(waiting) if waiting else 0
        if depth >= self.queued:
            raise Busy(caller, depth, self.retry_after(caller, depth))
        turn: asyncio.Future = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(caller, deque()).append(turn)
        if caller not in self._turns:
            self._turns.append(caller)
        try:
            await turn  # _dispatch counted it as started when it set the result
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._release(caller, None)  # started just as it was cancelled: give the turn back
            else:
                queue = self._waiting.get(caller)
                if queue is not None and turn in queue:
                    queue.remove(turn)
                    if not queue:
                        self._forget(caller)
            raise

    def _start(self, caller: Hashable) -> None:
        self._running[caller] += 1
        self._busy += 1

    def _release(self, caller: Hashable, took: float | None) -> None:
        self._running[caller] -= 1
        if self._running[caller] <= 0:
            del self._running[caller]
        self._busy -= 1
        self._last_end[caller] = time.monotonic()
        if took is not None:
            mean = self._mean_s.get(caller)
            self._mean_s[caller] = took if mean is None else (1 - _SMOOTHING) * mean + _SMOOTHING * took
        if caller in self._turns:  # who was just served waits behind everyone else
            self._turns.remove(caller)
            self._turns.append(caller)
        self._dispatch()

    def _forget(self, caller: Hashable) -> None:
        self._waiting.pop(caller, None)
        if caller in self._turns:
            self._turns.remove(caller)

    def _dispatch(self) -> None:
        """Free threads to waiting callers, one request per caller per round."""
        while self._busy < self.threads and self._turns:
            for _ in range(len(self._turns)):
                caller = self._turns[0]
                self._turns.rotate(-1)  # whoever is served goes to the back of the line
                if self._running[caller] < self.running_for(caller):
                    break
            else:
                return  # every caller waiting already runs its share
            queue = self._waiting[caller]
            turn = queue.popleft()
            if not queue:
                self._forget(caller)
            if turn.cancelled():
                continue
            self._start(caller)
            turn.set_result(None)
