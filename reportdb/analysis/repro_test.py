"""The test a ``reportdb repro`` folder carries (copied there as ``test_repro.py``): it needs numpy, ml_dtypes and
pytest, and the copy of ``reportdb.analysis.references`` beside it, never reportdb itself.

It recomputes the operation's reference from the stored inputs, checks that it equals the reference reportdb
computed, and judges the device output against it by the criteria in ``repro.json`` exactly as reportdb's tolerance
policy does: it fails exactly when the operation fails its policy. Where ttnn is importable and a Tenstorrent device
is present, it also runs the operation itself on the stored inputs and judges that output the same way; elsewhere
that test is skipped and says why (``pytest.ini`` here prints skip reasons).
"""

from __future__ import annotations

import functools
import json
import math
import os
import pathlib
import sys

import ml_dtypes
import numpy as np
import pytest

HERE = pathlib.Path(__file__).resolve().parent
META = json.loads((HERE / "repro.json").read_text())


def load(entry: dict) -> np.ndarray:
    """One stored array with its dtype: bfloat16 and float8 values are saved as their bytes and viewed back."""
    array = np.load(HERE / entry["file"])
    return array.view(getattr(ml_dtypes, entry["dtype"])) if array.dtype.kind == "V" else array


def _references():  # type: ignore[no-untyped-def]
    """The copy of reportdb's references package beside this file."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    import references  # type: ignore[import-not-found]

    return references


def output_index() -> int:
    """Which output of the operation this folder holds (``repro.json``'s ``output_index``: 0 or more)."""
    index = META.get("output_index", 0)
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise ValueError(f"repro.json: output_index must be an integer 0 or more, not {index!r}")
    return index


def reference() -> np.ndarray:
    """The reference output recomputed from the inputs and the recorded arguments, within the elements the stored
    arrays justify (as reportdb's replay bounds it: a reference never builds what they do not)."""
    references = _references()

    inputs = [(entry["tensor_id"], load(entry)) for entry in META["inputs"]]
    arguments = [references.Argument(name, text) for name, text in META["arguments"]]
    stored = [array.size for _, array in inputs] + [math.prod(META["device_output"]["shape"])]
    with np.errstate(all="ignore"):
        dtypes = {entry["tensor_id"]: entry["ttnn_dtype"] for entry in META["inputs"]}
        outputs = references.compute_outputs(META["operation"], inputs, arguments, dtypes,
                                             max_elements=references.justified_elements(stored))
    index = output_index()
    if index >= len(outputs):
        raise ValueError(f"repro.json: output {index} asked for, and the reference gives {len(outputs)}")
    return outputs[index]


def defined(output: np.ndarray) -> np.ndarray:
    """The elements of an output the operation defines (all, for most; the statistics' columns of a pre-all-gather
    norm), which alone are judged."""
    return _references().defined_part(META["operation"], output)


def ordered(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Float values rounded to ``dtype`` as integers in the same order (-0 and +0 equal): ULP distances."""
    bits = x.astype(dtype).view({2: np.int16, 4: np.int32, 8: np.int64}[dtype.itemsize]).astype(np.int64)
    top = np.int64(1) << (8 * dtype.itemsize - 1)
    return np.where(bits < 0, -(bits + top), bits)


def ulp_dtype(a: np.dtype, b: np.dtype) -> np.dtype | None:
    """The coarser float dtype of the two (fewer significand bits); None when neither is a float."""
    floats = [d for d in (a, b) if d.kind == "f" or d.name in ("bfloat16", "float16") or d.name.startswith("float8")]
    return min(floats, key=lambda d: (ml_dtypes.finfo(d).nmant, d.itemsize)) if floats else None


def measures(device: np.ndarray, expected: np.ndarray, rtol: float, atol: float, pcc_threshold: float = 0.99) -> dict:
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
    fit_error = pcc is not None and pcc >= pcc_threshold and pcc > 0 and scale_or_offset(fa, fb, pcc, atol)
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
        "scale_or_offset_error": fit_error, "tile_sqnr_db": tile_sqnr(a, b, finite),
        "bitwise_equal": device.dtype == expected.dtype
        and np.ascontiguousarray(device).tobytes() == np.ascontiguousarray(expected).tobytes(),
    }


#: reportdb's fit tolerance, tile floor, tile shape and smallest tile (numeric/metrics.py, numeric/tiles.py) and the
#: LoFi allowance of the linear fit (numeric/fit.py): the same numbers, so this file judges as reportdb does.
FIT_TOL, TILE_FLOOR, TILE, MIN_TILE_VALUES = 0.02, 0.1, (32, 32), 256
LOFI_SHRINK = 1.0 - ((2.0**-4 - 2.0**-7) / 2 + (2.0**-6 - 2.0**-7) / 2) / math.log(2)


def pcc_threshold(criteria: dict) -> float:
    """The PCC the comparison's fit check is made at: the criteria's, else 0.99 (Policy.pcc_threshold)."""
    return 0.99 if criteria.get("pcc") is None else float(criteria["pcc"])


def scale_or_offset(fa: np.ndarray, fb: np.ndarray, pcc: float, atol: float) -> bool:
    """Whether the fitted line ``b ~ k a + c`` (reduced major axis) is not the identity beyond the fit's tolerance,
    a shrink within LoFi truncation aside (numeric/fit.py)."""
    da, db = fa - fa.mean(), fb - fb.mean()
    k = math.copysign(math.sqrt(float(np.dot(db, db)) / float(np.dot(da, da))), float(np.dot(da, db)))
    c = float(fb.mean()) - k * float(fa.mean())
    allowed = FIT_TOL + (1.0 / pcc - 1.0)
    spread = max(math.sqrt(float(np.dot(fa, fa)) / fa.size), math.sqrt(float(np.dot(fb, fb)) / fb.size))
    offset_error = abs(c) > allowed * spread + atol
    if abs(k - 1.0) <= allowed and not offset_error:
        return False
    shrink = k > 1.0 and 1.0 / k >= LOFI_SHRINK * (2.0 - 1.0 / pcc)
    return not (shrink and not offset_error)


def tile_sqnr(a: np.ndarray, b: np.ndarray, finite: np.ndarray) -> float | None:
    """The worst tile's SQNR (numeric/tiles.py): tiles of the last two dims, or runs of a tile's worth of values where
    tiles would hold fewer than MIN_TILE_VALUES on average, each tile's golden energy floored at TILE_FLOOR of its share
    of the tensor's; None when no tile has an error or the golden is zero."""
    th, tw = TILE
    shape = a.shape
    lead = math.prod(shape[:-2]) if len(shape) >= 2 else 1
    height, width = (shape[-2], shape[-1]) if len(shape) >= 2 else (1, shape[0] if shape else 1)
    if a.size and lead * -(-height // th) * -(-width // tw) * MIN_TILE_VALUES > a.size:
        lead, height, width, th, tw = 1, 1, a.size, 1, th * tw
    rows, cols = -(-height // th), -(-width // tw)

    def per_tile(values: np.ndarray) -> np.ndarray:
        grid = np.zeros((lead, rows * th, cols * tw))
        grid[:, :height, :width] = values.reshape(lead, height, width)
        return grid.reshape(lead, rows, th, cols, tw).sum(axis=(2, 4)).reshape(-1)

    error = per_tile(np.where(finite, a - b, 0.0) ** 2)
    golden = per_tile(np.where(finite, b, 0.0) ** 2)
    count = per_tile(finite.astype(np.float64))
    total, n = float(golden.sum()), float(count.sum())
    if not n or not error.size or not error.max() > 0 or total <= 0:
        return None
    reference = np.maximum(golden, count * (TILE_FLOOR * total / n))
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(error > 0, reference / np.where(error > 0, error, 1.0), np.inf)
    return 10 * math.log10(float(ratio.min()))


def failed_criteria(m: dict, c: dict) -> list[str]:
    """The criteria ``m`` fails, as reportdb's Policy.judge decides them."""
    failed = ["nonfinite"] if m["nonfinite"] else []
    if c.get("pcc") is not None:
        if not (m["pcc"] >= c["pcc"] if m["pcc"] is not None else not m["allclose_mismatches"]):
            failed.append("pcc")
        elif m["scale_or_offset_error"]:
            failed.append("scale_or_offset")
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
    if c.get("tile_sqnr_db") is not None and m["count"]:
        if not (not m["max_abs_error"] if m["tile_sqnr_db"] is None else m["tile_sqnr_db"] >= c["tile_sqnr_db"]):
            failed.append("tile_sqnr_db")
    if c.get("bitwise") and not m["bitwise_equal"]:  # the same dtype and bytes: NaN payloads and -0.0 count
        failed.append("bitwise")
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
    device, expected = defined(device), defined(expected)
    m = measures(device, expected, policy["rtol"], policy["atol"], pcc_threshold(policy["criteria"]))
    failed = failed_criteria(m, policy["criteria"])
    assert not failed, f"{META['operation']} fails {failed} under {policy['criteria']}: {m}"


def why_no_device() -> str | None:
    """Why the operation cannot run here (ttnn not importable, no Tenstorrent device), or None when it can."""
    try:
        import ttnn  # noqa: F401
    except Exception as exc:  # ImportError, or a wheel that cannot load here
        return f"ttnn is not importable here ({type(exc).__name__}: {str(exc)[:200]})"
    devices = "/dev/tenstorrent"
    if not os.path.isdir(devices) or not os.listdir(devices):
        return f"no Tenstorrent device here ({devices} is absent or empty)"
    return None


def run_on_device() -> np.ndarray:
    """The operation itself run on a device from the stored inputs (in the dtype and layout they had there), called
    with the recorded arguments the reference reads, as keywords named as ttnn names them."""
    import ttnn

    references = _references()
    ref = references.lookup(META["operation"])
    inputs = [(entry["tensor_id"], load(entry)) for entry in META["inputs"]]
    arguments = [references.Argument(name, text) for name, text in META["arguments"]]
    values = references.bind(ref, inputs, arguments)
    recorded = {p.name for p in (ref.param(a) for a in arguments) if p is not None and p.kind not in ("ignored", "output")}
    device = ttnn.open_device(device_id=0)
    try:
        by_array = {id(array): entry for (_, array), entry in zip(inputs, META["inputs"])}

        def to_device(array: np.ndarray):  # type: ignore[no-untyped-def]
            entry = by_array[id(array)]
            dtype = getattr(ttnn, (entry["ttnn_dtype"] or entry["dtype"]).rsplit(".", 1)[-1].lower())
            layout = ttnn.ROW_MAJOR_LAYOUT if "ROW_MAJOR" in str(entry.get("layout")) else ttnn.TILE_LAYOUT
            host = np.asarray(array, dtype=np.float32) if array.dtype.kind not in "iu" else array
            return ttnn.to_device(ttnn.Tensor(host, data_type=dtype, layout=layout), device)

        kwargs = {}
        for p in ref.params:
            value = values.get(p.name)
            if p.kind in ("tensor", "tensors") and value is not None:
                kwargs[p.name] = [to_device(v) for v in value] if p.kind == "tensors" else to_device(value)
            elif p.name in recorded and value is not None:
                kwargs[p.name] = getattr(ttnn, value) if p.kind == "dtype" else value
        operation = functools.reduce(getattr, META["operation"].split(".")[1:], ttnn)
        output = operation(**kwargs)
        output = output[output_index()] if isinstance(output, (list, tuple)) else output
        return np.asarray(ttnn.from_device(output).to_numpy())
    finally:
        ttnn.close_device(device)


def test_the_operation_run_here_passes_its_policy() -> None:
    """With ttnn and a device here: the operation run again on the stored inputs, judged like the stored output."""
    reason = why_no_device()
    if reason is not None:
        pytest.skip(reason)
    ran, expected = run_on_device(), reference()
    policy = META["policy"]
    assert ran.shape == expected.shape, f"shape {ran.shape} != reference {expected.shape}"
    ran, expected = defined(ran), defined(expected)
    m = measures(ran, expected, policy["rtol"], policy["atol"], pcc_threshold(policy["criteria"]))
    failed = failed_criteria(m, policy["criteria"])
    assert not failed, f"{META['operation']} run here fails {failed} under {policy['criteria']}: {m}"
