"""``reportdb replay``: every operation's reference computed from its stored device inputs, judged against its output."""

from __future__ import annotations

from pathlib import Path

import click

import reportdb
from reportdb.cli.common import _echo, _emit, _friendly, _migrate_hint, _not_migrated, _num, cli


@cli.command(name="replay")
@click.argument("report_path", metavar="REPORT", type=click.Path(path_type=Path))
@click.option("--ops", "ops_glob", metavar="GLOB", help="Only operations whose name matches (e.g. 'ttnn.matmul', 'ttnn.*norm').")
@click.option(
    "--policy", "policy_path", type=click.Path(path_type=Path),
    help="A tolerance policy (TOML [[rules]] with op, dtype and criteria); default: the dtype-aware defaults.",
)
@click.option("--rank", type=int, default=0, show_default=True)
@click.option(
    "--store", is_flag=True,
    help="Keep each reference as a tensor and each result as a local comparison record (rdb_comparison kind 'replay', "
    "and ttnn's local_tensor_comparison_records where it has none): a reportdb database, never a legacy original.",
)
@click.option(
    "--chain", is_flag=True,
    help="Feed each reference the chained references before it (stored values only for the model's inputs and weights): "
    "each output against its global golden, the error accumulated from the start.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts (printed in full whatever the exit status).")
@_friendly
def replay_(
    report_path: Path, ops_glob: str | None, policy_path: Path | None, rank: int, store: bool, chain: bool, as_json: bool
) -> None:
    """Replay each operation on the inputs the device had: its reference output against its stored output.

    The isolated (local) error of every operation whose inputs and output are stored, with no comparison mode:
    an operation wrong by itself fails, the ones after it are judged on their own device inputs (--chain:
    against the chained references, the global golden). Reads the report only (--store writes it). Exit
    status 0 when every compared operation passes its policy, 1 when one fails or on an error. Operations
    without a reference, with arguments no reference reads (named) or with values not stored are listed,
    not failed.

    \b
    Examples:
        reportdb replay reports/1234
        reportdb replay reports/1234 --ops 'ttnn.matmul' --policy tolerances.toml --json
    """
    policy = reportdb.Policy.load(policy_path) if policy_path is not None else reportdb.Policy.default()
    if as_json:
        result = reportdb.replay(report_path, ops=ops_glob, policy=policy, rank=rank, store=store, chain=chain)
        _emit(result.to_dict())
        if result.first_failure is not None:
            raise click.exceptions.Exit(1)
        return
    _echo(f"{'op':>6}  {'name':<28}{'status':<23}{'pcc':>12}{'max abs err':>13}{'ulp max':>9}  result")
    first = None
    counts = dict.fromkeys(("compared", "no_reference", "missing_inputs", "unsupported_arguments"), 0)
    rows = reportdb.iter_replay(report_path, ops=ops_glob, policy=policy, rank=rank, store=store, chain=chain)
    for row in rows:  # printed as each operation is replayed
        counts[row.status] += 1
        m = row.metrics
        if m is None:
            outcome = ", ".join(row.unsupported) if row.unsupported else row.detail
        else:
            outcome = "pass" if row.passed else "FAIL " + ",".join(row.failed)
        if row.passed is False and first is None:
            first = row
        op = f"{row.operation_id}" + (f".{row.output_index}" if row.output_index else "")  # op.N: its output N
        _echo(f"{op:>6}  {row.name[:27]:<28}{row.status:<23}{_num(m.pcc if m else None):>12}"
              f"{_num(m.max_abs_error if m else None):>13}{_num(m.ulp_max if m else None):>9}  {outcome}")
    _echo("first failure: " + ("none" if first is None else f"operation {first.operation_id} {first.name}"
                               + (f" (output {first.output_index})" if first.output_index else "")))
    _echo(", ".join(f"{n} {status}" for status, n in counts.items()))
    if counts["compared"] == 0 and counts["missing_inputs"]:
        pending = _not_migrated(report_path)
        if pending:
            _echo(f"reportdb: {_migrate_hint(report_path, pending)}", err=True)
    if first is not None:
        raise click.exceptions.Exit(1)


@cli.command(name="repro")
@click.argument("report_path", metavar="REPORT", type=click.Path(path_type=Path))
@click.argument("operation_id", metavar="OP_ID", type=int)
@click.option("-o", "--output", "out", type=click.Path(path_type=Path), help="The new folder (default: ./repro-OP_ID).")
@click.option(
    "--policy", "policy_path", type=click.Path(path_type=Path),
    help="A tolerance policy (TOML [[rules]] with op, dtype and criteria); default: the dtype-aware defaults.",
)
@click.option("--rank", type=int, default=0, show_default=True)
@click.option("--output-index", type=click.IntRange(min=0), default=0, show_default=True,
              help="Which output of an operation with several (ttnn.split...).")
@_friendly
def repro_(
    report_path: Path, operation_id: int, out: Path | None, policy_path: Path | None, rank: int, output_index: int
) -> None:
    """Write one operation as a folder that reproduces its verdict anywhere (numpy, ml_dtypes, pytest).

    The folder holds its stored inputs and device output (.npy, dtype kept), its arguments, the reference
    output, the policy's criteria, a README and test_repro.py, which fails exactly when the operation fails
    its policy. Reads the report only.

    \b
    Example:
        reportdb repro reports/1234 17 -o repro-17 && cd repro-17 && python -m pytest -q
    """
    policy = reportdb.Policy.load(policy_path) if policy_path is not None else reportdb.Policy.default()
    folder = reportdb.make_repro(report_path, operation_id, out or Path(f"repro-{operation_id}"), policy=policy, rank=rank,
                                 output_index=output_index)
    _echo(f"wrote {folder} (run `python -m pytest` in it)")
