"""The test a ``reportdb repro`` folder carries (copied there as ``test_repro.py``): it needs numpy, ml_dtypes and
pytest, and the copy of ``reportdb.analysis.references`` beside it, never reportdb itself.

It recomputes the operation's reference from the stored inputs, checks that it equals the reference reportdb
computed, and judges the device output against it by the criteria in ``repro.json`` exactly as reportdb's tolerance
policy does: it fails exactly when the operation fails its policy.
"""

from __future__ import annotations

import json
import math
import pathlib
import sys

import ml_dtypes
import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
META = json.loads((HERE / "repro.json").read_text())


def load(entry: dict) -> np.ndarray:
    """One stored array with its dtype: bfloat16 and float8 values are saved as their bytes and viewed back."""
    array = np.load(HERE / entry["file"])
    return array.view(getattr(ml_dtypes, entry["dtype"])) if array.dtype.kind == "V" else array


def reference() -> np.ndarray:
    """The reference output recomputed from the inputs and the recorded arguments."""
    sys.path.insert(0, str(HERE))
    import references  # type: ignore[import-not-found]  # the copy beside this file

    inputs = [(entry["tensor_id"], load(entry)) for entry in META["inputs"]]
    arguments = [references.Argument(name, text) for name, text in META["arguments"]]
    with np.errstate(all="ignore"):
        dtypes = {entry["tensor_id"]: entry["ttnn_dtype"] for entry in META["inputs"]}
        return references.compute(META["operation"], inputs, arguments, dtypes)


def ordered(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Float values rounded to ``dtype`` as integers in the same order (-0 and +0 equal): ULP distances."""
    bits = x.astype(dtype).view({2: np.int16, 4: np.int32, 8: np.int64}[dtype.itemsize]).astype(np.int64)
    top = np.int64(1) << (8 * dtype.itemsize - 1)
    return np.where(bits < 0, -(bits + top), bits)


def ulp_dtype(a: np.dtype, b: np.dtype) -> np.dtype | None:
    """The coarser float dtype of the two (fewer significand bits); None when neither is a float."""
    floats = [d for d in (a, b) if d.kind == "f" or d.name in ("bfloat16", "float16") or d.name.startswith("float8")]
    return min(floats, key=lambda d: (ml_dtypes.finfo(d).nmant, d.itemsize)) if floats else None


def measures(device: np.ndarray, expected: np.ndarray, rtol: float, atol: float) -> dict:
    """The figures the policy's criteria read, defined as reportdb.compare defines them."""
    a, b = device.astype(np.float64), expected.astype(np.float64)
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    finite = np.isfinite(a) & np.isfinite(b)
    same_inf = np.isinf(a) & (a == b)
    nonfinite = bool(np.any(nan_a != nan_b) or np.any((np.isinf(a) | np.isinf(b)) & ~same_inf & ~(nan_a & nan_b)))
    fa, fb = a[finite], b[finite]
    close = np.abs(a - b) <= atol + rtol * np.abs(b)
    matched = close & finite | (nan_a & nan_b) | same_inf
    error = np.abs(fa - fb)
    pcc = None
    if fa.size >= 2 and np.ptp(fa) > 0 and np.ptp(fb) > 0:
        da, db = fa - fa.mean(), fb - fb.mean()
        pcc = max(-1.0, min(1.0, float(np.dot(da, db) / math.sqrt(float(np.dot(da, da)) * float(np.dot(db, db))))))
    energy, noise = float(np.dot(fb, fb)), float(np.dot(error, error))
    unit = ulp_dtype(device.dtype, expected.dtype)
    if unit is None:
        ulps = error
    else:
        ua, ub = device.astype(unit), expected.astype(unit)
        keep = np.isfinite(ua.astype(np.float64)) & np.isfinite(ub.astype(np.float64))
        ulps = np.abs(ordered(ua[keep], unit) - ordered(ub[keep], unit))
    return {
        "count": int(a.size), "pcc": pcc, "max_abs_error": float(error.max()) if error.size else None,
        "allclose_mismatches": int(a.size - np.count_nonzero(matched)), "nonfinite": nonfinite,
        "ulp_max": int(ulps.max()) if ulps.size else None,
        "sqnr_db": 10 * math.log10(energy / noise) if energy > 0 and noise > 0 else None,
    }


def failed_criteria(m: dict, c: dict) -> list[str]:
    """The criteria ``m`` fails, as reportdb's Policy.judge decides them."""
    failed = ["nonfinite"] if m["nonfinite"] else []
    if c.get("pcc") is not None and not (m["pcc"] >= c["pcc"] if m["pcc"] is not None else not m["allclose_mismatches"]):
        failed.append("pcc")
    if any(c.get(k) is not None for k in ("rtol", "atol", "max_mismatch_fraction")):
        if m["allclose_mismatches"] > (c.get("max_mismatch_fraction") or 0.0) * m["count"]:
            failed.append("max_mismatch_fraction" if c.get("max_mismatch_fraction") else "rtol/atol")
    if c.get("max_abs_error") is not None and (m["max_abs_error"] or 0.0) > c["max_abs_error"]:
        failed.append("max_abs_error")
    if c.get("max_ulp") is not None and (m["ulp_max"] or 0) > c["max_ulp"]:
        failed.append("max_ulp")
    if c.get("sqnr_db") is not None and m["count"]:
        if not (not m["max_abs_error"] if m["sqnr_db"] is None else m["sqnr_db"] >= c["sqnr_db"]):
            failed.append("sqnr_db")
    return failed


def test_reference_is_reproduced() -> None:
    """This folder's code gives the reference reportdb stored (else the verdict below would judge something else)."""
    ours, stored = reference(), load(META["reference_output"])
    assert ours.shape == stored.shape and np.array_equal(ours, stored, equal_nan=True)


def test_device_output_passes_its_policy() -> None:
    """The device output against the reference, under the policy's criteria for this operation and dtype."""
    device, expected = load(META["device_output"]), reference()
    policy = META["policy"]
    assert device.shape == expected.shape, f"shape {device.shape} != reference {expected.shape}"
    m = measures(device, expected, policy["rtol"], policy["atol"])
    failed = failed_criteria(m, policy["criteria"])
    assert not failed, f"{META['operation']} fails {failed} under {policy['criteria']}: {m}"
