"""The ``reportdb`` command: click commands over the public Python API only.

Errors reach the user as one line on stderr and a non-zero exit code, never a traceback. Commands that
look at a report (``info``, ``ls``, ``verify``, ``compare``, ``plot``, ``show``) open it read-only and
never change a byte of it; only ``upgrade``, ``migrate`` and ``compare --store`` write. Each command imports what
it needs when it runs (``reportdb`` loads its modules lazily), so ``--help`` loads no numpy and ``info`` no SQLAlchemy.

Exit status: 0 success; 1 an error (one line on stderr) or, for ``compare`` and ``verify``, a failed
check; 2 a usage error; 130 interrupted; 141 stdout closed early (``reportdb ls | head``), quietly.
"""

from __future__ import annotations

import functools
import json
import numbers
import os
import re
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NoReturn, Sequence, TypeVar

import click

import reportdb
from reportdb.errors import InvalidArgumentError, ReadOnlyError, ReportDBError, TensorNotFoundError
from reportdb.results import jsonable

if TYPE_CHECKING:  # pragma: no cover
    from reportdb.legacy.summary import Skipped

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


@cli.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@_friendly
def info(path: Path, as_json: bool) -> None:
    """Schema version, table row counts, tensors and bytes stored against logical bytes.

    Read-only. On a legacy report folder it also counts the tensor files in tensors/ whose values the
    database does not hold (JSON: legacy_files_not_migrated) and names the `reportdb migrate` that stores
    them. Exit status 0, or 1 on an error.

    \b
    Example:
        reportdb info generated/ttnn/reports/1234
    """
    with reportdb.open(path, "r") as report:
        summary = report.summary()
    pending = _not_migrated(path)
    if as_json:
        _emit(summary.to_dict() | {"legacy_files_not_migrated": len(pending)})
        return
    _echo(f"report:          {summary.path}")
    revision = summary.schema_revision or "none (a legacy TTNN report database, read as it is)"
    _echo(f"reportdb schema: {revision} (this reportdb: {summary.schema_head})")
    if summary.report_schema_version is not None:
        _echo(f"report schema:   {summary.report_schema_version}")
    _echo(f"tensors:         {summary.tensors} ({summary.shards} shards)")
    if pending:
        _echo(f"legacy tensors:  {_migrate_hint(path, pending)}")
    elif summary.schema_revision is None:
        folder = _legacy_folder(path) or path
        _echo(f"legacy report:   `reportdb migrate {shlex.quote(str(folder))} -o NEW_FOLDER` makes a reportdb report of it")
    _echo(f"tensor bytes:    {_size(summary.stored_bytes)} stored for {_size(summary.logical_bytes)} logical"
          + (f", chunks addressed by {summary.content_address}" if summary.content_address else ""))
    _echo("tables:")
    for name, count in summary.tables.items():
        if not name.startswith(("rdb_", "reportdb_")):
            _echo(f"  {name:<34} {count:>12,}")


@cli.command(name="ls")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@_friendly
def ls_(path: Path, as_json: bool) -> None:
    """List stored tensors: id, rank, shape, dtype, ttnn dtype, layout, size.

    Read-only. Legacy tensor files not migrated into the database are not listed: their count and the
    `reportdb migrate` that stores them go to stderr. Exit status 0, or 1 on an error.
    """
    with reportdb.open(path, "r") as report:
        infos = [report.tensor_info(tid, rank) for tid, rank in report.tensor_keys()]
    pending = _not_migrated(path)
    if as_json:
        _emit([i.to_json() for i in infos])
    else:
        _echo(f"{'id':>10} {'rank':>4}  {'shape':<22} {'dtype':<10} {'ttnn dtype':<10} {'layout':<9} {'shards':>6} {'size':>10}")
        for i in infos:
            shape = "?" if i.shape is None else "x".join(str(d) for d in i.shape) or "()"
            _echo(
                f"{i.tensor_id:>10} {i.rank:>4}  {shape:<22} {i.dtype:<10} {i.spec.ttnn_dtype or '-':<10} "
                f"{i.spec.layout or '-':<9} {len(i.shards):>6} {_size(i.nbytes):>10}"
            )
    if pending:
        _echo(f"reportdb: {_migrate_hint(path, pending)}", err=True)


