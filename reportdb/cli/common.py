"""What every command shares: the ``reportdb`` click group, one-line errors and exit codes, escaped printing, JSON
output, and the hints about legacy tensor files that were never migrated."""

from __future__ import annotations

import functools
import json
import numbers
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any, Callable, Container, NoReturn, Sequence, TypeVar

import click

import reportdb
from reportdb.errors import (
    ReportDBError,
    TensorNotFoundError,
)
from reportdb.results import jsonable

F = TypeVar("F", bound=Callable[..., Any])

#: The shell's status for a process whose stdout reader went away (128 + SIGPIPE), as ``cat`` in ``cat f | head``.
EXIT_STDOUT_CLOSED = 141


class _StdoutClosed(Exception):
    """The reader of stdout went away (``reportdb ls | head``): not an error, the output is simply not wanted."""


#: C0 and C1 control characters but tab and newline: what a terminal may take for a command.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _printable(text: str) -> str:
    """``text`` with control characters written as escapes (``\\x1b``): table names, values and paths in messages come
    from reports, and an escape sequence in one must not reach the terminal as one."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _echo(text: str = "", *, err: bool = False) -> None:
    """Print a line (control characters escaped) to stdout, or stderr; a closed stdout becomes _StdoutClosed, so it
    is told apart from other broken pipes."""
    try:
        click.echo(_printable(text), err=err)
    except BrokenPipeError:
        raise _StdoutClosed from None


def _stdout_closed() -> NoReturn:
    """End quietly with the conventional status; stdout goes to devnull so the exit-time flush cannot complain."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real stdout file descriptor: nothing left to flush into it either
        pass
    sys.exit(EXIT_STDOUT_CLOSED)


def _one_line(text: str) -> str:
    """A message as one line: an error that spans lines (an SQL dump, say) keeps its first one."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[0] if lines else ""


class _UsageError(click.UsageError):
    """A usage error (exit status 2, as click's own), shown as one line like every other error: its message says what
    to give instead, so click's usage banner would only push it down."""

    def show(self, file: Any = None) -> None:
        click.echo(_printable(f"Error: {self.format_message()}"), file=file, err=True)


def _friendly(func: F) -> F:
    """Turn library errors (and a closed stdout or Ctrl-C) into one line and an exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (click.exceptions.Exit, click.ClickException):  # a command's own exit code or message
            raise
        except _StdoutClosed:
            _stdout_closed()
        except ReportDBError as exc:
            raise click.ClickException(_printable(" ".join(str(exc).split()))) from None
        except KeyboardInterrupt:
            click.echo("reportdb: interrupted", err=True)
            sys.exit(130)
        except OSError as exc:
            message = f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": ")
            raise click.ClickException(_printable(" ".join(message.split()))) from None
        except Exception as exc:  # a bug of ours: still one line, with the way to see more
            if os.environ.get("REPORTDB_DEBUG"):
                raise
            raise click.ClickException(_printable(
                f"internal error {type(exc).__name__}: {_one_line(str(exc))} (set REPORTDB_DEBUG=1 for the traceback)"
            )) from None

    return wrapper  # type: ignore[return-value]


def _emit(data: Any) -> None:
    """Print ``data`` as strict JSON: NaN and infinities as None, numpy scalars as numbers (``results.jsonable``)."""
    _echo(json.dumps(jsonable(data), indent=2, allow_nan=False, default=str))


def _legacy_folder(path: Path) -> Path | None:
    """The report folder ``path`` names (the folder, or its ``db.sqlite``); None for a database file elsewhere."""
    if path.is_dir():
        return path
    if path.name == "db.sqlite":
        return path.parent
    return None


def _not_migrated(path: Path) -> list[str]:
    """Legacy tensor files of the report folder at ``path`` whose values its database does not hold."""
    folder = _legacy_folder(path)
    if folder is None:
        return []
    from reportdb.legacy import pending_legacy_files

    return pending_legacy_files(folder)


def _make_reportdb(path: Path) -> tuple[str, str]:
    """The command that makes a reportdb report of the legacy report database at ``path``, and what it makes: migrate
    for a report folder (or its ``db.sqlite``); for a lone database file, which migrate refuses, upgrade of a copy."""
    folder = _legacy_folder(path)
    if folder is not None:
        return f"reportdb migrate {shlex.quote(str(folder))} -o NEW_FOLDER", "NEW_FOLDER"
    return f"cp {shlex.quote(str(path))} NEW.sqlite && reportdb upgrade NEW.sqlite", "NEW.sqlite"


def _migrate_hint(path: Path, pending: list[str]) -> str:
    """What to run so the legacy tensor files of ``path`` become stored tensors (SRC stays untouched)."""
    folder = _legacy_folder(path) or path
    return (
        f"{len(pending)} legacy tensor file{'s' if len(pending) != 1 else ''} in {folder} not migrated: "
        f"run `reportdb migrate {shlex.quote(str(folder))} -o NEW_FOLDER` to store them in a new report"
    )


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(reportdb.__version__, prog_name="reportdb")
def cli() -> None:
    """TTNN reports as one self-contained SQLite database of report tables and tensor values."""


def _require_tensor(report: reportdb.Report, path: Path, tensor_id: int, rank: int) -> None:
    """Refuse a tensor the report does not store, saying why: legacy files not migrated, or simply absent."""
    if report.has_tensor(tensor_id, rank):
        return
    pending = _not_migrated(path)
    why = f"; {_migrate_hint(path, pending)}" if pending else ""
    raise TensorNotFoundError(f"{path}: no tensor {tensor_id} (rank {rank}) is stored{why}")


def _num(value: object) -> str:
    """A figure for a table: None as "-", any real non-integer (numpy's float32 too) to 6 significant digits."""
    if value is None:
        return "-"
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        return f"{float(value):.6g}"
    return str(value)


def _cells(cells: Sequence[str], widths: Sequence[int], right: Container[int] = ()) -> str:
    """One table row: each cell padded to its column's width (right-aligned for the columns in ``right``), cells two
    spaces apart so a value wider than its column still stands apart; the last cell is not padded."""
    padded = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))]
    return "  ".join(padded + list(cells[len(widths):])).rstrip()


def _table(rows: Sequence[Sequence[str]], right: Container[int] = (), indent: str = "") -> list[str]:
    """Rows (the header first) as lines whose columns are as wide as their widest cell, two spaces apart (a
    right-aligned last column padded too, so its numbers line up)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - (len(rows[0]) - 1 not in right))]
    return [indent + _cells(row, widths, right) for row in rows]


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"
