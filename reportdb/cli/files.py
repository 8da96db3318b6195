"""Commands over one legacy tensor file: show, convert."""

from __future__ import annotations

import json
from pathlib import Path

import click

import reportdb
from reportdb.cli.common import (
    _echo,
    _emit,
    _friendly,
    cli,
)


@cli.command()
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@_friendly
def show(file: Path, as_json: bool) -> None:
    """A legacy tensor file's spec, statistics and a short value preview (.bin, .tensorbin, .pt).

    The shape is the whole tensor's (a multi-device file's shards assembled); the padded shape, where the file has
    one, is each shard's, as ttnn pads every device's shard to whole tiles: each line says which it is.
    """
    description = reportdb.describe_tensor_file(file)
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
    """Convert a legacy tensor file to .npy, .npz (one array per device shard) or .safetensors."""
    reportdb.convert_tensor_file(file, out)
    _echo(f"{file} -> {out}")
