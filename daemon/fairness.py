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
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter, deque
from collections.abc import Callable, Hashable
from typing import TypeVar

import anyio.to_thread
from anyio import CapacityLimiter

T = TypeVar("T")

_SMOOTHING = 0.2  # weight of the newest duration in a caller's mean (for Retry-After)
MAX_RETRY_AFTER_S = 60


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
    def __init__(self, threads: int, running: Callable[[Hashable], int], queued: int) -> None:
        """``threads``: requests of all callers running at once; ``running(caller)``: that caller's
        share; ``queued``: how many more a caller may have waiting."""
        self.threads = threads
        self.running_for = running
        self.queued = queued
        self._limiter: CapacityLimiter | None = None  # made on the event loop, at the first request
        self._running: Counter = Counter()
        self._waiting: dict[Hashable, deque[asyncio.Future]] = {}
        self._turns: deque[Hashable] = deque()  # callers with a request waiting, next in turn first
        self._busy = 0
        self._mean_s: dict[Hashable, float] = {}

    async def run(self, caller: Hashable, fn: Callable[..., T], *args: object) -> T:
        """``fn(*args)`` on a thread once ``caller``'s turn comes; Busy when its queue is full."""
        await self._admit(caller)
        started = time.monotonic()
        try:
            if self._limiter is None:
                self._limiter = CapacityLimiter(self.threads)
            return await anyio.to_thread.run_sync(fn, *args, limiter=self._limiter)
        finally:
            self._release(caller, time.monotonic() - started)

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
