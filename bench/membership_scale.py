"""Membership at scale, simulated without a broker: the assignor and the members topic.

    python bench/membership_scale.py [--instances 10 100 300] [--partitions 1000 10000]
        [--standbys 1] [--repeat 3] [--baseline OLD_ASSIGNOR.py]

For each N instances x P store partitions (spread over `--stores` stores, `--standbys`
standbys), a cluster is settled first: every instance serves its assignment and has caught
up on the replicas it hosts, which lag by less than `--steady-lag` offsets (they move every
heartbeat). Then, per N x P:

- **assignor**: its time per computation, best of `--repeat`, on the settled reports and on
  the first reports after an instance joins or dies. Every instance runs it on every view
  change; membership publishes at most one change per 50 ms poll, so when lags move (as they
  do under writes) it runs up to `min(N / interval, 20)` times a second: the CPU share printed.
- **heartbeats**: every instance's real heartbeat (the codec's bytes, with the lags of the
  replicas it hosts; key and value bytes), per instance and per second; the members topic
  carries all of them, every instance reads all of them (the broker sends them N times),
  and decodes them: the CPU share printed. A joining instance reads the topic from its
  beginning: the uncompacted segment holds up to `segment.ms` of heartbeats, decoded before
  the join completes (within the cluster's `timeout`).
- **join / death**: rounds of the assignment after one instance joins (cold) or one dies
  (the `N // 2`-th created). Each round, every instance reports what the previous round's
  assignment implies: its actives, lags of the replicas it hosts (a new replica
  starts `--changelog-lag` behind and restores `--restore-rate` offsets a round). Rounds run
  until the assignment no longer changes and no replica is catching up. Printed: the last
  round that changed it, the active hand-overs on the way, actives and standbys that end up
  elsewhere than before, and the replicas restored from scratch on the way.

`--baseline FILE` times another version of `assignor.py` (e.g. `git show
REV:plugins/kafka/src/iqstate_kafka/assignor.py > /tmp/old.py`) on the same reports and
checks that it computes the same assignments.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from iqstate_kafka.assignor import Member, assign
from iqstate_kafka.heartbeats import Heartbeat, decode, encode
from iqstate_kafka.settings import ClusterSettings
from iqstate_kafka.topics import MEMBERS_TOPIC_SETTINGS
from timing import calibration_line, timed

from iqstate.runtime.assignment import Assignment
from iqstate.runtime.batch import StorePartition
from iqstate.runtime.metadata import HostInfo

DEFAULTS = ClusterSettings("localhost:9092")
VIEW_CHANGES_PER_S = 20
"""At most one view change per poll of membership's thread (50 ms): the recompute rate cap."""
KAFKA_MESSAGE_MAX = 1_048_588
"""Kafka's default `message.max.bytes` (broker) and `max.message.bytes` (topic)."""
STORE_NAMES = ("orders-by-customer", "sessions", "inventory", "page-views", "payments")

Assign = Callable[..., dict[HostInfo, Assignment]]


@dataclass(frozen=True)
class Setup:
    stores: dict[str, int]
    standbys: int
    acceptable: int
    steady_lag: int
    changelog_lag: int
    restore_rate: int
    max_rounds: int


@dataclass(frozen=True)
class Episode:
    """What one join or death took until the assignment settled."""

    rounds: int
    """The last round that changed the assignment (0: none did)."""
    settled: bool
    handovers: int
    moved_actives: int
    new_standbys: int
    restored: int


def instance(index: int, rng: random.Random) -> Member:
    """A new instance, cold: its member id looks like `KafkaAssignment`'s."""
    host = HostInfo(f"10.{index >> 16 & 255}.{index >> 8 & 255}.{index & 255}", 7070)
    return Member(f"{host}/{rng.getrandbits(128):032x}", host)


def actives_of(result: Mapping[HostInfo, Assignment]) -> dict[StorePartition, HostInfo]:
    return {
        (store, number): host
        for host, assignment in result.items()
        for store, number, role in assignment.items()
        if role.is_active
    }


def standbys_of(result: Mapping[HostInfo, Assignment]) -> set[tuple[HostInfo, StorePartition]]:
    return {
        (host, (store, number))
        for host, assignment in result.items()
        for store, number, role in assignment.items()
        if not role.is_active
    }


def computed(
    reports: list[Member], setup: Setup, assignor: Assign = assign
) -> dict[HostInfo, Assignment]:
    return assignor(reports, setup.stores, setup.standbys, setup.acceptable)


