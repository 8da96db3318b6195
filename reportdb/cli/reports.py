"""Commands over one report database or legacy folder: info, ls, upgrade, migrate, verify, attach."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import click

import reportdb
from reportdb.cli.common import (
    _echo,
    _emit,
    _friendly,
    _legacy_folder,
    _make_reportdb,
    _migrate_hint,
    _not_migrated,
    _size,
    _table,
    _UsageError,
    cli,
)

from reportdb.errors import SidecarError

if TYPE_CHECKING:  # pragma: no cover
    from reportdb.legacy.summary import MigrationSummary, Skipped


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
        command, _ = _make_reportdb(path)
        of = "it" if _legacy_folder(path) is not None else "a copy of it (migrate takes a report folder)"
        _echo(f"legacy report:   `{command}` makes a reportdb report of {of}")
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
        rows = [("id", "rank", "shape", "dtype", "ttnn dtype", "layout", "shards", "size")]
        for i in infos:
            shape = "?" if i.shape is None else "x".join(str(d) for d in i.shape) or "()"
            rows.append((str(i.tensor_id), str(i.rank), shape, i.dtype, i.spec.ttnn_dtype or "-", i.spec.layout or "-",
                         str(len(i.shards)), _size(i.nbytes)))
        for line in _table(rows, right={0, 1, 6, 7}):
            _echo(line)
    if pending:
        _echo(f"reportdb: {_migrate_hint(path, pending)}", err=True)


@cli.command()
@click.argument("path", type=click.Path(path_type=Path))
@_friendly
def upgrade(path: Path) -> None:
    """Bring a report database of any age to the current schema, in place and all-or-nothing."""
    _echo(f"{path}: schema {reportdb.upgrade(path)}")


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


def _sidecar_options(command: Any) -> Any:
    """``--sidecar FILE`` (repeatable) and ``--no-sidecars``, as migrate and attach take them (see :func:`_sidecar_choice`)."""
    command = click.option("--no-sidecars", is_flag=True, help="Read no comparison-records or tensor-lifetime sidecar.")(command)
    return click.option(
        "--sidecar", "sidecars", multiple=True, type=click.Path(path_type=Path),
        help="A ttnn *.comparison_records.json / *.tensor_lifetime.json to read into the tables (repeatable); "
        "without it, those in the report folder are read.",
    )(command)


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
@_sidecar_options
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@_friendly
def migrate_(
    src: Path, dst: Path | None, jobs: int, strict: bool, remove_legacy_files: bool, no_stats: bool, compression: str,
    copy_triggers: bool, sidecars: tuple[Path, ...], no_sidecars: bool, as_json: bool,
) -> None:
    """Turn a legacy report folder (db.sqlite + tensors/) into one self-contained report.

    \b
    Examples:
        reportdb migrate generated/ttnn/reports/1234 -o migrated/1234 --jobs 2
        reportdb migrate generated/ttnn/reports/1234 --remove-legacy-files
        reportdb migrate generated/ttnn/reports/1234 -o migrated/1234 --compression zstd
    An interrupted run leaves a .db.sqlite.reportdb-partial file; run the same command again to finish.
    Symlinks and special files in the folder are skipped, never followed; the summary counts them.
    ttnn 0.81's *.comparison_records.json and *.tensor_lifetime.json sidecars in SRC (or those given with
    --sidecar) are read into the comparison-record and tensor_lifetime tables; a malformed one stops it first.
    """
    bar = _MigrationProgress(sys.stderr.isatty() and not as_json)
    try:
        summary = reportdb.migrate(
            src, dst, jobs=jobs, strict=strict, remove_legacy_files=remove_legacy_files, progress=bar,
            stats=not no_stats, compression=compression, copy_triggers=copy_triggers,  # type: ignore[arg-type]
            sidecars=_sidecar_choice(sidecars, no_sidecars),
        )
    finally:
        bar.close()
    if as_json:
        _emit(summary.to_dict())
        return
    if summary.already_migrated:
        _already_migrated(summary, remove_legacy_files)
        return
    tensors, problems = summary.tensors, summary.problems
    _echo(f"{summary.source} -> {summary.destination}")
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
    if summary.sidecars:
        _echo(_sidecar_line(summary.sidecars))


def _already_migrated(summary: "MigrationSummary", remove_legacy_files: bool) -> None:
    """A rerun of an in-place migrate: what this run did (nothing, or removing the legacy files), not the first run's
    summary again as if it had just run."""
    done = (f"removed {summary.legacy_files_removed} legacy tensor files, their values compared equal"
            if remove_legacy_files else "nothing to do")
    _echo(f"{summary.destination}: already migrated in place; {done} (an earlier run stored {summary.tensors.stored} "
          f"tensors: `reportdb info {shlex.quote(summary.destination)}` describes the report)")


def _sidecar_choice(sidecars: tuple[Path, ...], no_sidecars: bool) -> list[Path] | None:
    """The sidecars to read: those named, none (--no-sidecars), or None for those in the report folder."""
    if sidecars and no_sidecars:
        raise _UsageError("--sidecar and --no-sidecars exclude each other")
    for path in sidecars:
        if path.is_dir():  # checked here, as one line: reading it would fail with the OS's bare "Is a directory"
            raise SidecarError(
                f"--sidecar {path}: is a folder; give a ttnn *.comparison_records.json or *.tensor_lifetime.json file "
                "(without --sidecar, those in the report folder are read)"
            )
    return [] if no_sidecars else list(sidecars) or None


def _sidecar_line(done: Mapping[str, Any]) -> str:
    """One line: how many sidecars were read, the rows they added and those the tables held already."""
    added = ", ".join(f"{n} {t}" for t, n in done["added"].items()) or "no rows"
    present = sum(done["already_present"].values())
    return f"sidecars: {len(done['files'])} read; added {added}; {present} rows were there already"


def _skipped_lines(skipped: Sequence[Skipped], limit: int = 10) -> list[str]:
    """The migrate summary's ``skipped`` entries (links and special files not followed, schema objects not copied),
    one line each, the first ``limit`` of them."""
    lines = [f"  {entry.kind} {entry.name}: {entry.reason}" for entry in skipped[:limit]]
    if len(skipped) > limit:
        lines.append(f"  ... and {len(skipped) - limit} more (--json lists every one)")
    return lines


@cli.command(name="verify")
@click.argument("target", metavar="PATH")
@click.option("--against", type=click.Path(path_type=Path), help="Legacy report folder whose tensor files to compare values with.")
@click.option("--repair", is_flag=True, help="A team store: forget damaged chunks, so pushing their reports again restores them.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@_friendly
def verify_(target: str, against: Path | None, repair: bool, as_json: bool) -> None:
    """Re-read every stored tensor and check its digests; with --against, compare values with the legacy files.

    Read-only. Exit status 0 when every stored tensor checks out (also when none is stored: legacy tensor
    files not migrated are counted on stderr with the `reportdb migrate` that stores them), 1 when any
    fails or on an error. PATH may be a team store (postgresql://HOST/DATABASE[/NAME]): every chunk its reports
    name is re-read (from object storage where it keeps them) and the damaged reports are named.
    """
    from reportdb.team import is_store_url

    if is_store_url(target):
        from reportdb.cli.team import verify_store

        verify_store(target, repair, as_json)
        return
    if repair:
        raise click.UsageError("--repair is for a team store (postgresql://...), not a report file")
    path = Path(target)
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
@_sidecar_options
@click.option("--json", "as_json", is_flag=True, help="Print what was attached as JSON.")
@_friendly
def attach_(
    values: Path, report: Path, unmatched: bool, sidecars: tuple[Path, ...], no_sidecars: bool, as_json: bool
) -> None:
    """Store the tensor values capture() recorded (VALUES, a reportdb file) into the report ttnn 0.81+ wrote itself.

    \b
    Example (a run with `reportdb.Writer("values.sqlite")` and `reportdb.ttnn.capture(w)` around the model):
        reportdb attach values.sqlite generated/ttnn/reports/1234
    Tensors are matched by id and rank with the report's `tensors` table; the report's db.sqlite is replaced
    atomically once every value has been read back, so a failed attach leaves it as it was. Running it again is safe.
    ttnn 0.81's comparison-records and tensor-lifetime sidecars beside the report (or given with --sidecar) are read
    into its tables in the same write, so `reportdb compare --golden` judges their records.
    """
    from reportdb.ttnn import attach

    result = attach(values, report, unmatched=unmatched, sidecars=_sidecar_choice(sidecars, no_sidecars))
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
    if result.sidecars:
        _echo(_sidecar_line(result.sidecars))
