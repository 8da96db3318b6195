"""Shared test fixtures: where the real ttnn/torch files live, and helpers to compare values."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT.parent / "shared" / "fixtures"


def manifest(folder: str) -> list[dict[str, Any]]:
    """The entries of ``FIXTURES/folder/manifest.json`` (one per file)."""
    data = json.loads((FIXTURES / folder / "manifest.json").read_text())
    return data["files"] if isinstance(data, dict) else data


def assert_values_equal(actual: np.ndarray, expected: np.ndarray) -> None:
    """Values cast to the expected dtype equal element for element (NaN equal to NaN), shapes equal."""
    actual = np.asarray(actual)
    assert tuple(actual.shape) == tuple(expected.shape), (actual.shape, expected.shape)
    cast = actual.astype(expected.dtype)
    if expected.dtype.kind == "f":
        np.testing.assert_array_equal(cast, expected)  # treats NaN == NaN
    else:
        assert np.array_equal(cast, expected)


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.fail(f"real fixtures not found at {FIXTURES}: shared/ must sit beside the checkout")
    return FIXTURES
