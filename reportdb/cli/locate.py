"""``reportdb locate``: where a tensor is wrong against its golden, in tiles, devices and cores."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

import reportdb
from reportdb.cli.common import _echo, _emit, _friendly, _num, _require_tensor, _table, _UsageError, cli

if TYPE_CHECKING:  # pragma: no cover
    from reportdb.analysis.locate import LocateResult

#: Cores printed at most in the table (the worst first); --json has all.
_CORES_SHOWN = 16


def _device(text: str | None) -> tuple[int, ...] | None:
    """``R,C`` as a mesh coordinate."""
    if text is None:
        return None
    try:
        coord = tuple(int(part) for part in text.split(","))
    except ValueError:
        coord = ()
    if not coord or any(c < 0 for c in coord):
        raise _UsageError(f"--device takes a mesh coordinate such as 0,2, not {text!r}")
    return coord


@cli.command(name="locate")
@click.argument("report_path", metavar="REPORT", type=click.Path(path_type=Path))
@click.argument("tensor_id", metavar="TENSOR", type=int)
@click.option("--golden", is_flag=True, help="Compare with the golden tensor of the tensor's comparison record.")
@click.option("--kind", type=click.Choice(["local", "global"]), default=None,
              help="With --golden: the local (the op's own error, the default) or global comparison record.")
@click.option("--against", help="Compare with another tensor: ID in the same report, or PATH:ID in another report.")
@click.option("--device", "device_text", metavar="R,C", help="Only this device's shard of a multi-device tensor.")
@click.option("--policy", "policy_path", type=click.Path(path_type=Path, dir_okay=False),
              help="A tolerance policy TOML file (default: the dtype-aware defaults).")
@click.option("--rank", type=int, default=0, show_default=True)
@click.option("--top", type=click.IntRange(min=0), default=10, show_default=True, help="Worst tiles listed.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts (the tile maps included).")
@_friendly
def locate_(
    report_path: Path, tensor_id: int, golden: bool, kind: str | None, against: str | None, device_text: str | None,
    policy_path: Path | None, rank: int, top: int, as_json: bool,
) -> None:
    """Where TENSOR differs from its golden: the worst tiles (tile index, element ranges), each device of a
    multi-device tensor (PCC, least-squares fit actual = scale * golden + offset, verdict) and each core of a
    sharded memory config. Reads the report only, window by window. Exit status 0 when the tensor was located
    (whatever it found; `reportdb compare --golden` is the pass/fail runner), 1 on an error, 2 on a usage error.

    \b
    Examples:
        reportdb locate migrated/1234 7 --golden
        reportdb locate migrated/1234 7 --golden --kind global --device 0,2
        reportdb locate runs/after 7 --against runs/before:7 --json
    """
    if golden == (against is not None):
        raise _UsageError("give --golden (with --kind local or global) or --against ID or PATH:ID, not both or neither")
    if kind is not None and not golden:
        raise _UsageError("--kind picks the comparison record of --golden: use it with --golden")
    device = _device(device_text)
    path, _, other_id = (against or "").rpartition(":")
    if against is not None and not other_id.isdigit():
        raise _UsageError(f"--against takes ID or PATH:ID, not {against!r}")
    with reportdb.open(report_path, "r") as report:
        _require_tensor(report, report_path, tensor_id, rank)
        if golden:
            result = reportdb.locate(report, tensor_id, golden=kind or "local", device=device, policy=policy_path,
                                     rank=rank, top=top)
        else:
            if not path:
                _require_tensor(report, report_path, int(other_id), rank)
                result = reportdb.locate(report, tensor_id, against=int(other_id), device=device, policy=policy_path,
                                         rank=rank, top=top)
            else:
                with reportdb.open(path, "r") as other:
                    _require_tensor(other, Path(path), int(other_id), rank)
                    result = reportdb.locate(report, tensor_id, against=(other, int(other_id)), device=device,
                                             policy=policy_path, rank=rank, top=top)
    if as_json:
        _emit(result.to_dict())
        return
    _print(result)


def _print(result: "LocateResult") -> None:
    """The result as a few tables."""
    shape = "x".join(map(str, result.shape))
    where = "" if result.device is None else f" device {','.join(map(str, result.device))}"
    _echo(f"tensor {result.tensor_id}{where} {shape} {result.dtype or '-'} against {result.golden}"
          f"{'' if result.op is None else f' (output of {result.op})'}")
    _echo(f"max abs error {_num(result.max_abs_error)}, {result.mismatches} mismatches at rtol={_num(result.rtol)} "
          f"atol={_num(result.atol)}; tile {result.tile_shape[0]}x{result.tile_shape[1]}")
    if result.worst_tiles:
        _echo("worst tiles:")
        tiles = [("tile", "rows", "cols", "max abs err", "mismatches", "device")]
        for t in result.worst_tiles:
            rows = "-" if len(t.ranges) < 2 else f"{t.ranges[-2][0]}:{t.ranges[-2][1]}"
            cols = "-" if not t.ranges else f"{t.ranges[-1][0]}:{t.ranges[-1][1]}"
            dev = "-" if t.device is None else ",".join(map(str, t.device))
            tiles.append((str(list(t.tile)), rows, cols, _num(t.max_abs_error), str(t.mismatches), dev))
        for line in _table(tiles, right={1, 2, 3, 4}, indent="  "):
            _echo(line)
    else:
        _echo("no tile differs")
    if result.devices:
        _echo("devices:")
        devices = [("device", "pcc", "max abs err", "fit scale", "fit offset", "mismatches", "verdict")]
        for d in result.devices:
            verdict = "pass" if d.passed else "FAIL " + ",".join(d.failed)
            devices.append((",".join(map(str, d.coordinate)), _num(d.pcc), _num(d.max_abs_error), _num(d.fit_scale),
                            _num(d.fit_offset), str(d.mismatches), verdict))
        for line in _table(devices, right={1, 2, 3, 4, 5}, indent="  "):
            _echo(line)
        for d in result.devices:
            for note in () if d.passed else d.notes:
                _echo(f"  device {','.join(map(str, d.coordinate))}: {note}")
    if result.cores:
        _echo(f"cores ({result.memory_layout}, shard {'x'.join(map(str, result.shard_shape or ()))}, "
              f"{result.shard_orientation}), worst first:")
        cores = [("core", "shard", "max abs err", "mismatches", "elements", "device")]
        worst = sorted(result.cores, key=lambda c: (-c.max_abs_error, -c.mismatches))
        for c in worst[:_CORES_SHOWN]:
            core = "-" if c.core is None else f"{c.core[0]},{c.core[1]}"
            dev = "-" if c.device is None else ",".join(map(str, c.device))
            cores.append((core, str(c.shard), _num(c.max_abs_error), str(c.mismatches), str(c.elements), dev))
        for line in _table(cores, right={1, 2, 3, 4}, indent="  "):
            _echo(line)
        if len(worst) > _CORES_SHOWN:
            _echo(f"  ... {len(worst) - _CORES_SHOWN} more (--json lists all)")
    for note in result.notes:
        _echo(f"note: {note}")
