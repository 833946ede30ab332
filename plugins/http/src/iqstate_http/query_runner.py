"""`POST /v1/query` for the whole cluster (SPEC 8.1, 8.2).

A request of `"scope": "cluster"` (the default) is answered for every requested partition,
wherever it lives: this instance's replicas answer what they may, the rest is forwarded to
the instances whose replicas may (`ReplicaChoice`), one request per instance, in
parallel, round after round until each partition has an answer or has run out of
replicas (`Placement`). `"scope": "local"` and forwarded requests are answered from this
instance's replicas only. `"merge": true` answers one merged page (`paging`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from typing import Any

from starlette.concurrency import run_in_threadpool

from iqstate import (
    Application,
    FailureReason,
    Position,
    PositionBound,
    Query,
    QueryResult,
    StateQueryRequest,
    StateQueryResult,
)
from iqstate.runtime.querying import keyed, locate_key
from iqstate.runtime.spec import StoreSpec
from iqstate_http.codecs import (
    Codecs,
    failure_reason_of,
    json_bytes,
    key_from_json,
    position_from_json,
    position_to_json,
)
from iqstate_http.errors import ApiError
from iqstate_http.forwarding import Forwarded, Forwarder, ForwardFailure
from iqstate_http.local_answers import LocalAnswers, TooManyRows, failure_entry
from iqstate_http.paging import (
    Cursor,
    LocalRows,
    PartitionsFailed,
    RemoteRows,
    chunk_size,
    chunked,
    close_result,
    decode_cursor,
    encode_cursor,
    fingerprint,
    limited,
    merge_page,
    pager_for,
)
from iqstate_http.placement import Placement
from iqstate_http.replica_choice import Replica, ReplicaChoice


@dataclass(frozen=True)
class QueryOptions:
    """One `POST /v1/query`, read and checked."""

    spec: StoreSpec
    query: Query[Any]
    query_json: Any
    partitions: list[int] | None
    bound: PositionBound
    require_active: bool
    execution_info: bool
    acceptable_lag: int | None
    local_only: bool
    max_rows: int
    merge: bool = False
    limit: int = 0
    cursor: str | None = None
    authorization: str | None = None

    @property
    def store(self) -> str:
        return self.spec.name

    @property
    def answers_as_active(self) -> bool:
        """Whether only a running active may answer: asked so, or no lag accepted (cluster
        scope without `acceptable_lag` reads actives only)."""
        return self.require_active or (not self.local_only and self.acceptable_lag is None)

    def forwarded_body(self, partitions: list[int]) -> dict[str, Any]:
        """The request an instance hosting `partitions` answers from its own replicas."""
        return {
            "store": self.store,
            "query": self.query_json,
            "partitions": partitions,
            "bound": position_to_json(self.bound.position) or None,
            "require_active": self.answers_as_active,
            "execution_info": self.execution_info,
            "acceptable_lag": self.acceptable_lag,
            "scope": "local",
            "max_rows": self.max_rows,
        }


def _merged_position(entries: dict[str, dict[str, Any]]) -> Position:
    position = Position.empty()
    for entry in entries.values():
        if entry.get("position"):
            position = position.merge(position_from_json(entry["position"]))
    return position


def _reason(failure: ForwardFailure) -> str:
    return failure_reason_of(failure.code).name


class QueryRunner:
    """Answers `POST /v1/query` (see the module doc)."""

    def __init__(
        self,
        app: Application,
        codecs: Codecs,
        choice: ReplicaChoice,
        forwarder: Forwarder,
        query: Callable[[StateQueryRequest[Any]], StateQueryResult[Any]],
        failed_while_read: Callable[[str, type[Any], int], None],
    ) -> None:
        """`query`: how this instance answers a request (`app.query`, counted);
        `failed_while_read(store, query type, partitions)`: answers `query` counted that
        then failed while encoded (`ServiceMetrics.failed_while_read`)."""
        self.app, self.codecs, self.choice, self.forwarder = app, codecs, choice, forwarder
        self.query, self.failed_while_read = query, failed_while_read

    async def answer(self, options: QueryOptions) -> bytes:
        if options.merge:
            return await run_in_threadpool(self._merged_page, options)
        if options.local_only:
            entries = await run_in_threadpool(self._local_entries, options, options.partitions)
        else:
            entries = await self._cluster_entries(options)
        if sum(map(_rows_in, entries.values())) > options.max_rows:
            raise _too_many(TooManyRows(options.max_rows))
        return json_bytes(
            {
                "store": options.store,
                "partitions": dict(sorted(entries.items(), key=lambda item: int(item[0]))),
                "position": position_to_json(_merged_position(entries)),
            }
        )

    # -- this instance's replicas ----------------------------------------------------------

    def _request(
        self, options: QueryOptions, query: Query[Any], partitions: list[int] | None
    ) -> StateQueryRequest[Any]:
        request = StateQueryRequest.in_store(options.store).with_query(query)
        if partitions is not None:
            request = request.with_partitions(partitions)
        request = request.with_position_bound(options.bound)
        if options.answers_as_active:
            request = request.require_active()
        if options.execution_info:
            request = request.enable_execution_info()
        return request

    def _local_results(
        self, options: QueryOptions, query: Query[Any], partitions: list[int] | None
    ) -> tuple[dict[int, QueryResult[Any]], dict[int, Replica | None]]:
        """This instance's answers, each from a replica that may give it: one whose lag is
        over `acceptable_lag` answers `NOT_ACTIVE` instead."""
        results = dict(self.query(self._request(options, query, partitions)).partition_results)
        lag = options.acceptable_lag
        try:
            replicas = (
                # nothing to decide: the table's state and lag label the answers
                {p: self.choice.local(options.store, p) for p in results}
                if lag is None
                # whether the replica may answer is decided on its state now
                else self.choice.here_now(options.store, results)
            )
        except BaseException:
            for result in results.values():
                close_result(result)
            raise
        if lag is not None:
            for partition, replica in replicas.items():
                if replica is not None and not replica.within(lag):
                    self.choice.invalidate()  # the table may still call it caught up
                    answered = results[partition]
                    close_result(answered)
                    failure: QueryResult[Any] = QueryResult.for_failure(
                        FailureReason.NOT_ACTIVE,
                        f"partition {partition} of store {options.store!r} is "
                        f"{replica.state} here, {_behind(replica.lag)}: over "
                        f"acceptable_lag {lag}",
                    )
                    failure.position = answered.position
                    results[partition] = failure
        return results, replicas

    def _local_entries(
        self, options: QueryOptions, partitions: list[int] | None
    ) -> dict[str, dict[str, Any]]:
        query = options.query
        ranged = chunked(query)
        if ranged is not None:  # more than max_rows is refused: read no more
            query = limited(ranged, options.max_rows + 1)
        results, replicas = self._local_results(options, query, partitions)
        answers = LocalAnswers(self.codecs, options.store, self.choice.this_host, options.max_rows)
        try:
            entries = answers.entries(options.query, results, replicas)
        except TooManyRows as exc:
            raise _too_many(exc) from exc
        if answers.failed_while_read:
            self.failed_while_read(options.store, type(query), answers.failed_while_read)
        return entries

    # -- the cluster -----------------------------------------------------------------------

    def _wanted(self, options: QueryOptions) -> list[int]:
        if options.partitions is not None:
            return options.partitions
        if keyed(options.query):
            located = locate_key(options.spec, getattr(options.query, "key", None))
            if located is not None:
                return [located[0]]
        return list(range(options.spec.partitions))

    async def _cluster_entries(self, options: QueryOptions) -> dict[str, dict[str, Any]]:
        """Every partition's entry, from the replicas `Placement` chooses, asked in parallel
        round by round. The rows held are counted as answers come: past `max_rows` the
        request is refused at once, not once every instance has answered (each may hold up
        to `max_rows`)."""
        placement = Placement(
            self.choice, options.store, self._wanted(options), options.acceptable_lag
        )
        held = 0
        while rounds := placement.next_round():
            asked = {
                asyncio.ensure_future(self._ask(options, replica, partitions)): (
                    replica,
                    partitions,
                )
                for replica, partitions in rounds.items()
            }
            pending = set(asked)
            try:
                while pending:
                    done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                    for task in done:
                        held += self._record(placement, *asked[task], task.result())
                    if held > options.max_rows:
                        raise _too_many(TooManyRows(options.max_rows))
            except BaseException:  # refused (too many rows, busy): nothing more to wait for
                await _abandon(asked, [task for task in pending if asked[task][0].local])
                raise
        return {str(p): entry for p, entry in placement.final.items()}

    def _record(
        self,
        placement: Placement,
        replica: Replica,
        partitions: list[int],
        answer: dict[str, dict[str, Any]] | ForwardFailure,
    ) -> int:
        """Record one instance's answer for `partitions` (a failure to retry elsewhere, or
        an entry each); the rows its entries hold."""
        if isinstance(answer, ForwardFailure):
            if answer.unreachable:
                self.choice.invalidate()
            for partition in partitions:
                placement.retry(
                    partition, failure_entry(_reason(answer), answer.message, replica.host, replica)
                )
            return 0
        rows = 0
        for partition in partitions:
            entry = answer.get(str(partition)) or failure_entry(
                "NOT_PRESENT", f"{replica.host} did not answer partition {partition}",
                replica.host, replica,
            )  # fmt: skip
            placement.record(partition, entry)
            rows += _rows_in(entry)
        return rows

    async def _ask(
        self, options: QueryOptions, replica: Replica, partitions: list[int]
    ) -> dict[str, dict[str, Any]] | ForwardFailure:
        if replica.local:
            local = replace(options, local_only=False)
            return await run_in_threadpool(self._local_entries, local, partitions)
        answer = await self.forwarder.post(
            replica.host, "/v1/query", options.forwarded_body(partitions), options.authorization
        )
        if isinstance(answer, ForwardFailure):
            _raise_refusal(answer)
            return answer
        entries: dict[str, dict[str, Any]] = answer.json()["partitions"]
        return entries

    # -- merged pages ----------------------------------------------------------------------

    def _merged_page(self, options: QueryOptions) -> bytes:
        spec = options.spec
        pager = pager_for(self.codecs.by_type.get(type(options.query)))
        descending = pager.descending(options.query)
        query_fingerprint = fingerprint(spec.name, options.query_json)
        cursor = (
            None if options.cursor is None else decode_cursor(options.cursor, query_fingerprint)
        )
        if cursor is not None:
            options = replace(
                options,
                bound=PositionBound.at(cursor.position.merge(options.bound.position)),
            )
        serialize = spec.key_serde.serialize
        start = None if cursor is None else spec.key_serde.deserialize(cursor.after)
        query, within = pager.resumed(options.query, start, serialize)
        # the partitions asked (none for `[]`, as unmerged), else all of them
        wanted = list(range(spec.partitions)) if options.partitions is None else options.partitions
        # A range is read a chunk at a time: about each partition's share of the page.
        ranged = chunked(query)
        chunk = chunk_size(options.limit + 1, 1, max(1, len(wanted)))
        first_read = query if ranged is None else limited(ranged, chunk)
        placement = Placement(
            self.choice, spec.name, wanted, options.acceptable_lag, options.local_only
        )
        sources: list[Any] = []
        position = Position.empty() if cursor is None else cursor.position
        remotes: list[RemoteRows] = []
        locals_: list[LocalRows] = []
        try:
            while rounds := placement.next_round():
                local = [p for r, ps in rounds.items() if r.local for p in ps]
                remote = [(r, ps) for r, ps in rounds.items() if not r.local]
                if local:
                    results, replicas = self._local_results(options, first_read, local)
                    for partition, result in sorted(results.items()):
                        if result.is_failure:
                            placement.record(
                                partition,
                                failure_entry(
                                    result.failure_reason.name, result.failure_message,
                                    self.choice.this_host, replicas.get(partition),
                                ),
                            )  # fmt: skip
                            continue
                        placement.record(partition, {"ok": True})
                        local_rows = LocalRows(
                            (options.store, partition), result,
                            self._partition_reader(options, partition),
                            ranged, chunk, serialize, pager, within,
                            None if cursor is None else cursor.after,
                        )  # fmt: skip
                        locals_.append(local_rows)
                        sources.append(iter(local_rows))
                firsts = self._first_chunks(options, remote, len(wanted))
                for (replica, partitions), first in zip(remote, firsts, strict=True):
                    self._place_chunk(placement, replica, partitions, first)
                    if isinstance(first, Forwarded):
                        remote_rows = RemoteRows(
                            first.json(),
                            self._chunk_fetch(options, replica, partitions, len(wanted)),
                            lambda key: _key_bytes(spec, key),
                        )
                        remotes.append(remote_rows)
                        sources.append(iter(remote_rows))
            failed = {
                p: (e["failure"], e["message"]) for p, e in placement.final.items() if not e["ok"]
            }
            if failed:
                raise _unavailable(PartitionsFailed(failed))
            try:
                rows, last, more = merge_page(sources, options.limit, descending)
            except PartitionsFailed as exc:
                raise _unavailable(exc) from exc
        finally:  # every path, a refusal by another instance too, closes what was opened
            for source in sources:
                source.close()
            for local_rows in locals_:
                local_rows.close()
        for remote_rows in remotes:
            position = position.merge(remote_rows.position)
        for local_rows in locals_:
            position = position.merge(local_rows.position)
        following = (
            encode_cursor(Cursor(last, position), query_fingerprint)
            if more and last is not None
            else None
        )
        return json_bytes(
            {
                "store": spec.name,
                "rows": rows,
                "next": following,
                "position": position_to_json(position),
            }
        )

    def _partition_reader(
        self, options: QueryOptions, partition: int
    ) -> Callable[[Query[Any]], QueryResult[Any]]:
        """Reads one more chunk of a local partition, as the page's first read was made."""

        def read(query: Query[Any]) -> QueryResult[Any]:
            result = self.query(self._request(options, query, [partition]))
            return result.partition_results[partition]

        return read

    def _merged_body(
        self, options: QueryOptions, partitions: list[int], limit: int, cursor: str | None
    ) -> dict[str, Any]:
        return {
            **options.forwarded_body(partitions),
            "merge": True,
            "limit": limit,
            "cursor": cursor,
        }

    def _first_chunks(
        self, options: QueryOptions, remote: list[tuple[Replica, list[int]]], of: int
    ) -> list[Forwarded | ForwardFailure]:
        if not remote:
            return []
        calls = [
            (
                replica.host,
                self._merged_body(
                    options, ps, chunk_size(options.limit, len(ps), of), options.cursor
                ),
            )
            for replica, ps in remote
        ]
        return self.forwarder.post_all_from_thread(calls, options.authorization)

    def _place_chunk(
        self,
        placement: Placement,
        replica: Replica,
        partitions: list[int],
        first: Forwarded | ForwardFailure,
    ) -> None:
        """Record a remote instance's first chunk: its partitions answered, or each one's
        failure (a partition the instance did not name failing is asked there again)."""
        if isinstance(first, Forwarded):
            for partition in partitions:
                placement.record(partition, {"ok": True})
            return
        _raise_refusal(first)
        if first.unreachable:
            self.choice.invalidate()
        named = first.partitions or {}
        for partition in partitions:
            detail = named.get(str(partition))
            if detail is not None:
                placement.record(
                    partition,
                    failure_entry(detail["failure"], detail["message"], replica.host, replica),
                )
            elif named:
                placement.again(partition)
            else:
                placement.retry(
                    partition, failure_entry(_reason(first), first.message, replica.host, replica)
                )

    def _chunk_fetch(
        self, options: QueryOptions, replica: Replica, partitions: list[int], of: int
    ) -> Any:
        limit = chunk_size(options.limit, len(partitions), of)

        def fetch(cursor: str | None) -> dict[str, Any]:
            body = self._merged_body(options, partitions, limit, cursor)
            answer = self.forwarder.post_from_thread(
                replica.host, "/v1/query", body, options.authorization
            )
            if isinstance(answer, ForwardFailure):
                _raise_refusal(answer)
                named = answer.partitions or {}
                raise PartitionsFailed(
                    {
                        p: (
                            named[str(p)]["failure"] if str(p) in named else _reason(answer),
                            named[str(p)]["message"] if str(p) in named else answer.message,
                        )
                        for p in partitions
                    }
                )
            chunk: dict[str, Any] = answer.json()
            return chunk

        return fetch


