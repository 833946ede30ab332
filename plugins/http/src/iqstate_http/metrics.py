"""`GET /metrics`: the service in Prometheus' text format, through `prometheus_client`.

Recording sits on the hot paths (every query and every request), where `prometheus_client`'s
own counters and histograms would cost a lock and, for a histogram, a Python loop over the
buckets per observation. So recording only appends to a queue (`ServiceMetrics.query`,
`record_request`), which is added up in batches, and a collector turns the totals into
metric families when Prometheus scrapes. Values that already exist
elsewhere (replica lags, commit durations, changelog records applied and skipped, live
instances, Kafka's silence) are read then too. Labels are bounded: store, query type,
outcome, partition, role, route template, status and reason; never a key or a raw path.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from time import perf_counter
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from iqstate import Application, FailureReason, QueryResult, StateQueryRequest, StateQueryResult
from iqstate.queries import (
    LimitedRangeQuery,
    LimitedTimestampedRangeQuery,
    LimitedVersionedRangeQuery,
)

PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"
"""The media type of `/metrics`: Prometheus' text format, version 0.0.4 (what
`generate_latest` writes, and every Prometheus reads)."""

DURATION_BUCKETS = (
    0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025,
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
)  # fmt: skip
"""Upper bounds (seconds) of the query duration histogram: a key lookup takes microseconds,
a forwarded page of a range tens of milliseconds."""


_AS_ASKED: dict[type[Any], str] = {
    LimitedRangeQuery: "RangeQuery",
    LimitedTimestampedRangeQuery: "TimestampedRangeQuery",
    LimitedVersionedRangeQuery: "VersionedRangeQuery",
}
"""Query types the service runs on a caller's behalf, labelled as the query asked: a page of
a range reads its partitions with bounded reads (`LimitedRangeQuery` and the like), each
counted."""


FOLD_EVERY = 512
"""Recorded queries and requests wait in a queue until this many have, then one thread adds
them up: a few thousand bytes wait at most, and the hot path only appends."""


class _QuerySeries:
    """One store's queries of one type: successes, failures per reason, and the durations'
    histogram (a count per bucket, the last above every bound)."""

    __slots__ = ("buckets", "failures", "seconds", "successes")

    def __init__(self) -> None:
        self.successes = 0
        self.failures: dict[str, int] = {}
        self.buckets = [0] * (len(DURATION_BUCKETS) + 1)
        self.seconds = 0.0

    def merge(self, other: _QuerySeries) -> None:
        """Add `other`'s counts to these."""
        self.successes += other.successes
        for reason, count in other.failures.items():
            self.failures[reason] = self.failures.get(reason, 0) + count
        self.buckets = [a + b for a, b in zip(self.buckets, other.buckets, strict=True)]
        self.seconds += other.seconds

    def outcomes(self) -> dict[str, int]:
        """Counts by outcome label: 'success' and each failure reason seen."""
        counted = {"success": self.successes} if self.successes else {}
        return counted | self.failures


_Failed = tuple[FailureReason | None, ...]
"""A query's outcome when a partition failed: each partition's failure reason (None for
those that answered). A query whose partitions all answered is recorded as their number."""


_ASKED_ELSEWHERE = frozenset({FailureReason.NOT_ACTIVE, FailureReason.NOT_PRESENT})


def _refused_here(answers: Iterable[QueryResult[Any]]) -> bool:
    """Every answer is a refusal to read this replica (another replica may answer)."""
    return all(
        answer.is_failure and answer.failure_reason in _ASKED_ELSEWHERE for answer in answers
    )


