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
                assert "localhost:7070" in page.locator("#instances").inner_text()
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
