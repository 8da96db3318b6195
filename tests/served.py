"""What the browser tests share: ``reportdb serve`` in a subprocess and Debian's Chromium under Playwright."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

CHROMIUM = Path("/usr/bin/chromium")
#: The flags a closed network needs (no background connections, updates or sync).
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--no-first-run", "--disable-sync", "--disable-quic"]  # fmt: skip
VIEWPORT = {"width": 1366, "height": 768}


@contextlib.contextmanager
def serving(*args: str | Path, cwd: Path) -> Iterator[str]:
    """``reportdb serve ARGS... --port 0`` (reports and options) of this checkout on a free loopback port; yields the
    URL it printed, then stops it as Ctrl-C would (killed if it does not end)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.Popen([sys.executable, "-m", "reportdb", "serve", *map(str, args), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd, env=env)
    found: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            match = re.search(r"http://\S+/", line)
            if match and not found:
                found.append(match.group(0))
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        if not ready.wait(60) or not found:
            proc.kill()
            pytest.fail(f"reportdb serve printed no URL within 60 s; stderr: {proc.communicate(timeout=10)[1][-2000:]}")
        yield found[0]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """Debian's Chromium launched by Playwright (skips the test where it is not installed)."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: `apt-get install chromium` (CI's .ci/run installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
