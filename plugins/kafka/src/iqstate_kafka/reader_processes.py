"""`ProcessChangelogConsumer`: reads changelog partitions in worker processes, so that a
replica restoring several partitions uses more than one core.

Reading is most of a restore's CPU, and it is Python holding the GIL: measured with
bench/kafka_restore.py (1,000,000 records, 4 partitions), the follower spent 4.0 us of CPU a
record, of which the consumer's messages (librdkafka's headers turned into Python objects
alone cost 1.1 us a record) and grouping them into units about 2.5, and one thread cannot go
faster than that. Here each worker process runs a `ChangelogConsumer` for its share of the
partitions (a partition always goes to the same worker) and hands its units to the follower
over a pipe; the follower applies them as it applies its own reader's. A prototype of this
(2 workers) restored 1M records at 330k records/s where one process reached 216k. A
partition is given to the worker reading the fewest.

**Protocol.** A worker is `python -m iqstate_kafka.reader_processes`, started with the
cluster's settings as JSON on its command line. Commands arrive on its stdin and answers
leave on its stdout, each a frame: an 8-byte big-endian length, then a `marshal`led tuple of
plain values (bytes, ints, strings, lists, tuples, None), never pickle. A worker whose stdin
ends (the follower closed it, or died) exits.

**Epochs.** Every `assign` carries a new epoch, and every unit the number of the assignment
it was read under. Units still in the pipe when their partition is unassigned, or assigned
again (after a failed commit or a rebuild), are dropped: a follower only ever applies units
read from the offset it last assigned.

A worker that fails or dies makes `read` raise `ClusterError`; the follower then replaces
the reader and starts again from the offsets committed in the stores, as for any failure.
`read` never blocks past its timeout: the follower takes what the pipes hold without
waiting for the rest of a frame, so a worker frozen in the middle of one (stopped, or on a
stuck host) holds up neither the follower's other work nor its stop.
Records a worker skips because they do not decode are counted as the follower counts its
own reader's, but logged by the worker, whose logging is Python's default (warnings and
errors to the stderr it shares with the follower's process).
"""

from __future__ import annotations

import contextlib
import json
import logging
import marshal
import os
import selectors
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import IO, Any

from iqstate.codec import decode_position, encode_position
from iqstate.position import TopicPartition
from iqstate_kafka.errors import ClusterError
from iqstate_kafka.format import BatchMarker
from iqstate_kafka.reader import ChangelogConsumer, ChangelogUnit, OffsetOutOfRange
from iqstate_kafka.settings import ClusterSettings

logger = logging.getLogger("iqstate_kafka.reader_processes")

_FRAME = struct.Struct(">Q")  # a unit of one batch may pass 4 GiB (no `max_held_records`)
_WORKER_POLL = 0.1
"""How long a worker waits for records before it looks at its commands again."""
_CLOSE_TIMEOUT = 5.0
_READ_CHUNK = 1 << 20
"""The most the follower reads of a worker's pipe at once (a pipe holds 64 KiB)."""

Event = ChangelogUnit | OffsetOutOfRange


@dataclass(slots=True)
class _Assigned:
    partition: TopicPartition
    epoch: int
    worker: int
    position: int
    skipped: int = 0
    settled: int | None = None


