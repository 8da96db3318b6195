"""Calibration of verdicts: every planted fault (``tests/faults.py``) must fail and every device-like result
(``reportdb.numeric.fidelity``: math fidelity, tile-ordered accumulation, bfloat16 and block-float packing) must pass,
for each op family and size; printed as a markdown table with each one's margin.

Run: ``python benchmarks/bench_calibration.py [--sizes small,medium,large,xl,huge] [--families matmul,eltwise,...]``.
Each row is one (family, case, size): the device-like result's worst-tile SQNR (``tile``), whole-tensor SQNR and
fitted scale, and for each fault its worst-tile SQNR; the verdict is the default policy's,
``Policy.default().judge(compare(device, golden, rtol/atol at policy.tolerances(op, dtype)), op, dtype)``.
A fault's margin is how far its statistic lies past its dtype's ``tile_sqnr_db`` threshold (positive: detected with
room), a correct result's how far above it (positive: passes with room). ``--scale`` measures instead the scale
shrink each fidelity causes in matmuls of K = 32..8192 and the fitted scale of real scale bugs.
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from reportdb.analysis.policy import Policy
from reportdb.numeric import fidelity
from reportdb.numeric.metrics import compare

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
faults = importlib.import_module("faults")  # the fault injectors and device-like cases, shared with the tests

#: Output shapes by size name: one tile, the issue's silu output, 1M, 16M and 64M elements.
SIZES: dict[str, tuple[int, ...]] = {
    "small": (32, 32),
    "medium": (1, 256, 2816),
    "large": (1024, 1024),
    "xl": (4096, 4096),
    "huge": (8, 8192, 1024),
}
#: The families run at each size (the largest only where a model's op is cheap to model).
AT_SIZE: dict[str, tuple[str, ...]] = {
    "small": ("matmul", "eltwise", "reduction", "normalization", "data movement", "typecast"),
    "medium": ("matmul", "eltwise", "reduction", "normalization", "data movement", "typecast"),
    "large": ("matmul", "eltwise", "reduction", "normalization", "data movement", "typecast"),
    "xl": ("eltwise", "data movement", "typecast"),
    "huge": ("eltwise", "data movement"),
}
#: Labels run at the xl and huge sizes (one or two per family, to bound the run).
BIG_LABELS = ("add", "silu", "transpose", "FLOAT32 -> BFLOAT16")


def judged(case: faults.Case, actual: np.ndarray, policy: Policy) -> dict[str, Any]:
    """The comparison of ``actual`` with the case's golden under ``policy``: its verdict and the statistics."""
    rtol, atol = policy.tolerances(case.op, case.dtype)
    m = compare(actual, case.golden, rtol=rtol, atol=atol, pcc=policy.pcc_threshold(case.op, case.dtype))
    verdict = policy.judge(m, op=case.op, dtype=case.dtype)
    threshold = verdict.criteria.tile_sqnr_db
    tile = m.tile_sqnr_db
    return {
        "passed": verdict.passed,
        "failed": verdict.failed,
        "tile": math.inf if tile is None else tile,
        "threshold": threshold,
        "sqnr": math.inf if m.sqnr_db is None else m.sqnr_db,
        "scale": m.fit_scale,
        "worst": m.worst_tile,
        "notes": verdict.notes,
    }


def margin(stat: dict[str, Any], fault: bool) -> float | None:
    """dB between the worst-tile SQNR and its threshold, positive on the right side (None without a threshold)."""
    if stat["threshold"] is None:
        return None
    gap = stat["tile"] - stat["threshold"]
    return -gap if fault else gap


def run_case(case: faults.Case, policy: Policy) -> dict[str, Any]:
    """The device-like result's statistics and, for each fault that fits the tensor, the faulted one's."""
    row: dict[str, Any] = {"case": case, "device": judged(case, case.device, policy), "faults": {}}
    for name, plant in faults.FAULTS.items():
        wrong = plant(case.device, case.stale)
        if wrong is not None:
            row["faults"][name] = judged(case, wrong, policy)
    return row


def fmt(value: float | None) -> str:
    """A dB figure for the table."""
    if value is None:
        return "-"
    return "inf" if math.isinf(value) else f"{value:.1f}"


