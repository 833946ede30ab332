"""The state browser page, end to end in real headless Chromium (Debian's chromium)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from iqstate_http import start_background

from iqstate import Application

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).parent.parent.parent / "test-artifacts"
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


@pytest.mark.iqstate_slow
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed")
def test_state_browser_shows_partitions_and_looks_keys_up(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    app = Application("browser", tmp_path)
    app.key_value_store("word-counts", 2, value_serde="int64")
    app.window_store("clicks", 2, 60_000, 3_600_000, key_serde="int64", value_serde="int64")
    with app:
        with app.begin_batch(position={"words": {0: 41}}, batch_id=1) as batch:
            batch.put_all("word-counts", [("spark", 3), ("kafka", 5)])
            batch.put("clicks", 7, 12, window_start=60_000)
            batch.put("clicks", 7, 4, window_start=120_000)
        server = start_background(app)
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
                page = browser.new_page()
                page.goto(server.url + "/")
                page.wait_for_selector("#partitions tbody tr")
                rows = page.locator("#partitions tbody tr").all_inner_texts()
                assert len(rows) == 4
                assert all("RUNNING" in r and '"words"' in r for r in rows)
                served = server.url.removeprefix("http://")
                assert served in page.locator("#instances").inner_text()
                page.select_option("#store", "word-counts")
                page.fill("#key", "kafka")
                page.click("button[type=submit]")
                page.wait_for_function(
                    "document.getElementById('answer').textContent.includes('value')"
                )
                answer = page.locator("#answer").inner_text()
                assert "value: 5" in answer and '"words":{"0":41}' in answer
                page.select_option("#store", "clicks")  # a window store: its windows
                page.fill("#key", "7")
                page.click("button[type=submit]")
                page.wait_for_function(
                    "document.getElementById('answer').textContent.includes('windows')"
                )
                answer = page.locator("#answer").inner_text()
                assert "[60000, 120000): 12; [120000, 180000): 4" in answer
                ARTIFACTS.mkdir(exist_ok=True)
                page.screenshot(path=str(ARTIFACTS / "state-browser.png"), full_page=True)
                browser.close()
        finally:
            server.stop()


@pytest.mark.iqstate_slow
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed")
def test_state_browser_draws_charts_browses_pages_and_warns_when_degraded(
    tmp_path: Path,
) -> None:
    import httpx
    from playwright.sync_api import sync_playwright

    app = Application("charts", tmp_path)
    app.key_value_store("word-counts", 3, value_serde="int64")
    words = {f"word-{n:02d}": n for n in range(45)}
    with app:
        with app.begin_batch(position={"words": {0: 45}}, batch_id=1) as batch:
            batch.put_all("word-counts", list(words.items()))
        server = start_background(app)
        try:
            with sync_playwright() as playwright, httpx.Client(base_url=server.url) as http:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
                page = browser.new_page()
                page.goto(server.url + "/")
                page.wait_for_selector("#browse-store option", state="attached")
                # Traffic while the page watches: its charts get points with queries in them.
                for _ in range(40):
                    for word in list(words)[:10]:
                        http.get(f"/v1/stores/word-counts/keys/{word}")
                    if page.evaluate("window.iqstateCharts.qps.filter((v) => v > 0).length") >= 2:
                        break
                    page.wait_for_timeout(250)
                assert page.evaluate("window.iqstateCharts.qps.filter((v) => v > 0).length") >= 2
                assert page.evaluate("Math.max(...window.iqstateCharts.latency)") > 0
                drawn = page.evaluate(
                    """() => {
                      const canvas = document.getElementById("chart-qps");
                      const pixels = canvas.getContext("2d").getImageData(
                        0, 0, canvas.width, canvas.height).data;
                      let inked = 0;
                      for (let i = 3; i < pixels.length; i += 4) if (pixels[i] > 0) inked++;
                      return inked;
                    }"""
                )
                assert drawn > 0, "the queries-per-second chart has drawn its line"
                assert page.locator("#banner").is_hidden()

                page.click("#browse button[type=submit]")  # merged pages of 20, in key order
                page.wait_for_function("document.querySelectorAll('#rows tbody tr').length === 20")
                first = page.locator("#rows tbody tr td:first-child").all_inner_texts()
                assert first == [f'"word-{n:02d}"' for n in range(20)]
                page.click("#next-page")
                page.wait_for_function(
                    "document.querySelector('#rows tbody td').textContent === '\"word-20\"'"
                )
                page.click("#next-page")
                page.wait_for_function("document.querySelectorAll('#rows tbody tr').length === 5")
                assert page.locator("#next-page").is_disabled()
                assert "the last page" in page.locator("#browse-status").inner_text()

                # A degraded instance (its health as a cluster instance cut off from Kafka
                # reports it) gets the banner at the next refresh.
                page.route(
                    "**/v1/health",
                    lambda route: route.fulfill(
                        json={"status": "degraded", "state": "RUNNING", "broker_silence_s": 12.5}
                    ),
                )
                page.wait_for_selector("#banner:not([hidden])")
                assert "not heard from Kafka for 12.5 s" in page.locator("#banner").inner_text()
                ARTIFACTS.mkdir(exist_ok=True)
                page.screenshot(path=str(ARTIFACTS / "state-browser-charts.png"), full_page=True)
                browser.close()
        finally:
            server.stop()
