"""Commands that compare and draw tensors: compare (golden records, run against run) and plot."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

import reportdb
from reportdb.cli.common import (
    _echo,
    _emit,
    _friendly,
    _make_reportdb,
    _migrate_hint,
    _not_migrated,
    _num,
    _require_tensor,
    _UsageError,
    cli,
)
from reportdb.errors import (
    InvalidArgumentError,
    ReadOnlyError,
)

if TYPE_CHECKING:  # pragma: no cover
    from reportdb.analysis.culprits import GoldenComparison
    from reportdb.analysis.runs import RunComparison


#: Exit status when nothing, or not everything, could be compared (and nothing compared failed): distinct from a
#: failure (1), so a CI job does not pass on tensors that were never looked at.
EXIT_NOT_COMPARED = 3


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
@click.option(
    "--policy", "policy_path", type=click.Path(path_type=Path),
    help="A tolerance policy (TOML [[rules]] with op, dtype and criteria); default: the dtype-aware defaults.",
)
@click.option("--rtol", type=float, default=None, help="Replace every rule's rtol (makes allclose a criterion).")
@click.option("--atol", type=float, default=None, help="Replace every rule's atol (makes allclose a criterion).")
@click.option("--pcc", type=float, default=None,
              help="PCC threshold everywhere (default: the policy's; --golden: each record's desired PCC).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts (printed in full whatever the exit status).")
@_friendly
def compare_(
    report_a: Path, report_b: Path | None, golden: bool, store: bool, rank: int, policy_path: Path | None,
    rtol: float | None, atol: float | None, pcc: float | None, as_json: bool,
) -> None:
    """Compare tensors with the full metric vector under a tolerance policy: A's golden records (--golden), with
    culprits and victims, or run B against run A, with each output's verdict and the first divergence.

    Reads the reports only (--store writes A's rdb_comparison). Exit status, as a test runner's:
    0 when everything was compared and passes; 1 when a comparison fails (a golden record, or an output
    that diverges) or on an error; 3 when nothing failed but nothing, or not everything, could be
    compared (tensors or goldens not stored, a legacy folder not migrated, unmatched operations);
    2 on a usage error.

    \b
    Examples:
        reportdb compare migrated/1234 --golden
        reportdb compare migrated/1234 --golden --policy tolerances.toml --store
        reportdb compare runs/before runs/after --json
    """
    if golden == (report_b is not None):
        raise _UsageError("give one report with --golden, or two reports A B to compare run against run")
    if store and not golden:
        raise _UsageError("--store keeps golden comparison results: use it with --golden")
    policy = reportdb.Policy.load(policy_path) if policy_path is not None else reportdb.Policy.default()
    policy = policy.with_overrides(rtol=rtol, atol=atol)
    if golden:
        _compare_golden(report_a, store=store, policy=policy, pcc=pcc, as_json=as_json)
        return
    assert report_b is not None
    result = reportdb.compare_runs(report_a, report_b, rank=rank, policy=policy, pcc=pcc)
    if as_json:
        _emit(result.to_dict())
    else:
        _print_runs(result)
    if result.first_divergence is not None:
        raise click.exceptions.Exit(1)
    if result.compared == 0 or result.not_compared or result.unmatched_a or result.unmatched_b:
        _hint_migrate(report_a, report_b)
        _echo(f"reportdb: {result.compared} of {len(result.rows)} matched outputs compared"
              f"{'; unmatched operations left out' if result.unmatched_a or result.unmatched_b else ''}: "
              f"not everything was compared (exit status {EXIT_NOT_COMPARED})", err=True)
        raise click.exceptions.Exit(EXIT_NOT_COMPARED)


def _print_runs(result: "RunComparison") -> None:
    """The run-against-run table: one row per matched output, columns two spaces apart whatever their width."""
    _echo(f"operations matched by {result.matched_by}")
    table = [("", "op A", "op B", "name", "out", "shape", "pcc", "max abs err", "ulp max", "verdict")]
    for r in result.rows:
        shape = "x".join(map(str, r.shape)) if r.shape is not None else "-"
        verdict = r.status if r.verdict is None else r.verdict + (f" ({','.join(r.failed)})" if r.failed else "")
        table.append((">>" if r.first_divergence else "", str(r.operation_id_a), str(r.operation_id_b), r.name[:27],
                      str(r.output_index), shape, _num(r.pcc), _num(r.max_abs_error), _num(r.ulp_max), verdict))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]) - 1)]
    right = {1, 2, 4, 6, 7, 8}
    for row in table:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        _echo("  ".join(cells + [row[-1]]).rstrip())
    counts = result.counts()
    _echo(", ".join(f"{n} {k.replace('_', ' ')}" for k, n in counts.items()))
    first = result.first_divergence
    _echo("first divergence: " + ("none" if first is None else
          f"operation {first.operation_id_a} {first.name} output {first.output_index} (B: operation "
          f"{first.operation_id_b}; tensors {first.tensor_a} / {first.tensor_b}; failed {', '.join(first.failed)})"
          + "".join(f"; {note}" for note in first.notes)))
    for side, unmatched in (("A", result.unmatched_a), ("B", result.unmatched_b)):
        for op in unmatched:
            _echo(f"unmatched in {side}: operation {op.operation_id} {op.name}")


def _hint_migrate(*paths: Path) -> None:
    """Tell how to migrate a legacy report folder whose tensors are not stored yet."""
    for path in paths:
        pending = _not_migrated(path)
        if pending:
            _echo(f"reportdb: {_migrate_hint(path, pending)}", err=True)


def _compare_golden(path: Path, *, store: bool, policy: "reportdb.Policy", pcc: float | None, as_json: bool) -> None:
    """``compare A --golden``: read-only unless ``store``; exit 1 when a compared tensor fails, 3 when nothing failed
    but not every record could be compared."""
    if store:
        with reportdb.open(path, "r") as probe:
            legacy = probe.schema_revision is None
        if legacy:
            command, made = _make_reportdb(path)
            raise ReadOnlyError(
                f"{path} is a legacy report database (the original), not a reportdb one; --store writes reportdb's tables, "
                f"so run `{command}` and compare {made} with --store; nothing was changed"
            )
    with reportdb.open(path, "a" if store else "r") as report:
        result = reportdb.compare_golden(report, policy=policy, pcc=pcc, store=store)
    counts = result.counts()
    if as_json:
        _emit(result.to_dict())
    elif not result.records:
        _echo(f"nothing to compare: {path} has no golden comparison records")
    else:
        _print_golden(result, stored=store)
    if counts["not_compared"]:
        _hint_migrate(path)
    if counts["failed"]:
        raise click.exceptions.Exit(1)
    if counts["not_compared"] or not counts["compared"]:
        _echo(f"reportdb: {counts['compared']} of {len(result.records)} golden records compared: not everything was "
              f"compared (exit status {EXIT_NOT_COMPARED})", err=True)
        raise click.exceptions.Exit(EXIT_NOT_COMPARED)


def _print_golden(result: "GoldenComparison", *, stored: bool) -> None:
    """The golden table: records in the report's order with verdicts and roles, then the counts and the first culprit."""
    table = [("kind", "op", "name", "tensor", "golden", "recorded pcc", "pcc", "pcc (tt-metal)", "sqnr dB",
              "max abs err", "ulp max", "result")]
    for r in result.records:
        m = r.metrics
        head = (r.kind, _num(r.operation_id), (r.name or "-")[:27], str(r.tensor_id), _num(r.golden_tensor_id),
                _num(r.recorded_pcc))
        if m is None:
            table.append((*head, "-", "-", "-", "-", "-", r.status))
            continue
        verdict = "pass" if r.passed else "FAIL " + ",".join(r.failed)
        table.append((*head, _num(m.pcc), _num(m.pcc_ttmetal), _num(m.sqnr_db), _num(m.max_abs_error), _num(m.ulp_max),
                      f"{verdict} [{r.role}]"))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]) - 1)]
    for row in table:
        cells = [c.ljust(w) if i in (0, 2) else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))]
        _echo("  ".join(cells + [row[-1]]).rstrip())
    for r in result.records:
        for note in r.notes if r.verdict == "fail" else ():
            _echo(f"{r.kind} op {_num(r.operation_id)} tensor {r.tensor_id}: {note}")
    for anomaly in result.anomalies:
        _echo(f"anomaly: {anomaly.describe()}")
    c = result.counts()
    _echo(f"{c['compared']} compared: {c['passed']} passed, {c['failed']} failed; {c['not_compared']} not compared"
          + (" (results stored)" if stored and c["compared"] else ""))
    if result.global_only:
        _echo("global records only: no local record tells an operation's own error; culprits are where the error "
              f"first grows (output against its inputs' worst, by more than {result.growth_db:g} dB)")
    first = result.first_culprit
    _echo("first culprit: " + ("none" if first is None else f"operation {first.operation_id} {first.name} "
                               f"(tensor {first.tensor_id})"))


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
