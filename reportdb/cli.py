"""The ``reportdb`` command: click commands over the public Python API only.

Errors reach the user as one line on stderr and a non-zero exit code, never a traceback.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, TypeVar

import click

import reportdb
from reportdb.comparisons import FLAGS
from reportdb.errors import ReportDBError

F = TypeVar("F", bound=Callable[..., Any])


def _friendly(func: F) -> F:
    """Turn library errors (and a broken pipe or Ctrl-C) into one line and an exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (click.exceptions.Exit, click.ClickException):  # a command's own exit code or message
            raise
        except ReportDBError as exc:
            raise click.ClickException(str(exc)) from None
        except KeyboardInterrupt:
            click.echo("reportdb: interrupted", err=True)
            sys.exit(130)
        except OSError as exc:
            raise click.ClickException(f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": ")) from None
        except Exception as exc:  # a bug of ours: still one line, with the way to see more
            if os.environ.get("REPORTDB_DEBUG"):
                raise
            raise click.ClickException(
                f"internal error {type(exc).__name__}: {exc} (set REPORTDB_DEBUG=1 for the traceback)"
            ) from None

    return wrapper  # type: ignore[return-value]


def _emit(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, allow_nan=False, default=str))


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

    \b
    Example:
        reportdb info generated/ttnn/reports/1234
    """
    with reportdb.open(path, "r") as report:
        summary = report.summary()
    if as_json:
        _emit(summary)
        return
    click.echo(f"report:          {summary['path']}")
    revision = summary["schema_revision"] or "none (pre-reportdb report; run `reportdb upgrade`)"
    click.echo(f"reportdb schema: {revision} (this reportdb: {summary['schema_head']})")
    if summary["report_schema_version"] is not None:
        click.echo(f"report schema:   {summary['report_schema_version']}")
    click.echo(f"tensors:         {summary['tensors']} ({summary['shards']} shards)")
    click.echo(f"tensor bytes:    {_size(summary['stored_bytes'])} stored for {_size(summary['logical_bytes'])} logical")
    click.echo("tables:")
    for name, count in summary["tables"].items():
        if not name.startswith(("rdb_", "reportdb_")):
            click.echo(f"  {name:<34} {count:>12,}")


@cli.command(name="ls")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@_friendly
def ls_(path: Path, as_json: bool) -> None:
    """List stored tensors: id, rank, shape, dtype, ttnn dtype, layout, size."""
    with reportdb.open(path, "r") as report:
        infos = [report.tensor_info(tid, rank) for tid, rank in report.tensor_keys()]
    if as_json:
        _emit([i.to_json() for i in infos])
        return
    click.echo(f"{'id':>10} {'rank':>4}  {'shape':<22} {'dtype':<10} {'ttnn dtype':<10} {'layout':<9} {'shards':>6} {'size':>10}")
    for i in infos:
        shape = "?" if i.shape is None else "x".join(str(d) for d in i.shape) or "()"
        click.echo(
            f"{i.tensor_id:>10} {i.rank:>4}  {shape:<22} {i.dtype:<10} {i.spec.ttnn_dtype or '-':<10} "
            f"{i.spec.layout or '-':<9} {len(i.shards):>6} {_size(i.nbytes):>10}"
        )


@cli.command()
@click.argument("path", type=click.Path(path_type=Path))
@_friendly
def upgrade(path: Path) -> None:
    """Bring a report database of any age to the current schema, in place and all-or-nothing."""
    click.echo(f"{path}: schema {reportdb.upgrade(path)}")


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
        click.echo(f"{key + ':':<16}{value}")


@cli.command()
@click.argument("file", type=click.Path(path_type=Path))
@click.option("-o", "--output", "out", type=click.Path(path_type=Path), required=True, help=".npy, .npz or .safetensors")
@_friendly
def convert(file: Path, out: Path) -> None:
    """Convert a legacy tensor file to .npy, .npz (one array per device shard) or .safetensors."""
    reportdb.convert_tensor_file(file, out)
    click.echo(f"{file} -> {out}")


@cli.command(name="compare")
@click.argument("report_a", metavar="A", type=click.Path(path_type=Path))
@click.argument("report_b", metavar="[B]", required=False, type=click.Path(path_type=Path))
@click.option("--golden", is_flag=True, help="Recompute A's local and global golden comparison records.")
@click.option("--rank", type=int, default=0, show_default=True)
@click.option("--rtol", type=float, default=1e-5, show_default=True)
@click.option("--atol", type=float, default=1e-8, show_default=True)
@click.option("--pcc", type=float, default=None, help="PCC threshold (default: each record's desired PCC, or 0.99).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@_friendly
def compare_(
    report_a: Path, report_b: Path | None, golden: bool, rank: int, rtol: float, atol: float, pcc: float | None, as_json: bool
) -> None:
    """Compare tensors with the full metric vector: A's golden records (--golden), or run B against run A.

    \b
    Examples:
        reportdb compare migrated/1234 --golden
        reportdb compare runs/before runs/after --json
    """
    if golden == (report_b is not None):
        raise ReportDBError("give one report with --golden, or two reports A B to compare run against run")
    if golden:
        with reportdb.open(report_a, "a") as report:
            results = reportdb.compare_golden(report, rtol=rtol, atol=atol, pcc=pcc)
        if as_json:
            _emit(results)
            return
        click.echo(f"{'kind':<7}{'tensor':>9}{'golden':>10}  {'recorded pcc':>13}{'pcc':>13}{'pcc (tt-metal)':>16}"
                   f"{'max abs err':>13}{'ulp max':>9}  result")
        for r in results:
            m = r["metrics"]
            if m is None:
                click.echo(f"{r['kind']:<7}{r['tensor_id']:>9}{r['golden_tensor_id'] or '-':>10}  {_num(r['recorded_pcc']):>13}  {r['status']}")
                continue
            click.echo(
                f"{r['kind']:<7}{r['tensor_id']:>9}{r['golden_tensor_id']:>10}  {_num(r['recorded_pcc']):>13}{_num(m['pcc']):>13}"
                f"{_num(m['pcc_ttmetal']):>16}{_num(m['max_abs_error']):>13}{_num(m['ulp_max']):>9}  "
                + ("pass" if m["passed"] else "FAIL " + (",".join(f for f in FLAGS if m.get(f)) or "pcc below threshold"))
            )
        return
    with reportdb.open(report_a) as a, reportdb.open(report_b) as b:  # type: ignore[arg-type]
        result = reportdb.compare_runs(a, b, rank=rank, rtol=rtol, atol=atol, pcc=0.99 if pcc is None else pcc)
    if as_json:
        _emit(result)
        return
    click.echo(f"operations matched by {result['matched_by']}")
    click.echo(f"  {'op A':>6}{'op B':>6}  {'name':<28}{'out':>4}  {'shape':<18}{'pcc':>12}{'max abs err':>13}{'ulp max':>9}  flags")
    for r in result["rows"]:
        mark = ">>" if r["first_divergence"] else "  "
        shape = "x".join(map(str, r["shape"])) if r["shape"] is not None else "-"
        tail = ",".join(r["flags"]) or ("" if r["passed"] else r["status"] if r["passed"] is None else "below threshold")
        click.echo(
            f"{mark}{r['operation_id_a']:>6}{r['operation_id_b']:>6}  {r['name'][:27]:<28}{r['output_index']:>4}  {shape:<18}"
            f"{_num(r['pcc']):>12}{_num(r['max_abs_error']):>13}{_num(r['ulp_max']):>9}  {tail}"
        )
    first = result["first_divergence"]
    click.echo("first divergence: " + ("none" if first is None else f"operation {first['operation_id_a']} {first['name']} output {first['output_index']}"))
    for side in ("a", "b"):
        for op in result[f"unmatched_{side}"]:
            click.echo(f"unmatched in {side.upper()}: operation {op['operation_id']} {op['name']}")


@cli.command(name="plot")
@click.argument("report_path", metavar="REPORT", type=click.Path(path_type=Path))
@click.argument("tensor_id", type=int)
@click.option("--against", help="Another tensor: ID in the same report, or PATH:ID in another report.")
@click.option("--rank", type=int, default=0, show_default=True)
@click.option("-o", "--output", "out", type=click.Path(path_type=Path), required=True, help="The picture (.png, .svg, .pdf).")
@_friendly
def plot_(report_path: Path, tensor_id: int, against: str | None, rank: int, out: Path) -> None:
    """Draw a tensor's heatmap and histogram, or the absolute error against another tensor."""
    with reportdb.open(report_path) as report:
        if against is None:
            reportdb.plot_tensor(report, tensor_id, out, rank=rank)
        else:
            path, _, other_id = against.rpartition(":")
            if not other_id.isdigit():
                raise ReportDBError(f"--against takes ID or PATH:ID, not {against!r}")
            if not path:
                reportdb.plot_tensor(report, tensor_id, out, rank=rank, against=(report, int(other_id)))
            else:
                with reportdb.open(path) as other:
                    reportdb.plot_tensor(report, tensor_id, out, rank=rank, against=(other, int(other_id)))
    click.echo(f"wrote {out}")


