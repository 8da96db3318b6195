"""Shared test fixtures: where the real ttnn/torch files live, and helpers to compare values.

The project carries its own real fixtures in ``tests/data`` (``FIXTURES``; made by
``tests/data/make/make_all.py`` with the real ttnn wheels and torch, see ``tests/data/README.md``), so
the suite runs on a plain clone. A ``shared/fixtures`` folder beside the checkout, when present, is an
extra corpus (``EXTRA_FIXTURES``, else None) that tests may add; nothing requires it.
"""

from __future__ import annotations

import ast
import atexit
import functools
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Hashable

import numpy as np
import numpy.testing  # noqa: F401 - numpy 1.26 runs lscpu in a subprocess on its first import: here, not in a test
import pytest

from pg_server import pg_server, team_url  # noqa: F401 - the PostgreSQL fixtures, one server per session
from s3_server import s3_server, s3_url  # noqa: F401 - moto's S3 server on 127.0.0.1, one per session
from served import browser, pages  # noqa: F401 - Chromium under Playwright (one a module) and its pages

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "data"
_SHARED = ROOT.parent / "shared" / "fixtures"
EXTRA_FIXTURES: Path | None = _SHARED if _SHARED.is_dir() else None


def fixture_roots() -> list[Path]:
    """The fixture roots present here: the project's own first, then ``EXTRA_FIXTURES`` if it exists."""
    return [FIXTURES] + ([EXTRA_FIXTURES] if EXTRA_FIXTURES is not None else [])


OWN_FOLDERS = ("ttnn-0.62.2-bin", "ttnn-0.81.1-tensorbin", "ttnn-0.64.5-report-tensorbin", "torch-2.13-pt", "report-schemas")


def manifest(folder: str) -> list[dict[str, Any]]:
    """The entries of ``FIXTURES/folder/manifest.json`` (one per file).

    A folder that only an extra corpus has (``tt-mlir-public``) gives no entries here, so collection
    never fails on a plain clone; ``manifest_entries`` finds it in every root that has it. The
    project's own folders must exist (``tests/test_fixture_data.py`` checks them).
    """
    if folder not in OWN_FOLDERS and not (FIXTURES / folder).is_dir():
        return []
    data = json.loads((FIXTURES / folder / "manifest.json").read_text())
    return data["files"] if isinstance(data, dict) else data


def manifest_entries(folder: str) -> list[tuple[Path, dict[str, Any]]]:
    """``(folder path, entry)`` for every manifest entry of ``folder`` in every fixture root that has it:
    the project's own first, then ``EXTRA_FIXTURES``. Empty when no root has it."""
    found = []
    for root in fixture_roots():
        path = root / folder / "manifest.json"
        if path.is_file():
            data = json.loads(path.read_text())
            found += [(root / folder, entry) for entry in (data["files"] if isinstance(data, dict) else data)]
    return found


def assert_values_equal(actual: np.ndarray, expected: np.ndarray) -> None:
    """Values cast to the expected dtype equal element for element (NaN equal to NaN), shapes equal."""
    actual = np.asarray(actual)
    assert tuple(actual.shape) == tuple(expected.shape), (actual.shape, expected.shape)
    cast = actual.astype(expected.dtype)
    if expected.dtype.kind == "f":
        np.testing.assert_array_equal(cast, expected)  # treats NaN == NaN
    else:
        assert np.array_equal(cast, expected)


@functools.lru_cache(maxsize=None)
def parsed(path: Path) -> ast.Module:
    """The syntax tree of one source file, parsed once per session: several tests walk the whole package (layers,
    sizes, error classes, connections), and nothing changes the files or the trees under them."""
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """The project's own fixture root (always present in a checkout)."""
    if not FIXTURES.is_dir():
        pytest.fail(f"the project's fixtures are missing at {FIXTURES}: restore tests/data from git")
    return FIXTURES


def flip_stored_byte(path: Path, chunk_id: int, offset: int) -> None:
    """Change one stored byte of a chunk behind reportdb's back (its crcs stay), through a separate connection and
    without ``blobopen`` (Python 3.10 has none)."""
    conn = sqlite3.connect(path)
    try:
        (data,) = conn.execute("SELECT data FROM rdb_chunk WHERE id=?", (chunk_id,)).fetchone()
        changed = bytearray(data)
        changed[offset] ^= 0xFF
        conn.execute("UPDATE rdb_chunk SET data=? WHERE id=?", (bytes(changed), chunk_id))
        conn.commit()
    finally:
        conn.close()


# --- One small report built once per test process, copied for each test --------------------------------------------
#: The files :func:`built_once` made, by what made them.
_BUILT: dict[tuple[Hashable, ...], Path] = {}


def built_once(path: Path, build: Callable[[Path], object], *key: Hashable) -> Path:
    """``path`` as ``build(path)`` makes it: built once per test process for each ``build`` (its qualified name) and
    ``key``, then copied. Many tests each read or damage their own copy of the same small report, and making one costs
    about 50 ms (its schema on 64 KiB pages, rewritten to small pages at close), a quarter of the fast tier's CPU when
    each test made its own. The built report must be one closed file (no side file)."""
    ident = (build.__module__, build.__qualname__, *key)
    made = _BUILT.get(ident)
    if made is None:
        folder = Path(tempfile.mkdtemp(prefix="reportdb-built-"))
        atexit.register(shutil.rmtree, folder, True)
        made = folder / path.name
        build(made)
        assert not [side for side in ("-journal", "-wal", "-shm") if Path(f"{made}{side}").exists()], made
        _BUILT[ident] = made
    shutil.copyfile(made, path)
    return path


