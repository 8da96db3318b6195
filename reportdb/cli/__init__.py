"""The ``reportdb`` command: click commands over the public Python API only.

Errors reach the user as one line on stderr and a non-zero exit code, never a traceback. Commands that
look at a report (``info``, ``ls``, ``verify``, ``compare``, ``plot``, ``show``) open it read-only and
never change a byte of it; only ``upgrade``, ``migrate`` and ``compare --store`` write. Each command imports what
it needs when it runs (``reportdb`` loads its modules lazily), so ``--help`` loads no numpy and ``info`` no SQLAlchemy.

Exit status: 0 success; 1 an error (one line on stderr) or, for ``compare`` and ``verify``, a failed
check; 2 a usage error; 3 for ``compare``, nothing failed but not everything could be compared, and for ``replay``,
nothing failed because nothing was compared; 130 interrupted; 141 stdout closed early (``reportdb ls | head``), quietly.
"""

from __future__ import annotations

import sys

from reportdb.cli import compare, files, locate, ops, replay, reports, serve, team  # noqa: F401  (each registers its commands)
from reportdb.cli.common import _stdout_closed, _StdoutClosed, cli

__all__ = ["cli", "main"]


def main() -> None:
    """Console-script entry point: a closed stdout, even at the final flush, ends quietly (status 141)."""
    try:
        try:
            cli(prog_name="reportdb")
        finally:
            sys.stdout.flush()
    except (_StdoutClosed, BrokenPipeError):
        _stdout_closed()