def _key_bytes(spec: StoreSpec, key_json: Any) -> bytes:
    """A row's key as the store orders it: its JSON form read for the key serde."""
    return spec.key_serde.serialize(key_from_json(spec, key_json))


def _rows_in(entry: dict[str, Any]) -> int:
    """The rows a partition's entry holds (a range's pairs)."""
    value = entry.get("value")
    return len(value) if isinstance(value, list) else 0


async def _abandon(
    asked: Collection[asyncio.Future[Any]], local: list[asyncio.Future[Any]]
) -> None:
    """Stop waiting for the answers `asked` of a refused request: the forwarded ones still
    pending are cancelled; a local read runs in a thread, which cannot be stopped, so the
    pending `local` ones are waited for (until one ends, the range it reads still counts
    against the range limits). Failures besides the one refusing are dropped."""
    for task in asked:
        if task not in local:
            task.cancel()
    if local:
        await asyncio.wait(local)
    for task in asked:
        if task.done() and not task.cancelled():
            task.exception()  # retrieved: asyncio does not log it as never retrieved


def _raise_refusal(failure: ForwardFailure) -> None:
    """A forwarded request the other instance refused as a whole (too many rows, a bad
    request, busy with ranges) refuses this request too, as it was refused there."""
    if failure.status in (400, 422):
        raise ApiError(failure.status, failure.code, failure.message)
    if failure.code == "busy":
        raise ApiError(503, "busy", failure.message, {"Retry-After": "1"})


def _too_many(exc: TooManyRows) -> ApiError:
    return ApiError(422, "too_many_rows", str(exc))


def _unavailable(exc: PartitionsFailed) -> ApiError:
    partitions = {
        str(p): {"failure": reason, "message": message}
        for p, (reason, message) in exc.failures.items()
    }
    return ApiError(503, "partitions_unavailable", str(exc), details={"partitions": partitions})


def _behind(lag: int | None) -> str:
    return "its lag unknown" if lag is None else f"{lag} records behind"