class ServiceMetrics:
    """What one `QueryService` counts, and its `/metrics` document.

    Recording appends to a `deque` (atomic, no lock, safe from any thread) and every
    `FOLD_EVERY` records one thread adds the queue up into the totals under a lock; a scrape
    adds up what is left first. Measured in bench/metrics_cost.py: adding up per record, on
    the request's own path, cost over HTTP several times what it costs in a tight loop."""

    def __init__(self, app: Application, forwarded: Callable[[], int]) -> None:
        """`forwarded`: how many requests this instance has forwarded to another."""
        self._app = app
        self._pending_queries: deque[tuple[str, type[Any], float | None, int | _Failed]] = deque()
        self._pending_requests: deque[tuple[str, int]] = deque()
        self._fold_lock = threading.Lock()
        self._queries: dict[tuple[str, type[Any]], _QuerySeries] = {}
        self._requests: dict[tuple[str, int], int] = {}
        self._counted_elsewhere: list[tuple[tuple[str, int], Callable[[], int]]] = []
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Families(app, self.snapshot, forwarded))

    def query(
        self, request: StateQueryRequest[Any], *, asked_elsewhere_if_refused: bool = False
    ) -> StateQueryResult[Any]:
        """`app.query(request)`, counted and timed (a request no partition here answered
        is not counted: it is answered elsewhere, and counted there).

        `asked_elsewhere_if_refused`: the request tries this instance first and goes to
        another replica when this one is not the replica it may read (`NOT_ACTIVE`,
        `NOT_PRESENT`); such a refusal is not counted either (a forwarded key lookup is
        no failure; one that no replica answers is counted by `unanswered`)."""
        started = perf_counter()
        result = self._app.query(request)
        seconds = perf_counter() - started
        answers = result.partition_results
        if answers and not (asked_elsewhere_if_refused and _refused_here(answers.values())):
            outcome: int | _Failed = len(answers)
            for answer in answers.values():
                if answer.is_failure:
                    outcome = tuple(
                        each.failure_reason if each.is_failure else None
                        for each in answers.values()
                    )
                    break
            pending = self._pending_queries
            pending.append((request.store_name, type(request.query), seconds, outcome))
            if len(pending) >= FOLD_EVERY:
                self._fold()
        return result

    def unanswered(self, store: str, query: type[Any], reason: FailureReason) -> None:
        """A query that no replica answered, counted where it arrived with the last reason
        it was refused for (not timed: nothing ran it to the end)."""
        pending = self._pending_queries
        pending.append((store, query, None, (reason,)))
        if len(pending) >= FOLD_EVERY:
            self._fold()

    def failed_while_read(self, store: str, query: type[Any], partitions: int) -> None:
        """`partitions` that `query` counted as answered but whose answers failed while they
        were read (a lazy range meeting a record its serde cannot decode): counted as
        `STORE_EXCEPTION` instead."""
        pending = self._pending_queries
        pending.append((store, query, None, -partitions))  # no longer successes
        pending.append((store, query, None, (FailureReason.STORE_EXCEPTION,) * partitions))
        if len(pending) >= FOLD_EVERY:
            self._fold()

    def record_request(self, route: str, status: int) -> None:
        """One HTTP request answered: its route template and status."""
        pending = self._pending_requests
        pending.append((route, status))
        if len(pending) >= FOLD_EVERY:
            self._fold()

    def count_elsewhere(self, route: str, status: int, count: Callable[[], int]) -> None:
        """Requests of `route` answered with `status` that a hot path counts itself (in an
        integer of its own, on one thread): `count()` is added to what is recorded here."""
        self._counted_elsewhere.append(((route, status), count))

    def _fold(self) -> None:
        """Add the queued records up into the totals (each record is taken off the queue
        once, by whichever thread gets it)."""
        with self._fold_lock:
            queries, requests = self._queries, self._requests
            pending_queries, pending_requests = self._pending_queries, self._pending_requests
            for _ in range(len(pending_queries)):
                store, kind, seconds, outcome = pending_queries.popleft()
                series = queries.get((store, kind))
                if series is None:
                    series = queries[(store, kind)] = _QuerySeries()
                if seconds is not None:
                    series.buckets[bisect_left(DURATION_BUCKETS, seconds)] += 1
                    series.seconds += seconds
                if isinstance(outcome, int):
                    series.successes += outcome
                    continue
                for reason in outcome:
                    if reason is None:
                        series.successes += 1
                    else:
                        name = reason.name.lower()
                        series.failures[name] = series.failures.get(name, 0) + 1
            for _ in range(len(pending_requests)):
                key = pending_requests.popleft()
                requests[key] = requests.get(key, 0) + 1

    def document(self) -> bytes:
        """The text format Prometheus scrapes."""
        return generate_latest(self.registry)

    def snapshot(self) -> tuple[dict[tuple[str, str], _QuerySeries], dict[tuple[str, int], int]]:
        """Everything recorded so far: queries by (store, query type name), requests by
        (route, status)."""
        self._fold()
        queries: dict[tuple[str, str], _QuerySeries] = {}
        with self._fold_lock:
            for (store, kind), series in self._queries.items():
                name = (store, _AS_ASKED.get(kind) or kind.__name__)
                queries.setdefault(name, _QuerySeries()).merge(series)
            requests = dict(self._requests)
        for key, count in self._counted_elsewhere:
            requests[key] = requests.get(key, 0) + count()
        return queries, requests


