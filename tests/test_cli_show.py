"""``reportdb show`` labels what each shape is: the whole tensor's (a multi-device file's shards assembled) and each
shard's padded shape, never the two side by side unlabelled."""

from __future__ import annotations

from click.testing import CliRunner

from conftest import FIXTURES
from reportdb.cli import cli

TENSORS = FIXTURES / "ttnn-0.64.5-report-tensorbin" / "report" / "tensors"


def _lines(name: str) -> dict[str, str]:
    result = CliRunner().invoke(cli, ["show", str(TENSORS / name)])
    assert result.exit_code == 0, result.output
    return {line.split(":", 1)[0]: line.split(":", 1)[1].strip() for line in result.output.splitlines()}


def test_a_multi_device_file_shows_the_whole_shape_and_each_shards_padded_shape() -> None:
    lines = _lines("17.tensorbin")  # 2 devices (mesh 1x2), each shard [1, 32, 11] padded to [1, 32, 32]
    assert lines["shape"] == "[2, 32, 11] (the whole tensor, assembled from 2 shards of [1, 32, 11])"
    assert lines["padded shape"] == "[1, 32, 32] (each shard, padded on the device, TILE 32x32)"
    assert "logical_shape" not in lines["spec"] and "padded_shape" not in lines["spec"]


def test_a_single_device_file_shows_its_padding() -> None:
    lines = _lines("9.tensorbin")
    assert lines["shape"] == "[1, 1, 32, 77] (the whole tensor)"
    assert lines["padded shape"] == "[1, 1, 32, 96] (the tensor, padded on the device, TILE 32x32)"
