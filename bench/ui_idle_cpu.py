#!/usr/bin/env python
"""How busy an idle workbench page keeps the browser: the share of the page's main thread spent on tasks while
nobody touches it (Chrome's Performance.getMetrics TaskDuration over a window), in a real chromium.

Target <= 0.10 with nothing running; the figures measured so far are in bench/README.md.

  .venv/bin/python bench/ui_idle_cpu.py [--seconds 5] [--tab Train]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--tab", default="Train")
    a = p.parse_args()
    from playwright.sync_api import sync_playwright

    from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, ui_process

    with tempfile.TemporaryDirectory() as ws, ui_process(ws) as url:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(url)
            page.wait_for_selector("#model")
            page.get_by_role("tab", name=a.tab).click()
            time.sleep(3)
            cdp = page.context.new_cdp_session(page)
            cdp.send("Performance.enable")

            def task_s() -> float:
                return next(m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]
                            if m["name"] == "TaskDuration")

            start = task_s()
            time.sleep(a.seconds)
            busy = (task_s() - start) / a.seconds
            browser.close()
    print(f"{a.tab} tab idle: the page's main thread is busy {busy:.2f} of the time (target: <= 0.10)")
    return 0 if busy <= 0.10 else 1


if __name__ == "__main__":
    sys.exit(main())
