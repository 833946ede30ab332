"""A garbage collection in the middle of a C call, to test what C extensions do then."""

from __future__ import annotations

import gc
from typing import Any


class EmptiesTheListWhenCollected:
    """Cyclic garbage whose finalizer empties a list, as a collection may run it in the
    middle of a C call."""

    def __init__(self, victim: list[Any], state: dict[str, bool]) -> None:
        self.victim, self.state, self.cycle = victim, state, self

    def __del__(self) -> None:
        self.state["during the call"] = self.state["calling"]
        self.victim.clear()


def call_with_a_collection_inside(function: Any, victim: list[Any]) -> Any:
    """`function(victim)` with the collector collecting at the first tracked allocation,
    which finds a finalizer that empties `victim`."""
    state = {"calling": False, "during the call": False}
    gc.collect()
    threshold = gc.get_threshold()
    gc.set_threshold(1)
    try:
        EmptiesTheListWhenCollected(victim, state)
        state["calling"] = True
        result = function(victim)
        state["calling"] = False
    finally:
        gc.set_threshold(*threshold)
    assert state["during the call"], "the finalizer ran inside the call"
    return result