def table(rows: list[dict[str, Any]]) -> str:
    """The markdown table: one line per (case, size), each fault's worst-tile SQNR marked ``!`` where it passed."""
    names = list(faults.FAULTS)
    head = "| family | case | shape | dtype | thr | device tile | SQNR | scale | " + " | ".join(names) + " |"
    lines = [head, "|" + "---|" * (8 + len(names))]
    for row in rows:
        case, dev = row["case"], row["device"]
        cells = []
        for name in names:
            stat = row["faults"].get(name)
            cells.append("n/a" if stat is None else fmt(stat["tile"]) + ("" if not stat["passed"] else " !"))
        lines.append(
            f"| {case.family} | {case.label} | {'x'.join(map(str, case.golden.shape))} | {case.dtype} | "
            f"{fmt(dev['threshold'])} | {fmt(dev['tile'])}{'' if dev['passed'] else ' FAIL'} | {fmt(dev['sqnr'])} | "
            f"{'-' if dev['scale'] is None else format(dev['scale'], '.4f')} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines)


def summary(rows: list[dict[str, Any]]) -> str:
    """Faults detected x/y, false failures, and the smallest margin on each side (with where)."""
    detected = expected = false = 0
    worst_fault: tuple[float, str] = (math.inf, "")
    worst_pass: tuple[float, str] = (math.inf, "")
    for row in rows:
        case, dev = row["case"], row["device"]
        where = f"{case.family} / {case.label} / {'x'.join(map(str, case.golden.shape))}"
        false += not dev["passed"]
        m = margin(dev, fault=False)
        if m is not None and m < worst_pass[0]:
            worst_pass = (m, f"{where} ({dev['failed'] or 'passed'})")
        for name, stat in row["faults"].items():
            if not faults.expected_to_show(name, case.dtype):
                continue
            expected += 1
            detected += not stat["passed"]
            m = margin(stat, fault=True)
            if m is not None and m < worst_fault[0]:
                worst_fault = (m, f"{name} in {where} ({stat['failed'] or 'passed'})")
    return (
        f"faults detected {detected}/{expected}; false failures {false}/{len(rows)}; smallest fault margin "
        f"{worst_fault[0]:.1f} dB ({worst_fault[1]}); smallest pass margin {worst_pass[0]:.1f} dB ({worst_pass[1]})"
    )


def calibration(sizes: list[str], families: set[str] | None) -> list[dict[str, Any]]:
    """Every row of the table for these sizes and families, printed as it is measured."""
    policy = Policy.default()
    rows = []
    for size in sizes:
        for seed, (family, label, op, dtype, build) in enumerate(faults.families()):
            if family not in AT_SIZE[size] or (families and family not in families):
                continue
            if size in ("xl", "huge") and label not in BIG_LABELS:
                continue
            start = time.perf_counter()
            row = run_case(faults.make_case(family, label, op, dtype, build, SIZES[size], 2 * seed), policy)
            rows.append(row)
            print(f"{size} {family} / {label}: {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    return rows


def scale_shrink(ks: list[int]) -> str:
    """The fitted scale (and mean |device| / |golden|) of correct matmuls at each fidelity and operand dtype, and of
    real scale bugs, as a markdown table."""
    lines = ["| case | K | fit_scale | mean abs ratio | SQNR | default verdict |", "|---|---|---|---|---|---|"]
    policy = Policy.default()

    def add(label: str, k: int, device: np.ndarray, golden: np.ndarray) -> None:
        rtol, atol = policy.tolerances("ttnn.matmul", "BFLOAT16")
        m = compare(device, golden, rtol=rtol, atol=atol, pcc=policy.pcc_threshold("ttnn.matmul", "BFLOAT16"))
        verdict = policy.judge(m, op="ttnn.matmul", dtype="BFLOAT16")
        said = "passed" if verdict.passed else "failed " + ", ".join(verdict.failed)
        ratio = float(np.abs(device).mean() / np.abs(golden).mean())
        lines.append(f"| {label} | {k} | {m.fit_scale:.4f} | {ratio:.4f} | {fmt(m.sqnr_db)} | {said} |")

    for k in ks:
        for operands in ("BFLOAT16", "BFLOAT8_B", "BFLOAT4_B"):
            for fid in fidelity.FIDELITY_PHASES:
                build = faults.matmul_builder(k, operands, fid, "FLOAT32")
                golden, device = build((256, 256), np.random.default_rng(k))
                add(f"{operands} {fid}", k, device, golden)
    golden, device = faults.matmul_builder(1024, "BFLOAT16", "HiFi4", "FLOAT32")((256, 256), np.random.default_rng(1))
    bugs = (("x0.5", 0.5), ("x1/sqrt(2)", 1 / math.sqrt(2)), ("x0.95", 0.95), ("x0.98", 0.98), ("x1.02", 1.02),
            ("x1.1", 1.1))
    for label, factor in ((f"bug {name}", f) for name, f in bugs):
        add(label, 1024, fidelity.to_bfloat16(device * np.float32(factor)), golden)
    add("bug: attention scores missing 1/sqrt(64)", 64, *_attention_without_scale())
    return "\n".join(lines)


def _attention_without_scale() -> tuple[np.ndarray, np.ndarray]:
    """Softmax(q k^T / sqrt(d)) (golden) against softmax(q k^T) (a kernel that forgot the 1/sqrt(d)), d = 64."""
    rng = np.random.default_rng(7)
    q, k = rng.standard_normal((2, 256, 64)) * 0.5
    scores = q @ k.T

    def softmax(x: np.ndarray) -> np.ndarray:
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    return fidelity.to_bfloat16(softmax(scores)), softmax(scores / 8.0).astype(np.float32)


def main() -> None:
    """Run the calibration table (or the scale measurements) and print it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="small,medium", help=f"comma-separated, of {', '.join(SIZES)}")
    parser.add_argument("--families", default="", help="comma-separated family names (default: all)")
    parser.add_argument("--scale", action="store_true", help="measure fidelity's scale shrink and real scale bugs")
    parser.add_argument("--ks", default="32,128,512,2048,8192", help="the K of --scale's matmuls, comma-separated")
    args = parser.parse_args()
    start = time.perf_counter()
    if args.scale:
        print(scale_shrink([int(k) for k in args.ks.split(",")]))
    else:
        rows = calibration(args.sizes.split(","), set(filter(None, args.families.split(","))) or None)
        print(table(rows))
        print()
        print(summary(rows))
    print(f"\n({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