def _num(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
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
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@_friendly
def migrate_(
    src: Path, dst: Path | None, jobs: int, strict: bool, remove_legacy_files: bool, no_stats: bool, compression: str,
    as_json: bool,
) -> None:
    """Turn a legacy report folder (db.sqlite + tensors/) into one self-contained report.

    \b
    Examples:
        reportdb migrate generated/ttnn/reports/1234 -o migrated/1234 --jobs 2
        reportdb migrate generated/ttnn/reports/1234 --remove-legacy-files
        reportdb migrate generated/ttnn/reports/1234 -o migrated/1234 --compression zstd
    An interrupted run leaves a .db.sqlite.reportdb-partial file; run the same command again to finish.
    """
    bar = _MigrationProgress(sys.stderr.isatty() and not as_json)
    try:
        summary = reportdb.migrate(
            src, dst, jobs=jobs, strict=strict, remove_legacy_files=remove_legacy_files, progress=bar,
            stats=not no_stats, compression=compression,  # type: ignore[arg-type]
        )
    finally:
        bar.close()
    if as_json:
        _emit(summary)
        return
    tensors, problems = summary["tensors"], summary["problems"]
    click.echo(f"{summary['source']} -> {summary['destination']}" + (" (already migrated)" if summary.get("already_migrated") else ""))
    click.echo(f"tables:   {summary['tables_copied']} ({summary['rows_copied']:,} rows) copied")
    formats = ", ".join(f"{k} {v}" for k, v in tensors["by_format"].items()) or "none"
    click.echo(f"tensors:  {tensors['stored']} stored ({formats}); {tensors['already_stored']} were stored by an earlier run")
    for key in ("orphan_files", "missing_files", "unreadable_files", "golden_without_file"):
        if problems.get(key):
            click.echo(f"  {key.replace('_', ' ')}: {len(problems[key])}")
    click.echo(f"verified: {summary['verified']['tensors']} tensors, {_size(summary['verified']['bytes_checked'])} re-hashed")
    click.echo(f"size:     {_size(summary['bytes']['before'])} before, {_size(summary['bytes']['after'])} after")
    if summary.get("legacy_files_removed"):
        click.echo(f"removed:  {summary['legacy_files_removed']} legacy tensor files")


@cli.command(name="verify")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--against", type=click.Path(path_type=Path), help="Legacy report folder whose tensor files to compare values with.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@_friendly
def verify_(path: Path, against: Path | None, as_json: bool) -> None:
    """Re-read every stored tensor and check its digests; with --against, compare values with the legacy files."""
    result = reportdb.verify(path, against=against)
    if as_json:
        _emit(result)
    else:
        compared = f", {result['compared']} compared with {against}" if against is not None else ""
        click.echo(f"{result['tensors']} tensors, {_size(result['bytes_checked'])} re-hashed{compared}")
        for problem in result["problems"]:
            click.echo(f"  tensor {problem['tensor_id']} (rank {problem['rank']}): {problem['error']}", err=True)
    if not result["ok"]:
        raise click.exceptions.Exit(1)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="reportdb")