# --- The fast tier, defined here once --------------------------------------------------------------------------------
#: The marker expression of the fast tier, the edit-test loop's (``python -m pytest --fast``): the README, ``.ci/run``
#: and pyproject's marker descriptions name ``--fast``, never a copy of this expression.
FAST_TIER = "not slow and not process"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast",
        action="store_true",
        help=f"run the fast tier only: -m {FAST_TIER!r} (and any -m given), on every core, at most 4 (pytest-xdist's -n auto "
        "unless -n is given) with its temporary files in memory (/dev/shm, unless --basetemp or TMPDIR is given)",
    )


#: The most workers ``--fast`` starts by itself (``-n N`` sets any number).
_MAX_WORKERS = 4
#: Free space a memory filesystem must have to take the fast tier's temporary files (a run writes about 6 MiB).
_MEMORY_TMP_MIN_FREE = 1 << 30


def _memory_tmp() -> str | None:
    """``/dev/shm`` when it is a writable tmpfs with room to spare, else None (the tests' files stay on disk)."""
    try:
        with open("/proc/self/mounts", encoding="utf-8") as mounts:
            tmpfs = any(line.split()[1:3] == ["/dev/shm", "tmpfs"] for line in mounts)
        free = os.statvfs("/dev/shm")
    except OSError:
        return None
    if not tmpfs or not os.access("/dev/shm", os.W_OK | os.X_OK) or free.f_bavail * free.f_frsize < _MEMORY_TMP_MIN_FREE:
        return None
    return "/dev/shm"


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """``--fast`` is for the edit-test loop, so it spends what the machine has: measured on a 2-core VM, idle, about
    40% of a one-process run's wall time was SQLite's fsyncs on disk and the CPU work was one core's (119 s; 80 s with
    the files in memory; 48 s with both cores too). A worker (``workerinput``) inherits the controller's choices."""
    if not config.getoption("fast") or hasattr(config, "workerinput"):
        return
    if config.pluginmanager.hasplugin("xdist") and config.getoption("numprocesses") is None:
        config.option.numprocesses = "auto"  # pytest-xdist turns it into one worker per core right after this hook
        if config.getoption("maxprocesses") is None:
            # each worker collects the suite itself (~6 CPU-s); and a container's CPU quota is not what "auto" counts
            config.option.maxprocesses = _MAX_WORKERS
    if config.getoption("basetemp") is None and "TMPDIR" not in os.environ and (memory := _memory_tmp()):
        os.environ["TMPDIR"] = memory  # pytest's own base (pytest-of-USER, last 3 runs kept), tempfile's and workers'
        tempfile.tempdir = None


# --- The tiers' contract: a test that starts another process carries the ``process`` marker -------------------------
# The fast tier (``--fast``) must run no other process; a test that does without the marker
# would slip into it unseen. Every way the suite (or reportdb under it) starts one passes through these few functions:
# they are wrapped once, and fail a fast-tier test (marked neither ``process`` nor ``slow``: a slow test builds
# environments and runs them) that reaches one in its set-up or call.
_spawn_allowed = True  # outside a test's set-up and call (collection, teardowns): allowed


def _refuse(what: str) -> None:
    if not _spawn_allowed:
        pytest.fail(f"this fast-tier test starts another process ({what}): add @pytest.mark.process")


def _guarded(what: str, function: Any) -> Any:
    def guard(*args: Any, **kwargs: Any) -> Any:
        _refuse(what)
        return function(*args, **kwargs)

    guard.__wrapped__ = function  # type: ignore[attr-defined]
    return guard


def pytest_configure(config: pytest.Config) -> None:
    """``--fast`` selects the fast tier; the process-starting functions are wrapped once for the session (cheaper than
    a fixture per test)."""
    if config.getoption("fast"):
        given = config.option.markexpr
        config.option.markexpr = f"({given}) and ({FAST_TIER})" if given else FAST_TIER
    import multiprocessing.process
    import os

    subprocess.Popen._execute_child = _guarded("subprocess", subprocess.Popen._execute_child)  # type: ignore[attr-defined]
    multiprocessing.process.BaseProcess.start = _guarded("multiprocessing", multiprocessing.process.BaseProcess.start)  # type: ignore[method-assign]
    # os.spawn* go through os.fork, os.popen through subprocess; os.system is left as it is (tests pickle it as a
    # hostile payload, which needs the very function) and no test uses it to start one
    for name in ("fork", "forkpty"):
        if hasattr(os, name):
            setattr(os, name, _guarded(f"os.{name}", getattr(os, name)))


def _phase(item: pytest.Item) -> Any:
    """While ``item`` sets up or runs, it may start processes only outside the fast tier (marked ``process`` or
    ``slow``). Teardown is left free: that is where the last test of a module or session stops the servers its scope
    shared (``pg_ctl stop``)."""
    global _spawn_allowed
    _spawn_allowed = any(item.get_closest_marker(name) is not None for name in ("process", "slow"))
    try:
        yield
    finally:
        _spawn_allowed = True


pytest_runtest_setup = pytest.hookimpl(hookwrapper=True)(_phase)
pytest_runtest_call = pytest.hookimpl(hookwrapper=True)(_phase)


def locked_from_elsewhere(db: Path) -> str:
    """What another process gets asking for the write lock on ``db`` at once: "database is locked" while this one
    holds SQLite's lock on it."""
    probe = subprocess.run([sys.executable, "-c", (
        "import sqlite3, sys\n"
        "conn = sqlite3.connect(sys.argv[1], timeout=0, isolation_level=None)\n"
        "try:\n"
        "    conn.execute('BEGIN IMMEDIATE')\n"
        "    print('got the lock')\n"
        "except sqlite3.OperationalError as exc:\n"
        "    print(exc)\n"
    ), str(db)], capture_output=True, text=True, timeout=60)
    return probe.stdout.strip() + probe.stderr
