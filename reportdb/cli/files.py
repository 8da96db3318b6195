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