@cli.command()
@click.argument("path", type=click.Path(path_type=Path))
@_friendly
def upgrade(path: Path) -> None:
    """Bring a report database of any age to the current schema, in place and all-or-nothing."""
    _echo(f"{path}: schema {reportdb.upgrade(path)}")


@cli.command()
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@_friendly
def show(file: Path, as_json: bool) -> None:
    """A legacy tensor file's spec, statistics and a short value preview (.bin, .tensorbin, .pt)."""
    description = reportdb.describe_tensor_file(file)
    if as_json:
        _emit(description)
        return
    stats = {k: v for k, v in (description.get("stats") or {}).items() if not k.startswith("hist_")}
    for key, value in description.items():
        if key == "stats":
            value = " ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in stats.items())
        elif value is None:
            continue
        else:
            value = json.dumps(value, default=str)
        _echo(f"{key + ':':<16}{value}")


@cli.command()
@click.argument("file", type=click.Path(path_type=Path))
@click.option("-o", "--output", "out", type=click.Path(path_type=Path), required=True, help=".npy, .npz or .safetensors")
@_friendly
def convert(file: Path, out: Path) -> None:
    """Convert a legacy tensor file to .npy, .npz (one array per device shard) or .safetensors."""
    reportdb.convert_tensor_file(file, out)
    _echo(f"{file} -> {out}")


@cli.command(name="compare")
@click.argument("report_a", metavar="A", type=click.Path(path_type=Path))
@click.argument("report_b", metavar="[B]", required=False, type=click.Path(path_type=Path))
@click.option("--golden", is_flag=True, help="Recompute A's local and global golden comparison records.")
@click.option(
    "--store", is_flag=True,
    help="With --golden: keep the results in A's rdb_comparison table (A must be a reportdb database, not a legacy "
    "original: run `reportdb migrate` first; an older reportdb schema is upgraded). Without it A is only read.",
)
@click.option("--rank", type=int, default=0, show_default=True)
@click.option("--rtol", type=float, default=1e-5, show_default=True)
@click.option("--atol", type=float, default=1e-8, show_default=True)
@click.option("--pcc", type=float, default=None, help="PCC threshold (default: each record's desired PCC, or 0.99).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts (printed in full whatever the exit status).")
@_friendly
def compare_(
    report_a: Path, report_b: Path | None, golden: bool, store: bool, rank: int, rtol: float, atol: float,
    pcc: float | None, as_json: bool,
) -> None:
    """Compare tensors with the full metric vector: A's golden records (--golden), or run B against run A.

    Reads the reports only (--store writes A's rdb_comparison). Exit status, as a test runner's:
    0 when every compared tensor passes (also when there is nothing to compare), 1 when any fails or on
    an error, 2 on a usage error. Tensors that are not stored are listed, not failed.

    \b
    Examples:
        reportdb compare migrated/1234 --golden
        reportdb compare migrated/1234 --golden --store
        reportdb compare runs/before runs/after --json
    """
    if golden == (report_b is not None):
        raise InvalidArgumentError("give one report with --golden, or two reports A B to compare run against run")
    if store and not golden:
        raise InvalidArgumentError("--store keeps golden comparison results: use it with --golden")
    if golden:
        _compare_golden(report_a, store=store, rtol=rtol, atol=atol, pcc=pcc, as_json=as_json)
        return
    assert report_b is not None
    with reportdb.open(report_a, "r") as a, reportdb.open(report_b, "r") as b:
        result = reportdb.compare_runs(a, b, rank=rank, rtol=rtol, atol=atol, pcc=0.99 if pcc is None else pcc)
    failed = result.first_divergence is not None
    if as_json:
        _emit(result.to_dict())
    else:
        _echo(f"operations matched by {result.matched_by}")
        _echo(f"  {'op A':>6}{'op B':>6}  {'name':<28}{'out':>4}  {'shape':<18}{'pcc':>12}{'max abs err':>13}{'ulp max':>9}  flags")
        for r in result.rows:
            mark = ">>" if r.first_divergence else "  "
            shape = "x".join(map(str, r.shape)) if r.shape is not None else "-"
            tail = ",".join(r.flags) or ("" if r.passed else r.status if r.passed is None else "below threshold")
            _echo(
                f"{mark}{r.operation_id_a:>6}{r.operation_id_b:>6}  {r.name[:27]:<28}{r.output_index:>4}  {shape:<18}"
                f"{_num(r.pcc):>12}{_num(r.max_abs_error):>13}{_num(r.ulp_max):>9}  {tail}"
            )
        first = result.first_divergence
        _echo("first divergence: " + ("none" if first is None else f"operation {first.operation_id_a} {first.name} output {first.output_index}"))
        for side, unmatched in (("A", result.unmatched_a), ("B", result.unmatched_b)):
            for op in unmatched:
                _echo(f"unmatched in {side}: operation {op.operation_id} {op.name}")
    if not any(r.status == "compared" for r in result.rows):
        for path in (report_a, report_b):
            pending = _not_migrated(path)
            if pending:
                _echo(f"reportdb: {_migrate_hint(path, pending)}", err=True)
    if failed:
        raise click.exceptions.Exit(1)