def serve(
    reports: list[Member],
    result: Mapping[HostInfo, Assignment],
    setup: Setup,
    rng: random.Random,
) -> list[Member]:
    """Every instance's next report once it serves `result`: a new replica starts
    `changelog_lag` behind, a restoring one gets `restore_rate` closer, a caught-up one's lag
    moves within `steady_lag`."""
    following = []
    for member in reports:
        lags = {}
        actives = set()
        for store, number, role in result[member.host].items():
            partition = (store, number)
            before = member.lags.get(partition)
            if before is None:
                lags[partition] = setup.changelog_lag
            elif before <= setup.acceptable:
                lags[partition] = rng.randrange(setup.steady_lag)
            else:
                lags[partition] = max(0, before - setup.restore_rate)
            if role.is_active:
                actives.add(partition)
        following.append(Member(member.member_id, member.host, lags, frozenset(actives)))
    return following


def settle(
    count: int, setup: Setup, rng: random.Random
) -> tuple[list[Member], dict[HostInfo, Assignment]]:
    """`count` instances that serve a settled assignment, caught up on all they host."""
    reports = [instance(index, rng) for index in range(count)]
    result = computed(reports, setup)
    while True:
        reports = [
            Member(
                m.member_id, m.host, {p: rng.randrange(setup.steady_lag) for p in m.lags}, m.actives
            )
            for m in serve(reports, result, setup, rng)
        ]
        following = computed(reports, setup)
        if following == result:
            return reports, result
        result = following


def episode(
    reports: list[Member],
    before: Mapping[HostInfo, Assignment],
    setup: Setup,
    rng: random.Random,
) -> Episode:
    """Rounds from `reports` (just after a join or a death) until nothing changes."""
    previous, last_change, handovers, restored = before, 0, 0, 0
    for round_ in range(1, setup.max_rounds + 1):
        result = computed(reports, setup)
        if result != previous:
            last_change = round_
            was = actives_of(previous)
            handovers += sum(was.get(p) != host for p, host in actives_of(result).items())
        catching_up = any(lag > setup.acceptable for m in reports for lag in m.lags.values())
        if result == previous and not catching_up:
            break
        following = serve(reports, result, setup, rng)
        restored += sum(
            len(n.lags.keys() - m.lags.keys()) for m, n in zip(reports, following, strict=True)
        )
        reports, previous = following, result
    else:
        return Episode(last_change, False, handovers, 0, 0, restored)
    was, now = actives_of(before), actives_of(result)
    return Episode(
        last_change,
        True,
        handovers,
        sum(was.get(p) != host for p, host in now.items()),
        len(standbys_of(result) - standbys_of(before)),
        restored,
    )


def best(operation: Callable[[], object], repeat: int) -> float:
    return min(timed(operation) for _ in range(repeat))


