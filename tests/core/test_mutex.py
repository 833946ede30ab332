"""`iqstate.mutex`: the C lock behaves as `threading.Lock` does, which every partition's
queries and batches rely on for mutual exclusion; both are run through the same checks."""

from __future__ import annotations

import importlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from iqstate import mutex


def _compiled() -> Any:
    """`iqstate_speedups.locks`, or None where it is not built (it is optional)."""
    try:
        return importlib.import_module("iqstate_speedups.locks")
    except ImportError:
        return None


compiled = _compiled()
needs_compiled = pytest.mark.skipif(compiled is None, reason="iqstate_speedups.locks not built")


def c_lock() -> Any:
    assert compiled is not None
    return compiled.Lock()


LOCKS = [
    pytest.param(c_lock, id="c", marks=needs_compiled),
    pytest.param(threading.Lock, id="threading"),
]
Maker = Callable[[], Any]


@pytest.mark.skipif(compiled is None, reason="iqstate_speedups.locks not built")
def test_new_lock_is_the_compiled_lock_where_it_is_built() -> None:
    assert mutex.COMPILED
    assert type(mutex.new_lock()) is compiled.Lock


@pytest.mark.parametrize("make", LOCKS)
def test_a_held_lock_refuses_a_second_acquire_until_released(make: Maker) -> None:
    lock = make()
    assert not lock.locked()
    assert lock.acquire() is True
    assert lock.locked()
    assert lock.acquire(False) is False
    assert lock.acquire(blocking=False) is False
    lock.release()
    assert not lock.locked()
    assert lock.acquire(False) is True
    lock.release()


@pytest.mark.parametrize("make", LOCKS)
def test_releasing_an_unlocked_lock_raises(make: Maker) -> None:
    lock = make()
    with pytest.raises(RuntimeError, match="release unlocked lock"):
        lock.release()
    assert lock.acquire(False)


@pytest.mark.parametrize("make", LOCKS)
def test_the_context_manager_releases_on_an_exception(make: Maker) -> None:
    lock = make()
    with pytest.raises(KeyError), lock:
        assert lock.locked()
        raise KeyError("inside")
    assert not lock.locked()


@pytest.mark.parametrize("make", LOCKS)
def test_a_timed_acquire_of_a_held_lock_gives_up(make: Maker) -> None:
    lock = make()
    lock.acquire()
    started = time.monotonic()
    assert lock.acquire(timeout=0.05) is False
    assert time.monotonic() - started >= 0.04
    assert lock.acquire(True, 0) is False


@pytest.mark.parametrize("make", LOCKS)
@pytest.mark.parametrize(
    ("args", "kwargs", "error"),
    [
        ((False, 1.0), {}, ValueError),
        ((True, -2.0), {}, ValueError),
        ((), {"timeout": 1e300}, OverflowError),
        ((), {"timeout": "soon"}, TypeError),
        ((), {"wait": True}, TypeError),
        ((True, 1.0, 2), {}, TypeError),
    ],
)
def test_bad_arguments_are_refused_and_leave_the_lock_free(
    make: Maker, args: tuple[Any, ...], kwargs: dict[str, Any], error: type[Exception]
) -> None:
    lock = make()
    with pytest.raises(error):
        lock.acquire(*args, **kwargs)
    assert not lock.locked()


@pytest.mark.parametrize("make", LOCKS)
def test_a_waiting_acquire_takes_the_lock_when_another_thread_releases_it(make: Maker) -> None:
    lock = make()
    lock.acquire()
    taken = threading.Event()

    def wait_for_it() -> None:
        lock.acquire()
        taken.set()
        lock.release()

    waiter = threading.Thread(target=wait_for_it)
    waiter.start()
    assert not taken.wait(0.1)  # the waiter blocks without holding the GIL: this thread runs
    lock.release()  # released by a thread other than the waiter
    assert taken.wait(10)
    waiter.join(10)
    assert not lock.locked()


@pytest.mark.parametrize("make", LOCKS)
def test_threads_incrementing_under_the_lock_lose_no_update(make: Maker) -> None:
    lock = make()
    counts = {"n": 0}

    def increment() -> None:
        for _ in range(2000):
            with lock:
                seen = counts["n"]
                time.sleep(0)  # invites a switch while the lock is held
                counts["n"] = seen + 1

    threads = [threading.Thread(target=increment) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert counts["n"] == 8000


class Interrupted(Exception):
    pass


@pytest.fixture
def alarm_raising() -> Iterator[None]:
    def raise_interrupted(signum: int, frame: object) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGALRM, raise_interrupted)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("make", LOCKS)
@pytest.mark.parametrize("timeout", [-1, 30.0])
@pytest.mark.usefixtures("alarm_raising")
def test_a_signal_handler_raising_ends_a_blocked_acquire(make: Maker, timeout: float) -> None:
    """As Ctrl-C ends a `threading.Lock` wait: a lock held forever cannot hang the process."""
    lock = make()
    lock.acquire()
    signal.setitimer(signal.ITIMER_REAL, 0.1)
    with pytest.raises(Interrupted):
        lock.acquire(timeout=timeout)
    assert lock.locked()
    lock.release()


OPERATIONS = st.lists(
    st.sampled_from(["acquire_now", "release", "locked", "timed_out", "enter_free"]), max_size=30
)


def _step(lock: Any, operation: str) -> object:
    """One operation's outcome: its value, or the type of the exception it raised."""
    try:
        if operation == "acquire_now":
            return lock.acquire(False)
        if operation == "release":
            return lock.release()
        if operation == "locked":
            return lock.locked()
        if operation == "timed_out":
            return lock.acquire(timeout=0.001)
        if lock.locked():  # `with` on a held lock would wait forever
            return "skipped"
        with lock:
            return lock.locked()
    except Exception as error:
        return type(error)


@needs_compiled
@given(OPERATIONS)
def test_any_sequence_of_operations_has_threading_locks_outcomes(operations: list[str]) -> None:
    ours, reference = c_lock(), threading.Lock()
    for operation in operations:
        assert _step(ours, operation) == _step(reference, operation), operation
        assert ours.locked() == reference.locked()
