"""Waking the subscribers that wait for a publication, without the publisher losing the GIL.

A feed publishes in the committer, between the partitions of a pipeline batch. Waking an
asyncio loop is a system call (a write to its self-pipe), and CPython releases the
interpreter for it: a thread of busy subscribers took it then and kept it up to a switch
interval (5 ms) while the committer waited, at every publication. So a publication hands
its wakers to one daemon thread (`hand_off`: an append to a `queue.SimpleQueue`, O(1) and
without releasing the interpreter), which wakes them once it gets the interpreter: when
the committer sleeps or waits, or after a switch interval. Threads are woken by their
event, asyncio tasks with one call per event loop.

A loop that wakes many subscribers at once collects garbage around them (`collecting.py`).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

from iqstate.subscriptions.collecting import MANY, after_fan_out, before_fan_out

if TYPE_CHECKING:
    import asyncio  # annotations only: `import iqstate` does not load asyncio (about 3 MB)

_log = logging.getLogger(__name__)


class Waker:
    """Wakes one waiting subscriber: a thread (`loop` None) or an asyncio task."""

    __slots__ = ("_event", "_future", "loop")

    def __init__(
        self, event: threading.Event | None = None, loop: asyncio.AbstractEventLoop | None = None
    ) -> None:
        self._event = event
        self.loop = loop
        self._future: asyncio.Future[None] | None = None

    def arm(self, future: asyncio.Future[None]) -> None:
        """Wait again, on `future` (an asyncio waker, on its loop's thread): a wake-up
        queued for the previous wait wakes this one, and the subscriber looks again."""
        self._future = future

    def waits(self) -> bool:
        """True while an asyncio waiter has not been woken (call on its loop's thread)."""
        return self._future is not None and not self._future.done()

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


def _wake_queued(loop: asyncio.AbstractEventLoop) -> None:
    with _queued_lock:
        queued = _queued.pop(loop, [])
    # A subscriber waits on each partition it follows: several publications queue it.
    waiting = [waker for waker in dict.fromkeys(queued) if waker.waits()]
    if len(waiting) < MANY:
        _wake_all(waiting)
        return
    before_fan_out()
    _wake_all(waiting)
    loop.call_soon(after_fan_out)  # after the tasks just woken have run


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
            wakers = self._pending.get()
            try:
                wake(wakers)
            except Exception:  # the thread must live on: every subscriber depends on it
                _log.exception("waking subscriptions failed")


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
