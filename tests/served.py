"""What the browser tests share: ``reportdb serve`` in a subprocess and Debian's Chromium under Playwright."""

from __future__ import annotations

import collections
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import TracebackType
from typing import Any, Iterator

import pytest

CHROMIUM = Path("/usr/bin/chromium")
#: The flags a closed network needs (no background connections, updates or sync).
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--no-first-run", "--disable-sync", "--disable-quic"]
VIEWPORT = {"width": 1366, "height": 768}


@contextlib.contextmanager
def serving(*args: str | Path, cwd: Path) -> Iterator[str]:
    """``reportdb serve ARGS... --port 0`` (reports and options) of this checkout on a free loopback port; yields the
    URL it printed, then stops it as Ctrl-C would (killed if it does not end). Its stderr is read as it comes (a full
    pipe would stall the server), its tail kept for the failure when no URL comes. The benchmarks use it too: outside
    pytest that failure is pytest's ``Failed`` exception."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.Popen([sys.executable, "-m", "reportdb", "serve", *map(str, args), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd, env=env)
    found: list[str] = []
    ready = threading.Event()
    tail: collections.deque[str] = collections.deque(maxlen=40)

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            match = re.search(r"http://\S+/", line)
            if match and not found:
                found.append(match.group(0))
                ready.set()
        ready.set()

    def drain() -> None:
        assert proc.stderr is not None
        tail.extend(proc.stderr)

    threading.Thread(target=read, daemon=True).start()
    errors = threading.Thread(target=drain, daemon=True)
    errors.start()
    try:
        in_time = ready.wait(60)  # set at the URL, or when the server closed its stdout (ended) without one
        if not in_time or not found:
            if not in_time:
                proc.kill()
            code = proc.wait(10)
            errors.join(10)
            why = f"ended (exit code {code}) without printing a URL" if in_time else "printed no URL within 60 s"
            pytest.fail(f"reportdb serve {why}; stderr: {''.join(tail)[-2000:]}")
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


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's Chromium under Playwright, one a test module (tests/conftest.py offers it to every test)."""
    with chromium() as launched:
        yield launched


class Pages:
    """Fresh pages (each in its own browser context) on a served URL, each failing the test on a script error or a
    request outside the server; as a context manager, closes them and then fails on any error they recorded."""

    def __init__(self, browser: Any, server: str) -> None:
        self.browser, self.server = browser, server
        self.contexts: list[Any] = []
        self.errors: list[str] = []

    def open(self, fragment: str = "") -> Any:
        """A page at the server's URL + ``fragment``, once the page says it is ready (``body[data-ready]``)."""
        context = self.browser.new_context(viewport=VIEWPORT, device_scale_factor=1)
        self.contexts.append(context)
        pg = context.new_page()
        pg.set_default_timeout(20_000)
        pg.on("pageerror", lambda exc: self.errors.append(str(exc)))
        pg.on("request", lambda req: None if req.url.startswith(self.server) or req.url.startswith("data:")
              else self.errors.append(f"outside request {req.url}"))
        pg.goto(self.server + fragment)
        pg.wait_for_selector("body[data-ready=true]")
        return pg

    def __enter__(self) -> Pages:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        for context in self.contexts:
            context.close()
        assert kind is not None or not self.errors, self.errors


def shot(page: Any, tmp_path: Path, name: str) -> None:
    """A screenshot under the test's tmp dir, and under $REPORTDB_SHOT_DIR when set (to look at after a passing run)."""
    out = Path(os.environ.get("REPORTDB_SHOT_DIR") or tmp_path) / name
    page.screenshot(path=str(out), full_page=True)
    assert out.stat().st_size > 10_000


@pytest.fixture()
def pages(browser: Any, server: str) -> Iterator[Pages]:
    """Fresh pages on the module's ``server`` (its own fixture: the reports it serves), failing the test on a script
    error (tests/conftest.py offers it to every test; a module may override it, as the overview's does)."""
    with Pages(browser, server) as found:
        yield found
