"""`iqstate status URL`: the cluster as one instance sees it, as tables in the terminal.

It asks the instance at URL for `/v1/health` and `/v1/cluster` and shows:
- a line on the instance asked: `ok`, `degraded` (with how long Kafka has been silent) or
  unreachable;
- each instance: live, or gone and why; its actives (running, restoring, cut off), its
  standbys, and the changelog offsets its replicas are behind (`?` while one is unknown);
- each store partition: where its active runs, in which state, and its standbys with
  their lags.
`--watch` redraws every `--interval` seconds until Ctrl-C, and keeps trying while the
instance does not answer.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Mapping
from typing import Any

import httpx
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

ACTIVE_STATES = ("RUNNING", "RESTORING", "CUT_OFF")


class StatusError(Exception):
    """The instance asked did not answer, or not with its status."""


def fetch(
    url: str, token: str | None, verify: bool | ssl.SSLContext = True, timeout: float = 5.0
) -> tuple[dict[str, Any], list[Any]]:
    """The instance's `/v1/health` and `/v1/cluster` documents; `StatusError` saying why not."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    base = url.rstrip("/")
    try:
        with httpx.Client(timeout=timeout, headers=headers, verify=verify) as http:
            health = http.get(f"{base}/v1/health")
            cluster = http.get(f"{base}/v1/cluster")
    except httpx.HTTPError as exc:
        raise StatusError(f"{base} did not answer: {exc}{_connection_hint(base, exc)}") from exc
    if cluster.status_code != 200:
        raise StatusError(
            f"{base}/v1/cluster answered {cluster.status_code}: {cluster.text[:200]}"
            f"{_refusal_hint(cluster.status_code, token)}"
        )
    try:
        return health.json(), cluster.json()
    except ValueError as exc:
        raise StatusError(f"{base} did not answer with JSON: {exc}") from exc


def _connection_hint(base: str, exc: httpx.HTTPError) -> str:
    """What to change when the connection failed the way a wrong scheme or CA makes it."""
    text = str(exc)
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return (
            "; give --tls-ca the CA bundle that signed the instance's certificate "
            "(iqstate serve's --tls-ca)"
        )
    if "WRONG_VERSION_NUMBER" in text or "record layer failure" in text:
        return "; the instance serves plain http: use an http:// URL, without --tls-ca"
    if base.startswith("http://") and isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
        return (
            "; if the instance serves TLS (iqstate serve --tls-cert), use an https:// URL "
            "with --tls-ca"
        )
    return ""


def _refusal_hint(status: int, token: str | None) -> str:
    if status != 401:
        return ""
    if token is None:
        return "; the instance asks for a bearer token: name its variable with --token-env"
    return "; the instance refused the token in --token-env's variable"


def render(url: str, health: Mapping[str, Any], cluster: list[Any]) -> RenderableType:
    """The status line and the two tables."""
    return Group(_headline(url, health), _instances(cluster), _partitions(cluster))


def _headline(url: str, health: Mapping[str, Any]) -> Text:
    status = str(health.get("status", "unknown"))
    line = Text(f"{url}: ")
    style = {"ok": "bold green", "degraded": "bold yellow"}.get(status, "bold red")
    line.append(status, style=style)
    line.append(f" ({health.get('state', '?')})")
    silence = health.get("broker_silence_s")
    if silence is not None:
        line.append(f", Kafka last heard {silence:g} s ago")
    return line


_SHORT_ADDRESS = 24
"""Addresses up to this long (an IP address and port) are never broken across lines;
longer ones (cloud host names) fold onto more lines in a narrow terminal. Neither is cut
short: the address, port included, is what tells the rows apart."""


def _address(instance: Mapping[str, Any]) -> str:
    return f"{instance['host']}:{instance['port']}"


def _address_column(table: Table, title: str, cluster: list[Any]) -> None:
    widest = max((len(_address(instance)) for instance in cluster), default=0)
    table.add_column(title, no_wrap=widest <= _SHORT_ADDRESS, overflow="fold")


def _instances(cluster: list[Any]) -> Table:
    table = Table(title="instances", title_justify="left")
    _address_column(table, "instance", cluster)
    table.add_column("state", overflow="fold")  # what wraps first in a narrow terminal
    for column in ("running", "restoring", "cut off", "standbys", "lag"):
        table.add_column(column, justify="right", no_wrap=True)  # a count cut says nothing
    for instance in cluster:
        replicas = instance["replicas"]
        roles = [replica["role"] for replica in replicas]
        lags = [replica["lag"] for replica in replicas]
        name = _address(instance)
        departure = instance.get("departure")
        if not instance["live"]:  # its partitions have moved: nothing to count
            gone = f"gone: {departure['reason']}, {departure['seconds_ago']:g} s ago"
            table.add_row(name, Text(gone, style="red"), *["-"] * 5)
            continue
        table.add_row(
            name,
            Text("live", style="green"),
            str(roles.count("RUNNING")),
            str(roles.count("RESTORING")),
            str(roles.count("CUT_OFF")),
            str(roles.count("STANDBY")),
            "?" if None in lags else str(sum(lags)),
        )
    return table


def _partitions(cluster: list[Any]) -> Table:
    table = Table(title="partitions", title_justify="left")
    table.add_column("store", overflow="fold")
    table.add_column("partition", justify="right", no_wrap=True)
    _address_column(table, "active", cluster)
    table.add_column("state", no_wrap=True)
    table.add_column("standbys (lag)", overflow="fold")  # wraps between its entries first
    placed: dict[tuple[str, int], dict[str, Any]] = {}
    for instance in cluster:
        where = _address(instance)
        for replica in instance["replicas"]:
            entry = placed.setdefault((replica["store"], replica["partition"]), {"standbys": []})
            if replica["role"] in ACTIVE_STATES:
                entry["active"], entry["state"] = where, replica["role"]
            else:
                lag = "?" if replica["lag"] is None else replica["lag"]
                entry["standbys"].append(f"{where} ({lag})")
    for (store, partition), entry in sorted(placed.items()):
        state = entry.get("state", "none")
        table.add_row(
            store,
            str(partition),
            entry.get("active", "-"),
            Text(state, style="green" if state == "RUNNING" else "yellow"),
            ", ".join(entry["standbys"]) or "-",
        )
    return table


def show(
    url: str, token: str | None, console: Console, verify: bool | ssl.SSLContext = True
) -> int:
    """Print the status once: 0, or 1 with the reason when the instance does not answer."""
    try:
        health, cluster = fetch(url, token, verify)
    except StatusError as exc:
        console.print(f"iqstate status: {exc}", style="red")
        return 1
    console.print(render(url, health, cluster))
    return 0


def watch(
    url: str,
    token: str | None,
    console: Console,
    interval: float,
    verify: bool | ssl.SSLContext = True,
) -> int:
    """Redraw the status every `interval` seconds until Ctrl-C (then 0)."""

    def current() -> RenderableType:
        try:
            health, cluster = fetch(url, token, verify)
        except StatusError as exc:
            return Text(f"{time.strftime('%H:%M:%S')} {exc}", style="red")
        return Group(Text(time.strftime("%H:%M:%S"), style="dim"), render(url, health, cluster))

    try:
        with Live(current(), console=console, auto_refresh=False) as live:
            while True:
                time.sleep(interval)
                live.update(current(), refresh=True)
    except KeyboardInterrupt:
        return 0
