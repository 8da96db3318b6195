"""Commands that compare and draw tensors: compare (golden records, run against run) and plot."""

from __future__ import annotations

import shlex
from pathlib import Path

import click

import reportdb
from reportdb.cli.common import (
    _echo,
    _emit,
    _friendly,
    _legacy_folder,
    _migrate_hint,
    _not_migrated,
    _num,
    _require_tensor,
    cli,
)
from reportdb.errors import (
    InvalidArgumentError,
    ReadOnlyError,
)


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
