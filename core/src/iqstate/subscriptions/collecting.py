"""Garbage collections around a fan-out: run on the subscribers' thread, not the committer's.

CPython collects a generation in whichever thread allocates when it is due. A fan-out to
1,000 asyncio subscribers leaves about 6,000 new objects the collector tracks at each of
their waits (their `__anext__` coroutines, futures, the tasks' callbacks), and decoding a
batch adds its changes: the committer, allocating its next batch, walked them all in its
young collection (about 1.7 ms), and every few batches ran the middle or the full
collection they made due (2-30 ms). So a loop about to wake many subscribers collects the
middle generation itself when it is nearly due (the full one, when due, then falls to the
collections its subscribers' decoding starts), and once they ran it collects the young
generation their waits left. The committer's own collection then walks little more than
its own batch. Nothing changes the interpreter's settings; with collection disabled
(`gc.disable()`) nothing is collected here either.
"""

from __future__ import annotations

import gc

MANY = 64
"""Subscribers woken at once on a loop from which it collects around them."""
_MARGIN = 3
"""Collections of the young generation that may follow before the loop's next fan-out (its
subscribers' decoding, its own after the fan-out, the committer's): the middle
generation is collected when that many more would make it due."""


def before_fan_out() -> None:
    """Collect the middle generation (with the young one) if it is due within `_MARGIN`
    young collections."""
    if gc.isenabled():
        _, middle, _ = gc.get_count()
        if middle >= gc.get_threshold()[1] - _MARGIN:
            gc.collect(1)


def after_fan_out() -> None:
    """Collect the young generation: what the subscribers' waits left."""
    if gc.isenabled():
        gc.collect(0)