def _compare_golden(path: Path, *, store: bool, rtol: float, atol: float, pcc: float | None, as_json: bool) -> None:
    """``compare A --golden``: read-only unless ``store``; exit 1 when a compared tensor fails."""
    if store:
        with reportdb.open(path, "r") as probe:
            legacy = probe.schema_revision is None
        if legacy:
            folder = _legacy_folder(path) or path
            raise ReadOnlyError(
                f"{path} is a legacy report database (the original), not a reportdb one; --store writes reportdb's tables, "
                f"so run `reportdb migrate {shlex.quote(str(folder))} -o NEW_FOLDER` and compare NEW_FOLDER with --store; nothing was changed"
            )
    with reportdb.open(path, "a" if store else "r") as report:
        results = reportdb.compare_golden(report, rtol=rtol, atol=atol, pcc=pcc, store=store)
    failed = sum(1 for r in results if r.passed is False)
    compared = sum(1 for r in results if r.metrics is not None)
    if as_json:
        _emit([r.to_dict() for r in results])
    elif not results:
        _echo(f"nothing to compare: {path} has no golden comparison records")
    else:
        _echo(f"{'kind':<7}{'tensor':>9}{'golden':>10}  {'recorded pcc':>13}{'pcc':>13}{'pcc (tt-metal)':>16}"
              f"{'max abs err':>13}{'ulp max':>9}  result")
        for r in results:
            m = r.metrics
            golden_id = "-" if r.golden_tensor_id is None else r.golden_tensor_id
            if m is None:
                _echo(f"{r.kind:<7}{r.tensor_id:>9}{golden_id:>10}  {_num(r.recorded_pcc):>13}  {r.status}")
                continue
            _echo(
                f"{r.kind:<7}{r.tensor_id:>9}{golden_id:>10}  {_num(r.recorded_pcc):>13}{_num(m.pcc):>13}"
                f"{_num(m.pcc_ttmetal):>16}{_num(m.max_abs_error):>13}{_num(m.ulp_max):>9}  "
                + ("pass" if m.passed else "FAIL " + (",".join(m.flags) or "pcc below threshold"))
            )
        _echo(f"{compared} compared: {compared - failed} passed, {failed} failed; {len(results) - compared} not compared"
              + (" (results stored)" if store and compared else ""))
    if len(results) > compared:
        pending = _not_migrated(path)
        if pending:
            _echo(f"reportdb: {_migrate_hint(path, pending)}", err=True)
    if failed:
        raise click.exceptions.Exit(1)


@cli.command(name="plot")
@click.argument("report_path", metavar="REPORT", type=click.Path(path_type=Path))
@click.argument("tensor_id", type=int)
@click.option("--against", help="Another tensor: ID in the same report, or PATH:ID in another report.")
@click.option("--rank", type=int, default=0, show_default=True)
@click.option(
    "-o", "--output", "out", type=click.Path(path_type=Path), required=True,
    help="The picture; its suffix picks the format (.png, .svg, .pdf, .jpg ...).",
)
@_friendly
def plot_(report_path: Path, tensor_id: int, against: str | None, rank: int, out: Path) -> None:
    """Draw a tensor's heatmap and histogram, or the absolute error against another tensor.

    Reads the reports only. Exit status 0 when the picture is written; 1 on an error, among them a tensor
    that is not stored (a legacy report folder must be migrated first: the error names the command).
    """
    from reportdb.analysis import plot as plot_mod

    plot_mod.check_output(out)  # a wrong suffix or folder, or no matplotlib, fails before any tensor is read
    with reportdb.open(report_path, "r") as report:
        _require_tensor(report, report_path, tensor_id, rank)
        if against is None:
            reportdb.plot_tensor(report, tensor_id, out, rank=rank)
        else:
            path, _, other_id = against.rpartition(":")
            if not other_id.isdigit():
                raise InvalidArgumentError(f"--against takes ID or PATH:ID, not {against!r}")
            if not path:
                _require_tensor(report, report_path, int(other_id), rank)
                reportdb.plot_tensor(report, tensor_id, out, rank=rank, against=(report, int(other_id)))
            else:
                with reportdb.open(path, "r") as other:
                    _require_tensor(other, Path(path), int(other_id), rank)
                    reportdb.plot_tensor(report, tensor_id, out, rank=rank, against=(other, int(other_id)))
    _echo(f"wrote {out}")


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


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