class ProcessChangelogConsumer:
    """A `ChangelogConsumer` whose reading happens in `processes` worker processes.

    The follower's side of it: `assign` (always from a given offset), `unassign`, `read`,
    `position`, `skipped`, `assignment`, `close`. `client_config` must hold plain values
    (strings, numbers, booleans): it travels to the workers as JSON. The cluster's
    `max_held_records` is shared out among the workers in equal parts, each bounding what
    its own partitions hold.
    """

    def __init__(
        self,
        cluster: ClusterSettings,
        *,
        processes: int,
        max_records: int = 10_000,
    ) -> None:
        if processes < 1:
            raise ValueError(f"processes must be >= 1, got {processes!r}")
        held = cluster.max_held_records
        max_held_records = None if held is None else max(1, held // processes)
        try:
            arguments = json.dumps(
                {
                    "bootstrap_servers": cluster.bootstrap_servers,
                    "timeout": cluster.timeout,
                    "client_config": dict(cluster.client_config),
                    "max_records": max_records,
                    "max_held_records": max_held_records,
                }
            )
        except TypeError as exc:
            raise ValueError(
                f"reader processes need a client_config of plain values: {exc}"
            ) from exc
        self._selector = selectors.DefaultSelector()
        self._workers: list[subprocess.Popen[bytes]] = []
        self._received_frames: list[_Frames] = []
        self._assigned: dict[tuple[str, int], _Assigned] = {}
        self._epoch = 0
        try:
            for number in range(processes):
                worker = subprocess.Popen(
                    [sys.executable, "-m", "iqstate_kafka.reader_processes", arguments],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    bufsize=0,  # unbuffered: the selector sees every frame not yet read
                )
                self._workers.append(worker)
                assert worker.stdout is not None
                self._received_frames.append(_Frames(worker.stdout.fileno()))
                self._selector.register(worker.stdout, selectors.EVENT_READ, number)
        except BaseException:
            self.close()
            raise

    @property
    def assignment(self) -> frozenset[TopicPartition]:
        return frozenset(state.partition for state in self._assigned.values())

    def assign(self, partition: TopicPartition, offset: int, *, look_back: bool = False) -> None:
        """Read `partition` from `offset` (a committed offset, or the earliest), looking
        back at the record before it (`ChangelogConsumer.assign`)."""
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset!r}")
        key = (partition.topic, partition.partition)
        if key in self._assigned:
            raise ValueError(f"{partition} is already assigned; unassign it first")
        self._epoch += 1
        loads = [0] * len(self._workers)
        for state in self._assigned.values():
            loads[state.worker] += 1
        worker = loads.index(min(loads))
        self._send(
            worker,
            ("assign", partition.topic, partition.partition, offset, self._epoch, look_back),
        )
        self._assigned[key] = _Assigned(partition, self._epoch, worker, offset)

    def unassign(self, partition: TopicPartition) -> None:
        """Stop reading `partition`; what was read of it and not handed out is dropped."""
        state = self._assigned.pop((partition.topic, partition.partition), None)
        if state is not None:
            self._send(state.worker, ("unassign", partition.topic, partition.partition))

    def skipped(self, partition: TopicPartition) -> int:
        """How many records of `partition` did not decode and were skipped (0 if unassigned)."""
        state = self._assigned.get((partition.topic, partition.partition))
        return state.skipped if state is not None else 0

    def position(self, partition: TopicPartition) -> int | None:
        """The next offset of `partition` read (as the workers last said; `None` if
        unassigned)."""
        state = self._assigned.get((partition.topic, partition.partition))
        return state.position if state is not None else None

    def settled(self, partition: TopicPartition) -> int | None:
        """`ChangelogConsumer.settled`, as the workers last said."""
        state = self._assigned.get((partition.topic, partition.partition))
        return state.settled if state is not None else None

    def read(self, timeout: float) -> list[Event]:
        """Wait up to `timeout` seconds for the workers' units; at most one answer of each
        worker is taken per call (so a commit stays bounded by `max_records` per worker, and
        by a whole batch's records, which a complete unit holds)."""
        received = self._received_frames
        deadline = time.monotonic() + timeout
        while True:
            # Every pipe without a whole frame here is read each call: a worker whose frame
            # waits here must not keep the others' pipes full (their writes wait), and its
            # own pipe stays full while its frames wait (a worker reads no further ahead).
            waiting = not any(frames.to_hand_out() for frames in received)
            wait = max(0.0, deadline - time.monotonic()) if waiting else 0.0
            ready = self._selector.select(wait)
            for selected, _ in ready:
                frames = received[selected.data]
                if not frames.complete():
                    frames.take_in()
            if not waiting or any(frames.to_hand_out() for frames in received):
                break
            if not ready and wait <= 0:
                break
        events: list[Event] = []
        for number, frames in enumerate(received):
            frame = frames.next_frame()
            if frame is not None:
                events += self._received(frame)
            elif frames.ended:
                raise ClusterError(
                    f"changelog reader process {number} ended unexpectedly "
                    f"(exit code {self._workers[number].poll()})"
                )
        return events

    def _received(self, frame: tuple[Any, ...]) -> list[Event]:
        if frame[0] == "error":
            raise ClusterError(f"a changelog reader process failed: {frame[1]}")
        _, encoded, progress = frame
        for topic, number, epoch, position, skipped, settled in progress:
            state = self._assigned.get((topic, number))
            if state is not None and state.epoch == epoch:
                state.position, state.skipped, state.settled = position, skipped, settled
        events: list[Event] = []
        for event in encoded:
            state = self._assigned.get((event[1], event[2]))
            if state is None or state.epoch != event[3]:
                continue  # read under an earlier assignment
            if event[0] == "lost":
                del self._assigned[(event[1], event[2])]  # the worker's reader dropped it
                events.append(OffsetOutOfRange(state.partition, event[4]))
            else:
                events.append(_unit(state.partition, event))
        return events

    def _send(self, worker: int, command: tuple[Any, ...]) -> None:
        stdin = self._workers[worker].stdin
        assert stdin is not None
        try:
            _write_frame(stdin, command)
        except OSError as exc:
            raise ClusterError(f"changelog reader process {worker} is gone: {exc}") from exc

    def close(self) -> None:
        """Stop the workers (closing their stdin ends them) and wait for them to exit."""
        self._selector.close()
        for worker in self._workers:
            for stream in (worker.stdin, worker.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
        for worker in self._workers:
            try:
                worker.wait(_CLOSE_TIMEOUT)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
        self._workers = []


class _Frames:
    """The frames of one worker's pipe as they arrive, read without ever waiting for the
    rest of one."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._data = bytearray()
        self.ended = False
        """The pipe ended (the worker exited or closed it)."""

    def _needed(self) -> int:
        """The bytes of the first frame (its header's), whole or not."""
        if len(self._data) < _FRAME.size:
            return _FRAME.size
        return _FRAME.size + int(_FRAME.unpack_from(self._data)[0])

    def complete(self) -> bool:
        """Whether a whole frame has arrived."""
        return len(self._data) >= self._needed()

    def to_hand_out(self) -> bool:
        """Whether `read` has something of this pipe to act on: a frame, or its end."""
        return self.ended or self.complete()

    def take_in(self) -> None:
        """Read what the pipe holds (call it once the selector says it is readable)."""
        wanted = min(max(self._needed() - len(self._data), 1 << 16), _READ_CHUNK)
        try:
            chunk = os.read(self._fd, wanted)
        except BlockingIOError:
            return
        if chunk:
            self._data += chunk
        else:
            self.ended = True

    def next_frame(self) -> tuple[Any, ...] | None:
        """The first whole frame, taken out; None until one has arrived."""
        if not self.complete():
            return None
        end = self._needed()
        with memoryview(self._data) as data, data[_FRAME.size : end] as body:
            value: tuple[Any, ...] = marshal.loads(body)
        del self._data[:end]
        return value


def _unit(partition: TopicPartition, event: tuple[Any, ...]) -> ChangelogUnit:
    _, _, _, _, pairs, batch_ids, offsets, marker, next_offset, compacted = event
    decoded = None
    if marker is not None:
        batch_id, position, offset, allows_gap = marker
        decoded = BatchMarker(batch_id, decode_position(position), offset, allows_gap)
    return ChangelogUnit(partition, pairs, batch_ids, offsets, decoded, next_offset, compacted)


def _encoded(event: Event, epoch: int) -> tuple[Any, ...]:
    tp = event.partition
    if isinstance(event, OffsetOutOfRange):
        return ("lost", tp.topic, tp.partition, epoch, event.offset)
    marker = event.marker
    encoded_marker = (
        None
        if marker is None
        else (marker.batch_id, encode_position(marker.position), marker.offset, marker.allows_gap)
    )
    return (
        "unit",
        tp.topic,
        tp.partition,
        epoch,
        event.pairs,
        event.batch_ids,
        event.offsets,
        encoded_marker,
        event.next_offset,
        event.compacted,
    )


def _write_frame(stream: IO[bytes], value: tuple[Any, ...]) -> None:
    data = marshal.dumps(value)
    view = memoryview(_FRAME.pack(len(data)) + data)
    while view:
        written = stream.write(view)
        view = view[written or 0 :]


def _read_frame(stream: IO[bytes]) -> tuple[Any, ...] | None:
    """The next frame of an unbuffered stream, or `None` at its end."""
    header = _read_exactly(stream, _FRAME.size)
    if header is None:
        return None
    data = _read_exactly(stream, _FRAME.unpack(header)[0])
    if data is None:
        return None
    value: tuple[Any, ...] = marshal.loads(data)
    return value


def _read_exactly(stream: IO[bytes], size: int) -> bytearray | None:
    data = bytearray(size)
    view = memoryview(data)
    while view:
        read = stream.readinto(view)  # type: ignore[attr-defined]
        if not read:
            return None
        view = view[read:]
    return data


def _serve(arguments: dict[str, Any], commands: IO[bytes], answers: IO[bytes]) -> None:
    """A worker: obey `commands`, send what the reader reads to `answers`, until the
    commands end."""
    cluster = ClusterSettings(
        arguments["bootstrap_servers"],
        timeout=arguments["timeout"],
        client_config=arguments["client_config"],
    )
    reader = ChangelogConsumer(
        cluster,
        max_records=arguments["max_records"],
        max_held_records=arguments["max_held_records"],
    )
    epochs: dict[tuple[str, int], int] = {}
    told: list[tuple[str, int, int, int | None, int, int | None]] = []
    selector = selectors.DefaultSelector()
    selector.register(commands, selectors.EVENT_READ)
    try:
        while True:
            waiting = 0.0 if epochs else None  # nothing assigned: wait for a command
            while selector.select(waiting):
                command = _read_frame(commands)
                if command is None:
                    return
                _obey(reader, epochs, command)
                waiting = 0.0
            if not epochs:
                continue
            events = reader.read(_WORKER_POLL)
            encoded = []
            for event in events:
                key = (event.partition.topic, event.partition.partition)
                encoded.append(_encoded(event, epochs[key]))
                if isinstance(event, OffsetOutOfRange):
                    del epochs[key]
            progress = []
            for (topic, number), epoch in epochs.items():
                tp = TopicPartition(topic, number)
                progress.append(
                    (
                        topic,
                        number,
                        epoch,
                        reader.position(tp),
                        reader.skipped(tp),
                        reader.settled(tp),
                    )
                )
            if encoded or progress != told:
                _write_frame(answers, ("read", encoded, progress))
                told = progress
    except BrokenPipeError:
        return  # the follower closed its end (or died): nobody to answer
    except Exception as exc:  # told to the follower, which replaces the reader
        with contextlib.suppress(OSError):
            _write_frame(answers, ("error", f"{type(exc).__name__}: {exc}"))
    finally:
        reader.close()


def _obey(reader: ChangelogConsumer, epochs: dict[tuple[str, int], int], command: Any) -> None:
    if command[0] == "assign":
        _, topic, number, offset, epoch, look_back = command
        reader.unassign(TopicPartition(topic, number))
        reader.assign(TopicPartition(topic, number), offset, look_back=look_back)
        epochs[(topic, number)] = epoch
    elif command[0] == "unassign":
        _, topic, number = command
        reader.unassign(TopicPartition(topic, number))
        epochs.pop((topic, number), None)


def main() -> None:
    """Run a worker: frames are the stdout's alone (anything printed goes to stderr)."""
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb", buffering=0)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    commands = os.fdopen(os.dup(sys.stdin.fileno()), "rb", buffering=0)
    _serve(json.loads(sys.argv[1]), commands, answers)


if __name__ == "__main__":
    main()
