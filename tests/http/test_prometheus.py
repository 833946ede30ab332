"""A real Prometheus (Debian's package) scrapes the service, and the Grafana dashboard and
the alerting rules shipped in docs/ ask it only for what the service exports, in PromQL it
accepts; promtool checks the rules and runs their unit tests."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from iqstate_http import start_background
from support.network import free_port, wait_until_ok

from iqstate import Application

DOCS = Path(__file__).parents[2] / "docs"
DASHBOARD = DOCS / "grafana" / "iqstate-dashboard.json"
ALERTS = DOCS / "prometheus" / "iqstate-alerts.yml"
ALERT_CASES = Path(__file__).parent / "prometheus" / "iqstate-alerts.test.yml"
PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")


def dashboard_queries() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [target["expr"] for panel in panels for target in panel["targets"]]


def test_the_dashboard_asks_only_for_documented_families() -> None:
    documented = set(re.findall(r"`(iqstate_[a-z_]+)`", (DOCS / "http.md").read_text()))
    for expr in dashboard_queries():
        for name in re.findall(r"\biqstate_[a-z_]+", expr):
            family = re.sub(r"_(bucket|sum|count)$", "", name)
            assert family in documented, f"{expr} asks for {name}, which /metrics lacks"
    titles = [panel["title"] for panel in json.loads(DASHBOARD.read_text())["panels"]]
    for wanted in ("Query rate", "Query latency", "Failures", "Lag", "Restore", "Commit"):
        assert any(title.startswith(wanted) for title in titles), wanted


def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_the_alert_rules_ask_only_for_documented_families_and_are_explained() -> None:
    documented = set(re.findall(r"`(iqstate_[a-z_]+)`", (DOCS / "http.md").read_text()))
    operations = (DOCS / "operations.md").read_text()
    for rule in alert_rules():
        for name in re.findall(r"\biqstate_[a-z_]+", rule["expr"]):
            family = re.sub(r"_(bucket|sum|count)$", "", name)
            assert family in documented, f"{rule['alert']} asks for {name}, which /metrics lacks"
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        assert f"`{rule['alert']}`" in operations, f"operations.md does not explain {rule['alert']}"


def test_promtool_accepts_the_alert_rules_and_their_cases_pass() -> None:
    if PROMTOOL is None:
        pytest.skip("Debian's prometheus package is not installed (apt-get install prometheus)")
    checked = subprocess.run(
        [PROMTOOL, "check", "rules", str(ALERTS)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in checked.stdout
    cases = subprocess.run(
        [PROMTOOL, "test", "rules", ALERT_CASES.name],
        cwd=ALERT_CASES.parent, capture_output=True, text=True,
    )  # fmt: skip
    assert cases.returncode == 0, cases.stdout + cases.stderr
    tested = set(re.findall(r"alertname: (\w+)", ALERT_CASES.read_text()))
    assert tested == {rule["alert"] for rule in alert_rules()}, "every alert has its cases"


@pytest.fixture
def prometheus(app: Application, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A Prometheus scraping the service every second: `(its url, the service's url)`."""
    if PROMETHEUS is None:
        pytest.skip("Debian's prometheus package is not installed (apt-get install prometheus)")
    server = start_background(app)
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files: ['{ALERTS}']\n"
        "scrape_configs:\n  - job_name: iqstate\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{server.port}']\n"
    )
    process = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        # While its storage opens, Prometheus listens but answers its API with a 503.
        wait_until_ok(f"{url}/-/ready", process, 60, "Prometheus")
        yield url, server.url
    finally:
        process.terminate()
        process.wait(timeout=30)
        server.stop()


def ask(prometheus_url: str, expr: str) -> dict[str, Any]:
    answer = httpx.get(f"{prometheus_url}/api/v1/query", params={"query": expr}, timeout=10)
    body: dict[str, Any] = answer.json()
    assert body["status"] == "success", f"{expr}: {body}"
    return body


def test_a_real_prometheus_scrapes_the_counts_and_runs_the_dashboard(
    prometheus: tuple[str, str],
) -> None:
    prometheus_url, service_url = prometheus
    for _ in range(3):
        assert httpx.get(f"{service_url}/v1/stores/counts/keys/spark", timeout=5).status_code == 200
    wanted = 'iqstate_queries_total{store="counts",query="KeyQuery",outcome="success"}'
    deadline = time.monotonic() + 60
    while True:
        try:
            found = ask(prometheus_url, wanted)["data"]["result"]
        except httpx.HTTPError:
            found = []
        if found and float(found[0]["value"][1]) == 3:
            break
        assert time.monotonic() < deadline, f"Prometheus never scraped 3 lookups: {found}"
        time.sleep(0.5)
    targets = httpx.get(f"{prometheus_url}/api/v1/targets", timeout=10).json()["data"]
    (target,) = targets["activeTargets"]
    assert target["health"] == "up" and target["lastError"] == ""
    time.sleep(2.5)  # a few more scrapes, so rates have two points
    for expr in dashboard_queries():
        ask(prometheus_url, expr.replace("$job", ".*").replace("$__rate_interval", "1m"))
    latency = ask(
        prometheus_url,
        "histogram_quantile(0.5, sum by (le) "
        '(iqstate_query_duration_seconds_bucket{store="counts",query="KeyQuery"}))',
    )["data"]["result"]
    assert 0 < float(latency[0]["value"][1]) < 1, "a key lookup's median is under a second"
    # Every alerting rule evaluates against the real series, and none fires on a healthy
    # instance.
    groups = httpx.get(f"{prometheus_url}/api/v1/rules", timeout=10).json()["data"]["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    assert {rule["name"] for rule in rules} == {rule["alert"] for rule in alert_rules()}
    for rule in rules:
        assert rule["health"] == "ok" and not rule.get("lastError"), rule
        assert rule["state"] == "inactive", rule
