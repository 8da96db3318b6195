"""``reportdb replay``: every operation's reference computed from its stored device inputs, judged against its output."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

import reportdb
from reportdb.cli.common import _cells, _echo, _emit, _friendly, _migrate_hint, _not_migrated, _num, cli
from reportdb.cli.compare import EXIT_NOT_COMPARED

if TYPE_CHECKING:  # pragma: no cover - imported where used, so `reportdb --help` loads no numpy
    from reportdb.analysis.replay_rows import ReplayCounts, ReplayRow


@cli.command(name="replay")
@click.argument("report_path", metavar="REPORT", type=click.Path(path_type=Path), required=False)
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
@click.option(
    "--substitute", metavar="OP[,OP...]",
    help="With --chain: take these operations (ids, names or globs) as right and go on past them, so a culprit an "
    "earlier one hid shows up; each row then gives its isolated, chained and substituted verdicts.",
)
@click.option("--substitute-failing", is_flag=True,
              help="With --chain: substitute every operation that fails in isolation (see --substitute).")
@click.option("--workers", type=click.IntRange(min=1), metavar="N",
              help="Threads replaying isolated operations at once (default: the machine's cores, at most 8).")
@click.option("--full-stats", is_flag=True,
              help="The full metric vector of every output (quantiles, relative errors, ULPs, tt-metal's PCC...); by "
              "default only failing outputs get it, passing ones what their verdict reads (the same verdicts, about "
              "half the comparison time).")
@click.option("--references", "list_references", is_flag=True,
              help="List every operation replay has a reference for, its family and its arguments (no REPORT).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts (printed in full whatever the exit status).")
@_friendly
def replay_(
    report_path: Path | None, ops_glob: str | None, policy_path: Path | None, rank: int, store: bool, chain: bool,
    substitute: str | None, substitute_failing: bool, workers: int | None, full_stats: bool, list_references: bool,
    as_json: bool,
) -> None:
    """Replay each operation on the inputs the device had: its reference output against its stored output.

    The isolated (local) error of every operation whose inputs and output are stored, with no comparison mode:
    an operation wrong by itself fails, the ones after it are judged on their own device inputs (--chain:
    against the chained references, the global golden). Reads the report only (--store writes it).
    Operations without a reference, with arguments no reference reads (named) or with values not stored
    are listed, not failed; the last line says how many operations were compared of how many replayed.
    A passing output's figures no verdict reads (its ULPs, quantiles, relative errors) show as "-" unless
    --full-stats.

    Exit status: 0 when something was compared and every compared output passes its policy; 1 when one
    fails, or on an error; 3 when nothing failed because nothing was compared (no operation matches --ops,
    none has a reference, readable arguments and stored values, or --chain never reaches one); 2 on a
    usage error.

    \b
    Examples:
        reportdb replay reports/1234
        reportdb replay reports/1234 --ops 'ttnn.matmul' --policy tolerances.toml --json
        reportdb replay reports/1234 --chain --substitute-failing
        reportdb replay --references
    """
    if list_references:
        _references(as_json)
        return
    if report_path is None:
        raise click.UsageError("replay needs a REPORT (or --references to list the operations it replays)")
    swapping = substitute is not None or substitute_failing
    if swapping and not chain:
        raise click.UsageError("--substitute and --substitute-failing continue a chain: add --chain")
    policy = reportdb.Policy.load(policy_path) if policy_path is not None else reportdb.Policy.default()
    rows = reportdb.iter_replay(report_path, ops=ops_glob, policy=policy, rank=rank, store=store, chain=chain,
                                substitute=substitute, substitute_failing=substitute_failing, workers=workers,
                                full_stats=full_stats)
    from reportdb.analysis.peers import Peers
    from reportdb.analysis.replay_rows import ReplayCounts, ReplayResult, peer_output

    if as_json:
        result = ReplayResult.of(rows, chain=chain)
        _emit(result.to_dict())
        _exit(report_path, ReplayCounts(result.rows), ops_glob)
        return
    tally = ReplayCounts()
    peers = Peers()
    last: "ReplayRow | None" = None
    header, widths = (_HEADER[:-1] + _SIDE + _HEADER[-1:], _WIDTHS + (6, 7, 11)) if swapping else (_HEADER, _WIDTHS)
    for row in rows:
        if not tally.rows:  # the header only once there is a row: an unreadable report prints nothing before its error
            _echo(_cells(header, widths, _RIGHT))
        tally.add(row)
        seen = None if chain else peer_output(row)
        if seen is not None:
            peers.add(seen)
        last = row if row.status == "compared" else last
        _echo(_row(row, swapping))  # printed as each operation is replayed, not kept: a report may hold 10^6 operations
    tally.done()
    first = tally.first
    _echo("first failure: " + ("none" if first is None else f"operation {first.operation_id} {first.name}"
                               + (f" (output {first.output_index})" if first.output_index else "")))
    if swapping and last is not None:
        _echo(f"last output (operation {last.operation_id} {last.name}): isolated {_verdict(last.isolated)}, chained "
              f"{_verdict(last.chained)}, substituted {_verdict(last.substituted)}")
    for anomaly in peers.anomalies():
        _echo(f"anomaly: {anomaly.describe()}")
    if not peers.complete:
        _echo(f"anomalies looked for among the first {peers.limit:,} compared outputs only")
    _echo(tally.line())
    _exit(report_path, tally, ops_glob)


def _references(as_json: bool) -> None:
    """Print the reference catalogue: one line per operation (name, family, parameters with ``*`` on the required
    ones, then those ignored), or the catalogue as JSON."""
    from reportdb.analysis import references

    entries = references.catalogue()
    if as_json:
        _emit(entries)
        return
    for entry in entries:
        params = ", ".join(f"{p['name']}{'*' if p['required'] else ''}:{p['kind']}" for p in entry["parameters"])
        _echo(f"{entry['name']}  [{entry['family']}]  {params}")
        _echo(f"    ignored (placement only): {', '.join(entry['ignored'])}")
        if entry["defined"] is not None:
            _echo(f"    compared only where defined: output{entry['defined']}")
    _echo(f"{len(entries)} operations; * marks a required parameter")


#: The replay table's columns: the header, each column's width (the widest value it takes: a 27-character name,
#: ``unsupported_arguments``, 6 significant digits with a sign and an exponent, a float32 ULP distance) and those
#: aligned right. Rows print as they come, so widths cannot follow the values; a wider one still stands two spaces
#: apart from the next.
_HEADER = ("op", "name", "status", "pcc", "max abs err", "ulp max", "result")
_WIDTHS = (6, 27, 21, 12, 12, 10)
_RIGHT = {0, 3, 4, 5}
#: The columns a substituted chain adds before the result: the isolated, plain chained and substituted verdicts (the
#: last marked ``*`` where the operation was substituted).
_SIDE = ("alone", "chained", "substituted")


def _verdict(passed: bool | None) -> str:
    """A verdict as a word: pass, FAIL, or - when not compared."""
    return "-" if passed is None else "pass" if passed else "FAIL"


def _row(row: "ReplayRow", side: bool = False) -> str:
    """One replayed output as a table line (with ``side``, its three verdicts before the result)."""
    m = row.metrics
    if m is None:
        outcome = ", ".join(row.unsupported) if row.unsupported else row.detail
    else:
        outcome = "pass" if row.passed else "FAIL " + ",".join(row.failed)
    bad = [f"device {','.join(map(str, d.coordinate))}" for d in row.devices if not d.passed]
    outcome += f" ({'; '.join(bad)})" if bad else ""
    op = f"{row.operation_id}" + (f".{row.output_index}" if row.output_index else "")  # op.N: its output N
    cells: tuple[str, ...] = (op, row.name[:27], row.status, _num(m.pcc if m else None), _num(m.max_abs_error if m else None),
             _num(m.ulp_max if m else None))
    if side:
        cells += (_verdict(row.isolated), _verdict(row.chained), _verdict(row.substituted) + ("*" if row.substitute else ""))
    return _cells(cells + (outcome,), _WIDTHS + ((6, 7, 11) if side else ()), _RIGHT)


def _exit(report_path: Path, tally: "ReplayCounts", ops_glob: str | None) -> None:
    """Exit 1 when a compared output fails, 3 when nothing was compared (said on stderr, with the migrate command
    where legacy tensor files are why), else return (status 0)."""
    if tally.failed:
        raise click.exceptions.Exit(1)
    if tally.compared:
        return
    if not tally.operations:
        why = f"no operation matches --ops {ops_glob!r}" if ops_glob is not None else "the report records no operation"
    else:
        why = f"compared 0 of {tally.operations} operations"
        pending = _not_migrated(report_path)
        if pending:
            _echo(f"reportdb: {_migrate_hint(report_path, pending)}", err=True)
    _echo(f"reportdb: {why}: nothing was compared (exit status {EXIT_NOT_COMPARED})", err=True)
    raise click.exceptions.Exit(EXIT_NOT_COMPARED)


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