# --- migrate / verify (legacy report folders) ---------------------------------------------------


class _MigrationProgress:
    """A progress bar over bytes (labelled with files done) on a terminal; silent elsewhere."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.bar: Any = None
        self.bytes_done = 0

    def __call__(self, files_done: int, files_total: int, bytes_done: int, bytes_total: int) -> None:
        if not self.enabled or bytes_total == 0:
            return
        if self.bar is None:
            self.bar = click.progressbar(length=bytes_total, label="tensors", file=sys.stderr, show_pos=False)
            self.bar.__enter__()
        self.bar.label = f"tensors {files_done}/{files_total}"
        self.bar.update(bytes_done - self.bytes_done)
        self.bytes_done = bytes_done

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)


@cli.command(name="migrate")
@click.argument("src", type=click.Path(path_type=Path))
@click.option("-o", "--output", "dst", type=click.Path(path_type=Path), help="New report folder; SRC stays untouched.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=1, show_default=True, help="Decoding processes.")
@click.option("--strict", is_flag=True, help="Stop at the first unreadable tensor file.")
@click.option("--remove-legacy-files", is_flag=True, help="In place: delete imported tensor files after their values compare equal.")
@click.option("--no-stats", is_flag=True, help="Skip per-tensor statistics (faster; no preflight stats stored).")
@click.option(
    "--compression", type=click.Choice(["none", "zstd"]), default="none", show_default=True,
    help="zstd: store compressible tensors compressed (needs reportdb[zstd]).",
)
@click.option(
    "--copy-triggers", is_flag=True,
    help="Also copy SRC's triggers (after all rows are copied). Off by default: a trigger runs report-supplied SQL "
    "on every later write to its table, so copy them only from a report you trust.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@_friendly
def migrate_(
    src: Path, dst: Path | None, jobs: int, strict: bool, remove_legacy_files: bool, no_stats: bool, compression: str,
    copy_triggers: bool, as_json: bool,
) -> None:
    """Turn a legacy report folder (db.sqlite + tensors/) into one self-contained report.

    \b
    Examples:
        reportdb migrate generated/ttnn/reports/1234 -o migrated/1234 --jobs 2
        reportdb migrate generated/ttnn/reports/1234 --remove-legacy-files
        reportdb migrate generated/ttnn/reports/1234 -o migrated/1234 --compression zstd
    An interrupted run leaves a .db.sqlite.reportdb-partial file; run the same command again to finish.
    Symlinks and special files in the folder are skipped, never followed; the summary counts them.
    """
    bar = _MigrationProgress(sys.stderr.isatty() and not as_json)
    try:
        summary = reportdb.migrate(
            src, dst, jobs=jobs, strict=strict, remove_legacy_files=remove_legacy_files, progress=bar,
            stats=not no_stats, compression=compression, copy_triggers=copy_triggers,  # type: ignore[arg-type]
        )
    finally:
        bar.close()
    if as_json:
        _emit(summary.to_dict())
        return
    tensors, problems = summary.tensors, summary.problems
    _echo(f"{summary.source} -> {summary.destination}" + (" (already migrated)" if summary.already_migrated else ""))
    _echo(f"tables:   {summary.tables_copied} ({summary.rows_copied:,} rows) copied")
    formats = ", ".join(f"{k} {v}" for k, v in tensors.by_format.items()) or "none"
    carried = f"; {tensors.carried_over} carried over with the tables" if tensors.carried_over else ""
    _echo(f"tensors:  {tensors.stored} stored ({formats}); {tensors.already_stored} were stored by an earlier run{carried}")
    for key in ("orphan_files", "missing_files", "unreadable_files", "golden_without_file"):
        if problems.get(key):
            _echo(f"  {key.replace('_', ' ')}: {len(problems[key])}")
    if summary.skipped:
        _echo(f"skipped:  {len(summary.skipped)} (never followed, read or copied)")
        for line in _skipped_lines(summary.skipped):
            _echo(line)
    _echo(f"verified: {summary.verified.tensors} tensors, {_size(summary.verified.bytes_checked)} re-hashed")
    _echo(f"size:     {_size(summary.bytes.before)} before, {_size(summary.bytes.after or 0)} after")
    if summary.legacy_files_removed:
        _echo(f"removed:  {summary.legacy_files_removed} legacy tensor files")


def _skipped_lines(skipped: Sequence[Skipped], limit: int = 10) -> list[str]:
    """The migrate summary's ``skipped`` entries (links and special files not followed, schema objects not copied),
    one line each, the first ``limit`` of them."""
    lines = [f"  {entry.kind} {entry.name}: {entry.reason}" for entry in skipped[:limit]]
    if len(skipped) > limit:
        lines.append(f"  ... and {len(skipped) - limit} more (--json lists every one)")
    return lines


@cli.command(name="verify")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--against", type=click.Path(path_type=Path), help="Legacy report folder whose tensor files to compare values with.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@_friendly
def verify_(path: Path, against: Path | None, as_json: bool) -> None:
    """Re-read every stored tensor and check its digests; with --against, compare values with the legacy files.

    Read-only. Exit status 0 when every stored tensor checks out (also when none is stored: legacy tensor
    files not migrated are counted on stderr with the `reportdb migrate` that stores them), 1 when any
    fails or on an error.
    """
    result = reportdb.verify(path, against=against)
    if as_json:
        _emit(result.to_dict())
    else:
        compared = f", {result.compared} compared with {against}" if against is not None else ""
        _echo(f"{result.tensors} tensors, {_size(result.bytes_checked)} re-hashed{compared}")
        for problem in result.problems:
            where = "" if problem.tensor_id is None else f"tensor {problem.tensor_id} (rank {problem.rank}): "
            _echo(f"  {where}{problem.error}", err=True)
    pending = _not_migrated(path)
    if pending:
        _echo(f"reportdb: {_migrate_hint(path, pending)}", err=True)
    if not result.ok:
        raise click.exceptions.Exit(1)


@cli.command("attach")
@click.argument("values", type=click.Path(path_type=Path))
@click.argument("report", type=click.Path(path_type=Path))
@click.option("--unmatched", is_flag=True, help="Also store values of tensors the report does not list.")
@click.option("--json", "as_json", is_flag=True, help="Print what was attached as JSON.")
@_friendly
def attach_(values: Path, report: Path, unmatched: bool, as_json: bool) -> None:
    """Store the tensor values capture() recorded (VALUES, a reportdb file) into the report ttnn 0.81+ wrote itself.

    \b
    Example (a run with `reportdb.Writer("values.sqlite")` and `reportdb.ttnn.capture(w)` around the model):
        reportdb attach values.sqlite generated/ttnn/reports/1234
    Tensors are matched by id and rank with the report's `tensors` table; the report's db.sqlite is replaced
    atomically once every value has been read back, so a failed attach leaves it as it was. Running it again is safe.
    """
    from reportdb.ttnn import attach

    result = attach(values, report, unmatched=unmatched)
    if as_json:
        _emit(result.to_dict())
        return
    _echo(f"{result.values} -> {result.report}")
    _echo(f"attached: {result.attached} tensors ({_size(result.bytes_attached)}); {result.already_attached} were there already")
    if result.unmatched and not result.attached + result.already_attached and not unmatched:
        click.echo("reportdb: no tensor of VALUES is listed in the report: are they from the same run?", err=True)
    if result.unmatched:
        left = "stored too" if unmatched else "left out (--unmatched stores them)"
        _echo(f"unmatched: {len(result.unmatched)} tensors the report does not list, {left}")


@cli.command("serve")
@click.argument("reports", metavar="REPORT...", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on; another than loopback warns.")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True, help="Port (0: a free one).")
@click.option("--open", "open_browser", is_flag=True, help="Open the page in the default browser.")
@_friendly
def serve_(reports: tuple[Path, ...], host: str, port: int, open_browser: bool) -> None:
    """Look at REPORTs' tensors and golden comparisons in a browser: a local web server (read-only) and its page.

    \b
    Example:
        reportdb serve reports/run-a reports/run-b --open
    Each report is served under its folder's name; the URL is printed; Ctrl-C stops the server.
    """
    try:
        from reportdb import web
    except ImportError as exc:
        raise click.ClickException(f"serve needs Flask and waitress ({exc}): pip install 'reportdb[web]'") from None
    web.serve(list(reports), host=host, port=port, open_browser=open_browser)


# --- team store (issue 15): push, pull, reports, delete, history (reportdb.team); merge --------------------------


class _BytesProgress:
    """A progress bar over bytes on a terminal (stderr); silent elsewhere and with --json."""

    def __init__(self, enabled: bool, label: str) -> None:
        self.enabled, self.label = enabled, label
        self.bar: Any = None
        self.done = 0

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or total == 0:
            return
        if self.bar is None:
            self.bar = click.progressbar(length=total, label=self.label, file=sys.stderr, show_pos=False)
            self.bar.__enter__()
        self.bar.update(done - self.done)
        self.done = done

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)


def _when(value: Any) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M") if hasattr(value, "strftime") else str(value)


@cli.command("push")
@click.argument("report_path", metavar="REPORT", type=click.Path(path_type=Path))
@click.argument("url")
@click.option("--name", help="The report's name in the store (default: the URL's last part, else REPORT's folder name).")
@click.option("--tag", "tags", multiple=True, help="A tag to find the report by (repeat for more).")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=2, show_default=True,
              help="Upload connections (more help when the server has cores of its own).")
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
@_friendly
def push_(report_path: Path, url: str, name: str | None, tags: tuple[str, ...], jobs: int, as_json: bool) -> None:
    """Push a report to a team store on PostgreSQL: URL is postgresql://[USER@]HOST[:PORT]/DATABASE[/NAME].

    \b
    Example:
        reportdb push reports/1234 postgresql://ci@db.example.com/team --tag nightly
    Atomic (visible whole or not at all) and idempotent: the same content again stores nothing; chunks other
    reports already hold are not sent; an interrupted push resumes when run again. The password comes from the URL,
    PGPASSWORD or ~/.pgpass.
    """
    from reportdb import team

    bar = _BytesProgress(sys.stderr.isatty() and not as_json, "upload")
    try:
        result = team.push(report_path, url, name=name, tags=tags, jobs=jobs, progress=bar)
    finally:
        bar.close()
    if as_json:
        _emit(result.to_dict())
        return
    if result.created:
        _echo(f"pushed {result.name!r}: {result.chunks_uploaded} of {result.chunks} chunks sent "
              f"({_size(result.bytes_uploaded)} of {_size(result.stored_bytes)}), the rest already stored")
    else:
        _echo(f"{result.name!r} is already stored with this content: nothing sent")
    if result.left_out:
        _echo(f"left out (reportdb runs no report-supplied SQL): {', '.join(result.left_out)}")
    if result.stale_collected:
        _echo(f"removed {result.stale_collected} interrupted pushes older than the stale bound")


@cli.command("pull")
@click.argument("url")
@click.argument("name", required=False)
@click.option("-o", "--output", "out", type=click.Path(path_type=Path), help="New report folder (default: ./NAME).")
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
@_friendly
def pull_(url: str, name: str | None, out: Path | None, as_json: bool) -> None:
    """Pull report NAME of a team store back into a self-contained SQLite report folder.

    \b
    Example:
        reportdb pull postgresql://db.example.com/team nightly-1130 -o reports/nightly-1130
    An existing file is never overwritten; a failed pull leaves nothing behind.
    """
    from reportdb import team

    bar = _BytesProgress(sys.stderr.isatty() and not as_json, "download")
    try:
        result = team.pull(url, name, out, progress=bar)
    finally:
        bar.close()
    if as_json:
        _emit(result.to_dict())
        return
    _echo(f"pulled {result.name!r} -> {result.path} ({result.chunks} chunks, {_size(result.bytes)})")


@cli.command("reports")
@click.argument("url")
@click.option("--name", help="Only reports whose name contains this.")
@click.option("--tag", help="Only reports with this tag.")
@click.option("--since", help="Only reports pushed since (ISO date or time, UTC unless it says).")
@click.option("--limit", type=click.IntRange(min=1), help="At most this many (newest first).")
@click.option("--all", "everything", is_flag=True, help="Also pushes under way or interrupted (state staging).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@_friendly
def reports_(url: str, name: str | None, tag: str | None, since: str | None, limit: int | None, everything: bool,
             as_json: bool) -> None:
    """List the reports of a team store, newest push first. A push killed and never run again shows with --all
    (staging) until the next push or delete removes it after REPORTDB_TEAM_STALE_HOURS (24 by default)."""
    from reportdb import team

    found = team.list_reports(url, name=name, tag=tag, since=since, limit=limit, include_staging=everything)
    if as_json:
        _emit([r.to_dict() for r in found])
        return
    _echo(f"{'name':<32} {'ttnn':<8} {'captured':<16} {'pushed':<16} {'ops':>6} {'tensors':>7} {'bytes':>10}  tags")
    for r in found:
        shown = r.name if r.state == "ready" else f"{r.name} ({r.state})"
        _echo(f"{shown:<32} {r.ttnn_version or '-':<8} {_when(r.captured_at):<16} {_when(r.pushed_at):<16}"
              f" {_num(r.n_operations):>6} {_num(r.n_tensors):>7} {_size(r.logical_bytes or 0):>10}"
              f"  {','.join(r.tags)}")


@cli.command("delete")
@click.argument("url")
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
@_friendly
def delete_(url: str, name: str | None, as_json: bool) -> None:
    """Delete report NAME from a team store; chunks no other report uses are removed (safe while others push)."""
    from reportdb import team

    result = team.delete(url, name)
    if as_json:
        _emit(result.to_dict())
        return
    _echo(f"deleted {result.name!r}: {result.chunks_collected} chunks ({_size(result.bytes_collected)}) "
          "no other report used were removed")


@cli.command("history")
@click.argument("url")
@click.option("--op", "op_name", required=True, help="The operation's name, such as ttnn.matmul.")
@click.option("--name", help="Only reports whose name contains this.")
@click.option("--tag", help="Only reports with this tag.")
@click.option("--limit", type=click.IntRange(min=1), help="Only the newest this many runs.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@_friendly
def history_(url: str, op_name: str, name: str | None, tag: str | None, limit: int | None, as_json: bool) -> None:
    """An operation's outputs against golden across the store's runs, oldest first."""
    from reportdb import team

    rows = team.history(url, op_name, name=name, tag=tag, limit=limit)
    if as_json:
        _emit([h.to_dict() for h in rows])
        return
    _echo(f"{'report':<32} {'when':<16} {'op':>5} {'tensor':>7} {'rank':>4} {'kind':<6} {'desired':>8} {'pcc':>10}"
          f" {'recomputed':>10} passed")
    for h in rows:
        passed = "-" if h.passed is None else "yes" if h.passed else "NO"
        _echo(f"{h.report:<32} {_when(h.captured_at or h.pushed_at):<16} {_num(h.operation_id):>5}"
              f" {_num(h.tensor_id):>7} {_num(h.rank):>4} {h.kind:<6} {_num(h.desired_pcc):>8}"
              f" {_num(h.actual_pcc):>10} {_num(h.pcc):>10} {passed}")


@cli.command("merge")
@click.argument("reports", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path), help="New report folder.")
@click.option("--rank", "ranks", type=click.IntRange(min=0), multiple=True,
              help="The rank of each report, in order (default: what each declares, else its position).")
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
@_friendly
def merge_(reports: tuple[Path, ...], out: Path, ranks: tuple[int, ...], as_json: bool) -> None:
    """Merge the per-rank reports of one multi-host run into one report with rank columns.

    \b
    Example:
        reportdb merge host0/reports/1234 host1/reports/1234 -o reports/1234-all
    """
    from reportdb import team

    result = team.merge(reports, out, ranks=list(ranks) if ranks else None)
    if as_json:
        _emit(result.to_dict())
        return
    _echo(f"merged {len(result.ranks)} ranks -> {result.output}: {result.tensors} tensors "
          f"({_size(result.logical_bytes)} logical, {_size(result.stored_bytes)} stored)")
    for conflict in result.conflicts:
        _echo(f"conflict: {conflict}")


def main() -> None:
    """Console-script entry point: a closed stdout, even at the final flush, ends quietly (status 141)."""
    try:
        try:
            cli(prog_name="reportdb")
        finally:
            sys.stdout.flush()
    except (_StdoutClosed, BrokenPipeError):
        _stdout_closed()
