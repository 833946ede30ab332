"""The state browser follows a key live, in real headless Chromium (Debian's chromium): a
value committed after following started appears without a reload, with its partition and
position, and it stops when asked; with a token the page reads the stream too (EventSource
cannot send one)."""

from __future__ import annotations

from pathlib import Path

import pytest
from iqstate_http import start_background
from test_browser import CHROMIUM, FLAGS

from iqstate import Application
from iqstate.runtime import partition_for_bytes

pytestmark = [
    pytest.mark.iqstate_slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed"),
]
CHANGES = "document.getElementById('changes').textContent"


def write(app: Application, offset: int, rows: dict[str, int]) -> None:
    with app.begin_batch(position={"words": {0: offset}}, batch_id=offset) as batch:
        batch.put_all("word-counts", list(rows.items()))


@pytest.mark.parametrize("token", [None, "s3cret"])
def test_following_a_key_shows_each_committed_change_until_stopped(
    tmp_path: Path, token: str | None
) -> None:
    from playwright.sync_api import sync_playwright

    app = Application("follow", tmp_path)
    app.key_value_store("word-counts", 3, value_serde="int64")
    with app:
        write(app, 1, {"spark": 3, "kafka": 5})
        server = start_background(app, token=token)
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
                page = browser.new_page()
                page.goto(server.url + "/")
                if token is not None:  # the page reads the stores with it at its next refresh
                    page.fill("#token", token)
                page.wait_for_selector("#store option", state="attached")
                page.select_option("#store", "word-counts")
                page.fill("#key", "kafka")
                page.click("#follow")
                page.wait_for_function(f"{CHANGES}.includes('now: value: 5')")
                write(app, 2, {"kafka": 9, "spark": 4})
                write(app, 3, {"spark": 6})  # another key: not shown
                write(app, 4, {"kafka": 11})
                page.wait_for_function(f"{CHANGES}.includes('value: 11')")
                lines = page.locator("#changes li").all_inner_texts()
                where = f"partition: {partition_for_bytes(b'kafka', 3)} position: "
                assert lines == [  # the newest first; inner_text collapses the spacing
                    f'changed: value: 11 {where}{{"words":{{"0":4}}}}',
                    f'changed: value: 9 {where}{{"words":{{"0":2}}}}',
                    f'now: value: 5 {where}{{"words":{{"0":1}}}}',
                ]
                page.click("#unfollow")
                assert page.locator("#follow-status").inner_text() == "stopped"
                assert page.locator("#follow").is_enabled()
                browser.close()
        finally:
            server.stop()