class _Families(Collector):
    """The metric families, made when Prometheus scrapes."""

    def __init__(
        self,
        app: Application,
        snapshot: Callable[
            [], tuple[dict[tuple[str, str], _QuerySeries], dict[tuple[str, int], int]]
        ],
        forwarded: Callable[[], int],
    ) -> None:
        self._app, self._snapshot, self._forwarded = app, snapshot, forwarded

    def collect(self) -> Iterator[Metric]:
        queries, requests = self._snapshot()
        yield from _query_families(queries)
        http = CounterMetricFamily(
            "iqstate_http_requests", "HTTP requests answered", labels=["route", "status"]
        )
        for (route, status), count in sorted(requests.items()):
            http.add_metric([route, str(status)], count)
        yield http
        yield CounterMetricFamily(
            "iqstate_forwarded_requests",
            "requests this instance forwarded to another",
            value=self._forwarded(),
        )
        yield from _replica_families(self._app)


def _query_families(queries: Mapping[tuple[str, str], _QuerySeries]) -> Iterator[Metric]:
    counts = CounterMetricFamily(
        "iqstate_queries",
        "queries answered here, per partition: outcome 'success' or the failure reason",
        labels=["store", "query", "outcome"],
    )
    durations = HistogramMetricFamily(
        "iqstate_query_duration_seconds",
        "time to answer a query here",
        labels=["store", "query"],
    )
    for (store, query), series in sorted(queries.items()):
        for outcome, count in sorted(series.outcomes().items()):
            counts.add_metric([store, query, outcome], count)
        durations.add_metric(
            [store, query], _cumulative(DURATION_BUCKETS, series.buckets), series.seconds
        )
    yield counts
    yield durations


def _cumulative(bounds: Sequence[float], counts: Sequence[int]) -> list[tuple[str, int]]:
    """Per-bucket counts (the last above every bound) as Prometheus' cumulative buckets."""
    cumulative, buckets = 0, []
    for bound, count in zip((*bounds, float("inf")), counts, strict=True):
        cumulative += count
        buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
    return buckets


def _replica_families(app: Application) -> Iterator[Metric]:
    """Lags, commits, changelog records, live instances and Kafka's silence, as this
    instance knows them now."""
    lags = GaugeMetricFamily(
        "iqstate_replica_lag_offsets",
        "changelog records a replica hosted here is behind (absent while unknown)",
        labels=["store", "partition", "role"],
    )
    roles = app.roles()
    for store, partitions in sorted(app.all_local_store_partition_lags().items()):
        for partition, lag in sorted(partitions.items()):
            role = roles.get(store, {}).get(partition)
            if lag.offset_lag is not None and role is not None:
                lags.add_metric([store, str(partition), role.state], lag.offset_lag)
    yield lags
    commits = HistogramMetricFamily(
        "iqstate_commit_duration_seconds",
        "time of a batch's store commit (data, offsets, position and fence at once)",
        labels=["store"],
    )
    for store, durations in sorted(app.commit_durations().items()):
        commits.add_metric(
            [store], _cumulative(durations.bounds, durations.counts), durations.total
        )
    yield commits
    counts = app.changelog_counts()
    if counts is not None:
        restored = CounterMetricFamily(
            "iqstate_restored_records",
            "changelog records applied to the replicas hosted here",
            labels=["store"],
        )
        by_store: dict[str, int] = {}
        for (store, _), applied in counts.applied.items():
            by_store[store] = by_store.get(store, 0) + applied
        for store, applied in sorted(by_store.items()):
            restored.add_metric([store], applied)
        yield restored
        skipped = CounterMetricFamily(
            "iqstate_changelog_records_skipped",
            "changelog records not applied: undecodable, refused (gap, stray), or of a batch "
            "older than the partition's last (behind)",
            labels=["store", "reason"],
        )
        by_reason: dict[tuple[str, str], int] = {}
        for (store, _), reasons in counts.skipped.items():
            for reason, count in reasons.items():
                by_reason[(store, reason)] = by_reason.get((store, reason), 0) + count
        for (store, reason), count in sorted(by_reason.items()):
            skipped.add_metric([store, reason], count)
        yield skipped
    cluster = app.cluster_status()
    live = sum(1 for status in cluster if status.live)
    yield GaugeMetricFamily("iqstate_cluster_live_instances", "live instances", value=live)
    contact = app.cluster_contact()
    # Cut off from Kafka past the liveness timeout, the view it last read still names it
    # live, but the others have dropped it: it is no member then.
    member = (contact is None or not contact.lost) and any(
        status.live and status.host_info == app.host_info for status in cluster
    )
    yield GaugeMetricFamily(
        "iqstate_cluster_member",
        "1 when this instance counts itself a live member of its cluster (its heartbeats "
        "come back), else 0",
        value=int(member),
    )
    if contact is not None:
        yield GaugeMetricFamily(
            "iqstate_broker_silence_seconds",
            "seconds since this instance last heard from Kafka",
            value=contact.silence_s,
        )
