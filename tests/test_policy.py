"""The tolerance policy: dtype-aware defaults, TOML rules matched in order, verdicts naming the failed criterion,
and bad policy files refused with the file and line; the metric vector's sqnr_db and error quantiles against numpy."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import reportdb
from reportdb.analysis.policy import Criteria, Policy, PolicyError, Verdict, dtype_defaults
from reportdb.numeric.streamed import compare_streamed

BF16 = ml_dtypes.bfloat16


def _judge(policy: Policy, a: np.ndarray, b: np.ndarray, *, op: str | None, dtype: str) -> Verdict:
    rtol, atol = policy.tolerances(op, dtype)
    return policy.judge(reportdb.compare(a, b, rtol=rtol, atol=atol), op=op, dtype=dtype)


def test_defaults_depend_on_the_dtype() -> None:
    f32, (f32_rtol, f32_atol) = dtype_defaults("float32")
    bf16, (bf16_rtol, _) = dtype_defaults("DataType.BFLOAT16")
    bfp8, _ = dtype_defaults("BFLOAT8_B")
    bfp4, _ = dtype_defaults("BFLOAT4_B")
    ints, tolerances = dtype_defaults("int32")
    assert (f32_rtol, f32_atol) == (1e-5, 2.0**-23)
    assert bf16_rtol == 2 * 2.0**-7  # not float32's 1e-5
    assert f32.pcc == bf16.pcc == bfp8.pcc == 0.99 and bfp4.pcc == 0.97
    assert f32.sqnr_db == 30.0 and bf16.sqnr_db == pytest.approx(22.93) and bfp8.sqnr_db == pytest.approx(8.91)
    assert bfp4.sqnr_db is None
    assert ints == Criteria(rtol=0.0, atol=0.0, max_mismatch_fraction=0.0) and tolerances == (0.0, 0.0)
    assert Policy.default().criteria_for("ttnn.matmul", "bfloat16") == bf16


def test_bfloat16_rounding_passes_and_a_flipped_block_fails_beyond_pcc() -> None:
    rng = np.random.default_rng(1)
    golden = rng.standard_normal((256, 256)).astype(np.float32)
    rounded = golden.astype(BF16)
    policy = Policy.default()
    assert _judge(policy, rounded, golden.astype(BF16), op="ttnn.add", dtype="BFLOAT16").passed
    one_ulp = np.nextafter(rounded, np.array(np.inf, BF16))
    assert _judge(policy, one_ulp, rounded, op="ttnn.add", dtype="BFLOAT16").passed
    flipped = rounded.copy()
    flipped[:64, :32] *= -1  # 1/32 of the tensor: PCC ~0.94 is below 0.99
    verdict = _judge(policy, flipped, rounded, op="ttnn.add", dtype="BFLOAT16")
    assert not verdict.passed and verdict.failed == ("pcc", "sqnr_db", "tile_sqnr_db")
    small = rounded.copy()
    small[:16, :32] *= -1  # 1/128: PCC 0.984 fails, SQNR 15 dB fails too
    mild = rounded.copy()
    mild[:8, :16] *= -1  # 1/512: PCC 0.996 passes, SQNR 21 dB does not, nor its tile's (0 dB)
    verdict = _judge(policy, mild, rounded, op="ttnn.add", dtype="BFLOAT16")
    assert reportdb.compare(mild, rounded).passed and verdict.failed == ("sqnr_db", "tile_sqnr_db")
    assert verdict.worst_tile == (0, 0, 0)


def test_nan_on_one_side_and_shape_change_fail_whatever_the_rule(tmp_path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('[[rules]]\nop = "*"\npcc = -1\n')
    policy = Policy.load(path)
    a = np.linspace(0, 1, 64, dtype=np.float32)
    b = a.copy()
    b[3] = np.nan
    assert _judge(policy, a, b, op="x", dtype="float32").failed == ("nonfinite",)
    assert _judge(policy, a, a.reshape(8, 8), op="x", dtype="float32").failed == ("shape",)


def test_rules_match_in_order_by_op_glob_and_dtype(tmp_path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(
        "# matmuls in BFLOAT8_B are held to less than the rest\n"
        '[[rules]]\nop = "ttnn.matmul"\ndtype = "BFLOAT8_B"\npcc = 0.98\n\n'
        '[[rules]]\nop = "ttnn.mat*"\npcc = 0.999\nmax_abs_error = 0.5\n\n'
        '[[rules]]\nop = "*"\ndtype = "bfloat16"\nrtol = 0.01\natol = 0.01\nmax_mismatch_fraction = 0.001\n'
    )
    policy = Policy.load(path)
    assert policy.criteria_for("ttnn.matmul", "DataType.BFLOAT8_B") == Criteria(pcc=0.98)
    assert policy.criteria_for("ttnn.matmul", "BFLOAT16") == Criteria(pcc=0.999, max_abs_error=0.5)  # order wins
    assert policy.criteria_for("ttnn.add", "BFLOAT16").max_mismatch_fraction == 0.001
    assert policy.criteria_for("ttnn.add", "float32") == dtype_defaults("float32")[0]  # no rule: the defaults
    assert policy.tolerances("ttnn.add", "bfloat16") == (0.01, 0.01)
    assert policy.tolerances("ttnn.matmul", "bfloat16") == dtype_defaults("bfloat16")[1]
    rng = np.random.default_rng(2)
    golden = rng.standard_normal(10_000).astype(np.float32).astype(BF16)
    off = golden.copy()
    off[:60] += np.array(1.0, BF16)  # 0.6% of the elements off by 1: PCC 0.997
    verdict = _judge(policy, off, golden, op="ttnn.add", dtype="BFLOAT16")
    assert verdict.failed == ("max_mismatch_fraction",)
    verdict = _judge(policy, off, golden, op="ttnn.matmul", dtype="BFLOAT16")
    assert verdict.failed == ("pcc", "max_abs_error")


def test_judge_refuses_counts_made_at_other_tolerances(tmp_path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text('[[rules]]\nop = "*"\nrtol = 0.1\n')
    a = np.ones(8, np.float32)
    with pytest.raises(reportdb.errors.ComparisonError, match="policy.tolerances"):
        Policy.load(path).judge(reportdb.compare(a, a), op="x", dtype="float32")


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ('[[rules]]\nop = "*"\npcc = 0.9\n\n[[rules]]\nop = "ttnn.add"\npcc = 2\n', 5, "pcc must lie in"),
        ('[[rules]]\nop = "*"\npcc = 0.9\n[[rules]]\nop = "a"\nrtoll = 0.1\n', 4, "unknown key 'rtoll'"),
        ('[[rules]]\nop = "*"\nmax_abs_error = "big"\n', 1, "max_abs_error must be a finite number"),
        ('[[rules]]\nop = "*"\n', 1, "no criteria"),
        ('[[rules]]\nop = "*"\npcc = 0.9\n[other]\n', None, "unknown top-level key 'other'"),
        ('[[rules]]\nop = *\n', 2, "not valid TOML"),
    ],
)
def test_a_bad_policy_file_names_the_file_and_line(tmp_path, text: str, line: int | None, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(PolicyError, match=message) as info:
        Policy.load(path)
    assert isinstance(info.value, reportdb.ReportDBError)
    assert str(path) in str(info.value)
    if line is not None:
        assert f"line {line}" in str(info.value)


def test_missing_policy_file() -> None:
    with pytest.raises(PolicyError, match="cannot read the policy file"):
        Policy.load("/nonexistent/policy.toml")


def _pair(kind: str, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """A golden tensor and a noisy device one of the given kind (BFLOAT8_B: bfloat16 values on a block grid)."""
    rng = np.random.default_rng(3)
    golden = rng.standard_normal(shape).astype(np.float32)
    actual = golden + rng.standard_normal(shape).astype(np.float32) * 0.02
    if kind == "float32":
        return actual, golden
    if kind == "bfloat16":
        return actual.astype(BF16), golden.astype(BF16)
    blocks = actual.reshape(-1, 16)  # BFLOAT8_B: 16 values share an exponent, 7 bits each
    scale = 2.0 ** (np.floor(np.log2(np.abs(blocks).max(axis=1, keepdims=True))) - 6)
    return (np.round(blocks / scale) * scale).reshape(shape).astype(BF16), golden.astype(BF16)


@pytest.mark.parametrize("kind", ["float32", "bfloat16", "BFLOAT8_B"])
def test_sqnr_and_error_quantiles_against_numpy(kind: str) -> None:
    a, b = _pair(kind, (64, 4096))
    error = np.abs(a.astype(np.float64) - b.astype(np.float64))
    sqnr = 10 * np.log10(np.sum(b.astype(np.float64) ** 2) / np.sum(error**2))
    whole = reportdb.compare(a, b)
    windows = {}

    def reader(array: np.ndarray):
        def read(window):
            windows[repr(window)] = True
            return array[window]

        return read

    import reportdb.numeric.streamed as streamed

    old = streamed.WINDOW_ELEMENTS
    streamed.WINDOW_ELEMENTS = 4096 * 4  # many windows: streamed in 16 windows of four rows
    try:
        streamed_result = compare_streamed(reader(a), reader(b), a.shape, b.shape, a.dtype, b.dtype, rtol=1e-5,
                                           atol=1e-8, pcc=0.99)
    finally:
        streamed.WINDOW_ELEMENTS = old
    assert len(windows) == 16
    for result in (whole, streamed_result):
        assert result.sqnr_db == pytest.approx(sqnr, rel=1e-9)
        for name, q in (("abs_error_p50", 0.5), ("abs_error_p99", 0.99), ("abs_error_p999", 0.999)):
            assert getattr(result, name) == pytest.approx(np.quantile(error, q), rel=0.005), name
        assert result.bitwise_equal is False
    assert streamed_result.abs_error_p99 == whole.abs_error_p99


def test_quantiles_exact_at_zero_and_the_maximum_and_bitwise_equality() -> None:
    a = np.zeros(1000, np.float32)
    b = a.copy()
    b[-1] = 2.0
    result = reportdb.compare(a, b)
    assert (result.abs_error_p50, result.abs_error_p999, result.max_abs_error) == (0.0, pytest.approx(0.002), 2.0)
    same = reportdb.compare(b, b.copy())
    assert same.bitwise_equal and same.sqnr_db is None and same.abs_error_p99 == 0.0
    negative_zero = reportdb.compare(-a, a)
    assert negative_zero.max_abs_error == 0.0 and negative_zero.bitwise_equal is False


def test_quantiles_of_stored_tensors_streamed_in_windows(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    import reportdb.numeric.streamed as streamed
    from reportdb.numeric.streamed import compare_stored

    a, b = _pair("BFLOAT8_B", (128, 2048))
    with reportdb.open(tmp_path / "r", "a") as report:
        report.put_tensor(1, a, ttnn_dtype="BFLOAT8_B")
        report.put_tensor(2, b, ttnn_dtype="BFLOAT16")
    reads = []
    monkeypatch.setattr(streamed, "WINDOW_ELEMENTS", 2048 * 8)  # 16 windows of eight rows, never the whole tensor
    with reportdb.open(tmp_path / "r") as report:
        original = report.tensor

        def counted(tensor_id, rank=0, **kwargs):
            reads.append(kwargs.get("window"))
            return original(tensor_id, rank, **kwargs)

        monkeypatch.setattr(report, "tensor", counted)
        result = compare_stored(report, 1, report, 2, 0, rtol=1e-2, atol=1e-2, pcc=0.99)
    assert len(reads) == 32 and all(w is not None for w in reads)
    error = np.abs(a.astype(np.float64) - b.astype(np.float64))
    assert result.sqnr_db == pytest.approx(10 * np.log10(np.sum(b.astype(np.float64) ** 2) / np.sum(error**2)))
    for name, q in (("abs_error_p50", 0.5), ("abs_error_p99", 0.99), ("abs_error_p999", 0.999)):
        assert getattr(result, name) == pytest.approx(np.quantile(error, q), rel=0.005), name


def test_a_scale_error_that_pcc_and_sqnr_pass_fails_by_its_fit() -> None:
    """One device 7% off in scale: PCC 0.99999 and SQNR 23 dB clear bfloat16's whole-tensor defaults; the fit does
    not, nor the tiles (23 dB each, under 26)."""
    rng = np.random.default_rng(7)
    golden = rng.standard_normal((128, 256)).astype(np.float32)
    scaled = (golden * 1.07).astype(BF16)
    metrics = reportdb.compare(scaled, golden, rtol=2**-6, atol=2**-7)
    assert metrics.pcc > 0.9999 and metrics.sqnr_db > Policy.default().criteria_for(None, "bfloat16").sqnr_db
    verdict = _judge(Policy.default(), scaled, golden, op="ttnn.multiply", dtype="bfloat16")
    assert not verdict.passed and verdict.failed == ("scale_or_offset", "tile_sqnr_db")
    rounded = golden.astype(BF16)  # rounding alone is no scale error
    assert _judge(Policy.default(), rounded, golden, op="ttnn.multiply", dtype="bfloat16").passed
