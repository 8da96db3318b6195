"""The web page's element-wise errors (``reportdb.web.views.errors``) against their definitions written out plainly
in float64 numpy, on the pairs that take its long way: NaN and infinities on either side, values that overflow the
coarser dtype of a ULP count, mixed dtypes, integers, and float64 patterns."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from reportdb.web import views


def _ulp_reference(actual: np.ndarray, golden: np.ndarray, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """ULP distance by the definition (ordered integers of the rounded bit patterns) and where it is defined."""
    def ordered(x: np.ndarray) -> np.ndarray:
        bits = x.astype(dtype).view(f"<i{dtype.itemsize}").astype(object)
        sign_bit = 1 << (8 * dtype.itemsize - 1)
        return np.array([-(b + sign_bit) if b < 0 else b for b in bits.ravel()], dtype=object).reshape(x.shape)

    dist = np.abs(ordered(actual) - ordered(golden)).astype(np.float64)
    finite = np.isfinite(actual.astype(dtype).astype(np.float64)) & np.isfinite(golden.astype(dtype).astype(np.float64))
    return dist, finite


def _reference(actual: np.ndarray, golden: np.ndarray, kind: str, rtol: float, atol: float) -> np.ndarray:
    a, g = actual.astype(np.float64), golden.astype(np.float64)
    finite = np.isfinite(a) & np.isfinite(g)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(a - g)
        if kind == "rel":
            err = err / np.maximum(np.abs(g), views.REL_EPS)
        elif kind == "mask":
            err = (err > atol + rtol * np.abs(g)).astype(np.float64)
        elif kind == "ulp" and (dtype := views.ulp_dtype(actual.dtype, golden.dtype)) is not None:
            err, rounded_finite = _ulp_reference(actual, golden, dtype)
            finite &= rounded_finite
        same = (np.isnan(a) & np.isnan(g)) | ((a == g) & ~finite)
    return np.where(finite, err, np.where(same, 0.0, 1.0 if kind == "mask" else math.inf))


def _pair(dtype_a: object, dtype_b: object, special: bool) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    golden = rng.standard_normal((6, 50)) * 3
    actual = golden + rng.standard_normal(golden.shape) * 0.01
    actual[0, :4] = -0.0
    golden[0, :2] = 0.0
    if special:
        actual[1, :6] = [np.nan, np.inf, -np.inf, np.nan, 1.0, np.inf]
        golden[1, :6] = [np.nan, np.inf, np.inf, 2.0, np.nan, 1.0]
        actual[2, :3] = [70000.0, -1e39, 3.4e38]  # beyond float16's range; beyond float32's; bfloat16 rounds it up
        golden[2, :3] = [60000.0, 1.0, 3.4e38]
    return actual.astype(dtype_a), golden.astype(dtype_b)


DTYPE_PAIRS = [
    (np.float32, np.float32), (np.float32, np.float16), (ml_dtypes.bfloat16, np.float32),
    (np.float64, np.float64), (np.float32, ml_dtypes.float8_e4m3fn), (np.int32, np.int32), (np.int32, np.float32),
]


CASES = [(dtypes, special) for dtypes in DTYPE_PAIRS for special in (False, True)
         if not (special and np.dtype(dtypes[0]).kind == "i")]  # integers hold no NaN or infinity


@pytest.mark.parametrize("kind", views.ERROR_KINDS)
@pytest.mark.parametrize(("dtypes", "special"), CASES,
                         ids=[f"{np.dtype(a).name}-{np.dtype(b).name}-{'nonfinite' if s else 'finite'}" for (a, b), s in CASES])
def test_errors_equal_their_definition(kind: str, special: bool, dtypes: tuple[object, object]) -> None:
    with np.errstate(invalid="ignore", over="ignore"):
        actual, golden = _pair(*dtypes, special)
    got = views.errors(actual, golden, kind, rtol=1e-3, atol=1e-4)
    assert got.dtype == np.float64 and got.shape == actual.shape
    np.testing.assert_array_equal(got, _reference(actual, golden, kind, 1e-3, 1e-4))
