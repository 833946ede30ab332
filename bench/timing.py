"""Timing helpers shared by the bench scripts (run them as `python bench/<script>.py`)."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable


def timed(operation: Callable[[], object]) -> float:
    """Seconds `operation` takes, with the garbage collector paused."""
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        operation()
        return time.perf_counter() - start
    finally:
        gc.enable()


def calibration_us() -> float:
    """Best time of `sum(range(100))`: how fast this machine runs Python right now."""
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(10_000):
            sum(range(100))
        best = min(best, (time.perf_counter() - start) / 10_000)
    return best * 1e6


def calibration_line() -> str:
    return (
        f"calibration: sum(range(100)) = {calibration_us():.2f} us (about 0.6 us on an idle core)"
    )
