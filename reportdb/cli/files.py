"""Commands over one legacy tensor file: show, convert."""

from __future__ import annotations

import json
import os
import shlex
import stat
from pathlib import Path

import click

import reportdb
from reportdb.cli.common import (
    _echo,
    _emit,
    _friendly,
    cli,
)
from reportdb.errors import FormatError, ReportNotFoundError


@cli.command()
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@_friendly
def show(file: Path, as_json: bool) -> None:
    """A legacy tensor file's spec, statistics and a short value preview (.bin, .tensorbin, .pt).

    The shape is the whole tensor's (a multi-device file's shards assembled); the padded shape, where the file has
    one, is each shard's, as ttnn pads every device's shard to whole tiles: each line says which it is.
    """
    try:
        description = reportdb.describe_tensor_file(file)
    except (FormatError, ReportNotFoundError) as exc:
        report = _a_report(file)
        if report is None:
            raise
        raise FormatError(f"{file}: {report}, not a legacy tensor file: `reportdb info {shlex.quote(str(file))}` "
                          f"describes a report, `reportdb ls {shlex.quote(str(file))}` lists its tensors") from exc
    if as_json:
        _emit(description)
        return
    stats = {k: v for k, v in (description.get("stats") or {}).items() if not k.startswith("hist_")}
    spec = dict(description.get("spec") or {})
    padded = spec.pop("padded_shape", None)
    spec.pop("logical_shape", None)  # the same as `shape` below, which says what it is the shape of
    shards = description.get("shards") or []
    for key, value in description.items():
        if key == "stats":
            text = " ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in stats.items())
        elif value is None:
            continue
        elif key == "spec":
            text = json.dumps(spec, default=str)
        elif key == "shape":
            _echo(f"{'shape:':<16}{json.dumps(value)} ({_whole(shards)})")
            if padded is not None:
                tile = spec.get("tile_shape")
                tiled = f", {spec.get('layout')} {'x'.join(map(str, tile))}" if tile else ""
                each = "each shard" if len(shards) > 1 else "the tensor"
                _echo(f"{'padded shape:':<16}{json.dumps(padded)} ({each}, padded on the device{tiled})")
            continue
        else:
            text = json.dumps(value, default=str)
        _echo(f"{key + ':':<16}{text}")


def _a_report(path: Path) -> str | None:
    """What ``path`` is when it is a report rather than a tensor file (a SQLite database, a folder holding a
    ``db.sqlite``), else None; only a regular file is opened."""
    if path.is_dir():
        return "a report folder" if (path / "db.sqlite").is_file() else None
    try:  # non-blocking, and fstat after the open: a FIFO swapped in after a check would block a plain open
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or a device
            return None
        head = os.read(fd, len(_SQLITE_MAGIC))
    except OSError:
        return None
    finally:
        os.close(fd)
    return "a SQLite database" if head == _SQLITE_MAGIC else None


#: The first bytes of every SQLite 3 database file.
_SQLITE_MAGIC = b"SQLite format 3\x00"


def _whole(shards: list[dict[str, object]]) -> str:
    """What the shape line's shape is of: the whole tensor, and the shards it is assembled from."""
    if len(shards) <= 1:
        return "the whole tensor"
    shapes = {json.dumps(s.get("shape")) for s in shards}
    of = f" of {shapes.pop()}" if len(shapes) == 1 else ""
    return f"the whole tensor, assembled from {len(shards)} shards{of}"


@cli.command()
@click.argument("file", type=click.Path(path_type=Path))
@click.option("-o", "--output", "out", type=click.Path(path_type=Path), required=True, help=".npy, .npz or .safetensors")
@_friendly
def convert(file: Path, out: Path) -> None:
    """Convert a legacy tensor file to .npy, .npz (one array per device shard) or .safetensors.

    .npy and .npz hold bfloat16 and float8 values widened to float32 (exactly: numpy cannot load those dtypes
    back from a .npy); the .npz's `dtype` entry names the stored dtype, so `arr.astype(ml_dtypes.bfloat16)`
    restores them. .safetensors keeps bfloat16 as BF16.
    """
    reportdb.convert_tensor_file(file, out)
    _echo(f"{file} -> {out}")
