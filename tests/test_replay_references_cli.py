"""``reportdb replay --references``: the operations replay has a reference for, listed without a report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reportdb.analysis import references

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "reportdb", "replay", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_catalogue_lists_every_reference_with_its_family_and_arguments() -> None:
    entries = {e["name"]: e for e in references.catalogue()}
    assert sorted(entries) == references.names()
    linear = entries["ttnn.linear"]
    assert linear["family"] == "matmul"
    params = {p["name"]: p for p in linear["parameters"]}
    assert params["input_tensor_a"]["required"] and params["input_tensor_a"]["kind"] == "tensor"
    assert params["bias"]["required"] is False
    assert "memory_config" in linear["ignored"] and "memory_config" not in params
    assert entries["ttnn.permute"]["family"] == "data_movement" and "pad_value" in entries["ttnn.permute"]["ignored"]
    assert entries["ttnn.rms_norm_pre_all_gather"]["defined"] == "[..., ::32]" and linear["defined"] is None


@pytest.mark.process
def test_cli_lists_references_as_text_and_json_without_a_report() -> None:
    text = _cli("--references")
    assert text.returncode == 0, text.stderr
    assert any(line.startswith("ttnn.softmax  [normalization]") for line in text.stdout.splitlines())
    assert f"{len(references.names())} operations" in text.stdout
    assert "    compared only where defined: output[..., ::32]" in text.stdout
    data = json.loads(_cli("--references", "--json").stdout)
    assert data == json.loads(json.dumps(references.catalogue()))
    usage = _cli()
    assert usage.returncode == 2 and "--references" in usage.stderr