def load_baseline(path: str) -> Assign:
    """`assign` of another version of `assignor.py`."""
    spec = importlib.util.spec_from_file_location("baseline_assignor", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    baseline: Assign = module.assign
    return baseline


def run(
    count: int, partitions: int, args: argparse.Namespace, baseline: Assign | None
) -> dict[str, Any]:
    rng = random.Random(args.seed)
    names = STORE_NAMES[: args.stores]
    stores = {
        name: partitions // len(names) + (i < partitions % len(names))
        for i, name in enumerate(names)
    }
    setup = Setup(
        stores,
        args.standbys,
        DEFAULTS.acceptable_recovery_lag,
        args.steady_lag,
        args.changelog_lag,
        args.restore_rate,
        args.max_rounds,
    )
    interval = args.interval
    reports, settled = settle(count, setup, rng)
    newcomer = instance(count, rng)
    dying = reports[count // 2]
    states = {
        "settled": reports,
        "join": [*reports, newcomer],
        "death": [m for m in reports if m is not dying],
    }
    figures: dict[str, Any] = {"n": count, "p": partitions}
    for name, state in states.items():
        figures[f"assign_{name}"] = best(partial(computed, state, setup), args.repeat)
        if baseline is not None:
            figures[f"baseline_{name}"] = best(
                partial(computed, state, setup, baseline), args.repeat
            )
            figures[f"same_{name}"] = computed(state, setup, baseline) == computed(state, setup)
    worst = max(figures[f"assign_{name}"] for name in states)
    figures["assign_worst"] = worst
    figures["recompute_cpu"] = min(count / interval, VIEW_CHANGES_PER_S) * worst

    heartbeats = [Heartbeat(m, frozenset(), stores) for m in reports]
    values = [encode(h) for h in heartbeats]
    sizes = [len(v) + len(m.member_id) for v, m in zip(values, reports, strict=True)]
    decoding = best(
        lambda: [decode(m.member_id, v) for m, v in zip(reports, values, strict=True)],
        args.repeat,
    )
    topic_rate = sum(sizes) / interval
    segment_s = int(MEMBERS_TOPIC_SETTINGS["segment.ms"]) / 1000
    figures |= {
        "hb_mean": sum(sizes) / count,
        "hb_max": max(sizes),
        "hb_instance_rate": sum(sizes) / count / interval,
        "topic_rate": topic_rate,
        "egress": topic_rate * count,
        "decode_cpu": decoding / interval,
        "decode_rate": sum(sizes) / decoding,
        "join_read": topic_rate * segment_s,
        "join_decode_s": topic_rate * segment_s * decoding / sum(sizes),
        "encode_one": best(lambda: encode(heartbeats[0]), args.repeat),
    }
    figures["join"] = episode([*reports, newcomer], settled, setup, rng)
    figures["death"] = episode(states["death"], settled, setup, rng)
    return figures


def print_figures(f: Mapping[str, Any], args: argparse.Namespace) -> None:
    interval, timeout = args.interval, DEFAULTS.timeout
    print(f"{f['n']} instances x {f['p']:,} partitions:")
    line = ", ".join(
        f"{name} {f[f'assign_{name}'] * 1e3:.1f} ms" for name in ("settled", "join", "death")
    )
    print(
        f"  assign: {line}; worst {f['assign_worst'] / interval:.1%} of the {interval:g} s "
        f"heartbeat interval; recomputing on every view change while lags move: "
        f"{f['recompute_cpu']:.0%} of a core"
    )
    if "baseline_settled" in f:
        line = ", ".join(
            f"{name} {f[f'baseline_{name}'] * 1e3:.1f} ms "
            f"(x{f[f'baseline_{name}'] / f[f'assign_{name}']:.1f}, "
            f"{'same' if f[f'same_{name}'] else 'DIFFERENT'})"
            for name in ("settled", "join", "death")
        )
        print(f"  baseline assign: {line}")
    print(
        f"  heartbeat: {f['hb_mean'] / 1e3:.1f} KB mean, {f['hb_max'] / 1e3:.1f} KB max "
        f"({f['hb_max'] / KAFKA_MESSAGE_MAX:.1%} of Kafka's default 1 MB message); "
        f"{f['hb_instance_rate'] / 1e3:.1f} KB/s per instance, encoded in "
        f"{f['encode_one'] * 1e3:.2f} ms"
    )
    print(
        f"  members topic: {f['topic_rate'] / 1e6:.2f} MB/s written, read by every instance "
        f"(broker egress {f['egress'] / 1e6:,.0f} MB/s); decoding it: "
        f"{f['decode_cpu']:.1%} of a core per instance ({f['decode_rate'] / 1e6:.0f} MB/s)"
    )
    print(
        f"  joining reads up to {f['join_read'] / 1e6:,.0f} MB (segment.ms of heartbeats): "
        f"~{f['join_decode_s']:,.1f} s of decoding, against the {timeout:g} s cluster timeout"
    )
    for name in ("join", "death"):
        e: Episode = f[name]
        status = "" if e.settled else f" (NOT settled after {args.max_rounds} rounds)"
        print(
            f"  one instance {'joins' if name == 'join' else 'dies'}: last change in round "
            f"{e.rounds}{status}; {e.handovers} active hand-overs; net {e.moved_actives} "
            f"actives and {e.new_standbys} standbys moved; {e.restored} replicas restored"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--instances", type=int, nargs="+", default=[10, 100, 300])
    parser.add_argument("--partitions", type=int, nargs="+", default=[1_000, 10_000])
    parser.add_argument("--stores", type=int, default=4, choices=range(1, len(STORE_NAMES) + 1))
    parser.add_argument("--standbys", type=int, default=1)
    parser.add_argument("--interval", type=float, default=DEFAULTS.heartbeat_interval)
    parser.add_argument("--steady-lag", type=int, default=2_000)
    parser.add_argument("--changelog-lag", type=int, default=200_000)
    parser.add_argument("--restore-rate", type=int, default=50_000)
    parser.add_argument("--max-rounds", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=27)
    parser.add_argument("--baseline", help="another assignor.py to time and compare with")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = parser.parse_args()
    baseline = None if args.baseline is None else load_baseline(args.baseline)
    print(calibration_line())
    print(
        f"{args.stores} stores, {args.standbys} standby, acceptable lag "
        f"{DEFAULTS.acceptable_recovery_lag:,}, heartbeat interval {args.interval:g} s; "
        f"steady lags < {args.steady_lag:,}, a new replica starts {args.changelog_lag:,} "
        f"behind and restores {args.restore_rate:,} a round",
        flush=True,
    )
    every = []
    for partitions in args.partitions:
        for count in args.instances:
            figures = run(count, partitions, args, baseline)
            print_figures(figures, args)
            sys.stdout.flush()
            every.append(figures)
    if args.json:
        print(json.dumps(every, default=lambda e: e.__dict__))


if __name__ == "__main__":
    main()
