"""Waking the subscribers that wait for a publication, without the publisher losing the GIL.

A feed publishes in the committer, between the partitions of a pipeline batch. Waking an
asyncio loop is a system call (a write to its self-pipe), and CPython releases the
interpreter for it: a thread of busy subscribers took it then and kept it up to a switch
interval (5 ms) while the committer waited, at every publication. So a publication hands
its wakers to one daemon thread (`hand_off`: an append to a `queue.SimpleQueue`, O(1) and
without releasing the interpreter), which wakes them once it gets the interpreter: when
the committer sleeps or waits, or after a switch interval. Threads are woken by their
event, asyncio tasks with one call per event loop.

Each wait of an asyncio subscriber leaves a few new objects the garbage collector tracks
(its `__anext__` coroutine, a future, the task's callback): with 1,000 subscribers the
young generation held about 6,000 of them when the committer next allocated, and the
committer walked them all (about 1.7 ms, most batches). So a loop that woke many
subscribers collects the young generation itself once they ran (`_collect_young`).
"""

from __future__ import annotations

import asyncio
import gc
import os
import queue
import threading
from collections.abc import Iterable


class Waker:
    """Wakes one waiting subscriber: a thread (`loop` None) or an asyncio task."""

    __slots__ = ("_event", "_future", "loop")

    def __init__(
        self,
        event: threading.Event | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        future: asyncio.Future[None] | None = None,
    ) -> None:
        self._event = event
        self.loop = loop
        self._future = future

    def wake(self) -> None:
        """Wake the waiter (an asyncio waker: call on its loop's thread)."""
        if self._event is not None:
            self._event.set()
        elif self._future is not None and not self._future.done():
            self._future.set_result(None)


def _wake_all(wakers: Iterable[Waker]) -> None:
    for waker in wakers:
        waker.wake()


_queued: dict[asyncio.AbstractEventLoop, list[Waker]] = {}
"""Per event loop, the wakers a call scheduled on it will wake (see `wake`)."""
_queued_lock = threading.Lock()


COLLECT_AFTER = 64
"""Wakers woken on a loop at once from which the loop collects what their waits left."""


def _wake_queued(loop: asyncio.AbstractEventLoop) -> None:
    with _queued_lock:
        waiting = _queued.pop(loop, [])
    _wake_all(waiting)
    if len(waiting) >= COLLECT_AFTER:
        loop.call_soon(_collect_young)  # after the tasks just woken have run


def _collect_young() -> None:
    """The collection the interpreter would start at its next allocation (of the youngest
    generation, or also the middle one when due), now on this thread. Never the oldest
    generation: when that is due depends on counts only the interpreter knows."""
    if gc.isenabled():
        _, middle, _ = gc.get_count()
        gc.collect(1 if middle >= gc.get_threshold()[1] else 0)


def wake(wakers: Iterable[Waker]) -> None:
    """Wake threads at once, and asyncio tasks with one call per event loop (now, on the
    caller's thread: publications use `hand_off`).

    A loop that has not yet run the call of an earlier wake-up gets its wakers added to
    that call, not a call of their own: each call writes to the loop's self-pipe."""
    by_loop: dict[asyncio.AbstractEventLoop, list[Waker]] = {}
    for waker in wakers:
        if waker.loop is None:
            waker.wake()
        else:
            by_loop.setdefault(waker.loop, []).append(waker)
    for loop, waiting in by_loop.items():
        with _queued_lock:
            queued = _queued.get(loop)
            if queued is not None:
                queued += waiting
                continue
            _queued[loop] = waiting
        try:
            loop.call_soon_threadsafe(_wake_queued, loop)
        except RuntimeError:  # a closed loop: nobody waits there
            with _queued_lock:
                _queued.pop(loop, None)


class _WakingThread:
    """The daemon thread that wakes what publications hand it, started once per process."""

    def __init__(self) -> None:
        self._pending: queue.SimpleQueue[Iterable[Waker]] = queue.SimpleQueue()
        self._started = False
        self._starting = threading.Lock()

    def start(self) -> None:
        with self._starting:
            if not self._started:
                threading.Thread(
                    target=self._run, name="iqstate-subscription-waker", daemon=True
                ).start()
                self._started = True

    def hand_off(self, wakers: Iterable[Waker]) -> None:
        if not self._started:  # subscriptions start it: only a forked child gets here
            self.start()
        self._pending.put(wakers)

    def _run(self) -> None:
        while True:
            wake(self._pending.get())


_thread = _WakingThread()


def _forget_thread_in_child() -> None:
    global _thread
    _thread = _WakingThread()  # the parent's thread does not exist in a forked child


os.register_at_fork(after_in_child=_forget_thread_in_child)


def start_waking() -> None:
    """Start the thread that wakes subscribers (idempotent): subscriptions call it, so no
    publication starts a thread (which waits for it to run)."""
    _thread.start()


def hand_off(wakers: Iterable[Waker]) -> None:
    """Have `wakers` woken by the waking thread: O(1), and the caller keeps the GIL."""
    _thread.hand_off(wakers)
