"""Open a run's HTML report in headless Chromium, fail on any console message, and keep a
screenshot: the check that the page works in a real browser from the file system.

    python benchmarks/report_screenshot.py runs/NAME/report/index.html docs/report.png

Needs a Chromium binary (Debian: `apt-get install chromium`). Exit 0 when the page loaded
with no console message and the screenshot was written; 1 otherwise (the messages are
printed)."""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", type=Path)
    parser.add_argument("screenshot", type=Path)
    parser.add_argument("--size", default="1200,3000", help="window width,height in pixels")
    args = parser.parse_args()
    browser = next(
        (b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None
    )
    if browser is None:
        print("no Chromium found: apt-get install chromium", file=sys.stderr)
        return 1
    args.screenshot.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [
            browser,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            f"--window-size={args.size}",
            f"--screenshot={args.screenshot.resolve()}",
            "--enable-logging=stderr",
            "--v=0",
            args.page.resolve().as_uri(),
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=120,
    )
    console = [line for line in proc.stderr.splitlines() if re.search(r"CONSOLE|Uncaught", line)]
    for line in console:
        print(line)
    ok = proc.returncode == 0 and not console and args.screenshot.is_file()
    print(
        f"{'ok' if ok else 'FAILED'}: {len(console)} console messages, screenshot {args.screenshot}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
