"""The comparison metric vector's fast paths against whole-array numpy references: ULPs from bit patterns (sign flips
taken apart or mapped, rounding into the coarser dtype, its overflow), blocks of equal values, tt-metal's PCC where the
actual dtype casts exactly into the golden's, allclose mismatches counted sparse and dense, bfloat16 widened by its
bits; and locate's per-tile maps on whole and partial tiles."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from test_compare import assert_matches_reference, ordered, ttmetal_comp_pcc

import reportdb.numeric.metrics as cmp
from reportdb.analysis.scan import scan
from reportdb.numeric.blocks import flat_blocks, to_float64
from reportdb.numeric.metrics import compare

BF16 = np.dtype(ml_dtypes.bfloat16)


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> int:
    """Blocks of 1000 elements, so modest arrays run many blocks (and threads) of every path."""
    monkeypatch.setattr(cmp, "BLOCK_ELEMENTS", 1000)
    return 1000


def ulp_reference(a: np.ndarray, b: np.ndarray, dtype: np.dtype) -> tuple[int, float, int]:
    """(max, mean, count) of the ordered-pattern distances of ``a`` and ``b`` rounded to ``dtype``, in Python ints,
    over the positions where both rounded values are finite."""
    with np.errstate(over="ignore", invalid="ignore"):
        ra, rb = np.asarray(a).astype(dtype).ravel(), np.asarray(b).astype(dtype).ravel()
    keep = np.isfinite(ra.astype(np.float64)) & np.isfinite(rb.astype(np.float64))
    dist = np.abs(ordered(ra[keep]) - ordered(rb[keep]))
    return int(dist.max()), float(np.mean(dist.astype(float))), int(keep.sum())


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float16])
@pytest.mark.parametrize("flip_fraction", [0.0, 0.01, 0.5])
def test_ulps_with_few_and_many_sign_flips(small_blocks: int, dtype: np.dtype, flip_fraction: float) -> None:
    """Distances where signs agree come from the patterns' difference; flipped signs (and +0 against -0) are taken
    apart when few, by the ordered mapping when many: both as the ordered-integer reference."""
    rng = np.random.default_rng(int(flip_fraction * 100) + np.dtype(dtype).itemsize)
    b = (rng.standard_normal(7 * small_blocks + 5) * 3).astype(dtype)
    a = (b.astype(np.float32) * np.float32(1.001)).astype(dtype)
    flip = rng.random(b.size) < flip_fraction
    a[flip] = -a[flip]
    a[3], b[3] = -0.0, 0.0  # zero apart
    a[4], b[4] = np.finfo(np.float16).max if dtype == np.float16 else 60000.0, -(2.0**-14)  # a wide flip
    r = compare(a, b)
    want_max, want_mean, count = ulp_reference(a, b, np.dtype(dtype))
    assert (r.ulp_max, count) == (want_max, b.size) and r.ulp_mean == pytest.approx(want_mean, rel=1e-12)
    assert_matches_reference(r, a, b)


def test_ulps_rounded_into_the_coarser_dtype_and_their_overflow(small_blocks: int) -> None:
    """float32 against bfloat16 counts ULPs of bfloat16 after rounding; a block whose float32 values round past
    bfloat16's largest leaves exactly those positions out, and says so."""
    rng = np.random.default_rng(5)
    b = rng.standard_normal(5 * small_blocks).astype(BF16)
    a = b.astype(np.float32) + rng.standard_normal(b.size).astype(np.float32) * np.float32(0.02)
    r = compare(a, b)
    assert (r.ulp_max, r.ulp_mean) == pytest.approx(ulp_reference(a, b, BF16)[:2], rel=1e-12)
    a[1234] = np.float32(3.4e38)  # rounds to Inf in bfloat16: left out of the ULPs, kept everywhere else
    over = compare(a, b)
    want_max, want_mean, count = ulp_reference(a, b, BF16)
    assert count == b.size - 1 and (over.ulp_max, over.ulp_mean) == (want_max, pytest.approx(want_mean, rel=1e-12))
    assert any("overflow bfloat16" in n for n in over.notes)
    assert_matches_reference(over, a, b)


@pytest.mark.parametrize("golden_dtype", [np.float32, BF16])
def test_blocks_of_equal_values_next_to_differing_ones(small_blocks: int, golden_dtype: np.dtype) -> None:
    """Blocks whose two sides hold equal values skip their error passes; mixed with differing and constant blocks (and
    with the sides in different dtypes) every metric still matches the whole-array reference."""
    rng = np.random.default_rng(7)
    b = rng.standard_normal(9 * small_blocks + 11).astype(BF16).astype(golden_dtype)  # bfloat16 values
    a = b.astype(BF16)  # equal values, also where the dtypes differ
    a[2 * small_blocks : 3 * small_blocks] += BF16.type(0.5)  # one differing block
    b[5 * small_blocks : 6 * small_blocks] = 1.5  # one constant block, equal on both sides
    a[5 * small_blocks : 6 * small_blocks] = 1.5
    r = compare(a, b)
    assert_matches_reference(r, a, b)
    assert r.pcc_ttmetal == pytest.approx(ttmetal_comp_pcc(b, a), abs=1e-12)
    errors = np.abs(a.astype(np.float64) - b.astype(np.float64))
    assert r.abs_error_p50 == 0.0 and r.abs_error_p99 == pytest.approx(np.quantile(errors, 0.99), rel=0.005)
    equal = compare(b.astype(BF16), b.astype(BF16).astype(np.float32))
    assert (equal.max_abs_error, equal.ulp_max, equal.abs_error_p99, equal.allclose_mismatches) == (0.0, 0, 0.0, 0)
    assert equal.pcc == pytest.approx(1.0) and equal.pcc_ttmetal == 1.0 and not equal.bitwise_equal


@pytest.mark.parametrize("pair", [(BF16, np.float32), (np.float16, np.float32), (np.int16, np.float32),
                                  (np.float32, np.float64), (np.float32, BF16), (np.float64, np.float32)])
def test_ttmetal_pcc_with_exact_and_rounding_casts(small_blocks: int, pair: tuple[type, type]) -> None:
    """tt-metal casts the calculated side to the golden's dtype: where that cast is exact its PCC is the joint
    moments' (no pass of its own), where it rounds it is taken apart; both as comp_pcc step by step."""
    actual_dtype, golden_dtype = pair
    rng = np.random.default_rng(11)
    golden = (rng.standard_normal(4 * small_blocks + 3) * 50).astype(golden_dtype)
    actual = (golden.astype(np.float64) + rng.standard_normal(golden.size) * 0.7).astype(actual_dtype)
    r = compare(actual, golden)
    assert r.pcc_ttmetal == pytest.approx(ttmetal_comp_pcc(golden, actual), abs=1e-12)
    assert_matches_reference(r, actual, golden)
    actual[17] = np.nan if np.dtype(actual_dtype).kind == "f" or actual_dtype is BF16 else actual[17]
    assert compare(actual, golden).pcc_ttmetal == pytest.approx(ttmetal_comp_pcc(golden, actual), abs=1e-12)


@pytest.mark.parametrize("spread", ["sparse", "dense", "boundary"])
def test_allclose_mismatches_sparse_and_dense(small_blocks: int, spread: str) -> None:
    """Mismatches are counted on the errors past atol alone when they are few, on the whole block when many; both
    equal numpy's isclose, also for errors exactly on the tolerance."""
    rng = np.random.default_rng(13)
    b = rng.standard_normal(6 * small_blocks).astype(np.float64)
    rtol, atol = 1e-3, 1e-4
    a = b + rng.uniform(-1, 1, b.size) * 1e-5  # below atol everywhere
    if spread == "sparse":
        a[::97] += 0.5
    elif spread == "dense":
        a += rng.uniform(-1, 1, b.size) * 5e-3
    else:  # a third of the errors exactly atol + rtol * |b| (a match), a third one ulp over it
        tol = atol + rtol * np.abs(b)
        a = b + tol
        a[::3] = np.nextafter(b[::3] + tol[::3], np.inf)
    r = compare(a, b, rtol=rtol, atol=atol)
    assert r.allclose_mismatches == int(np.count_nonzero(~np.isclose(a, b, rtol=rtol, atol=atol)))
    assert_matches_reference(r, a, b, rtol=rtol, atol=atol)


def test_relative_errors_with_goldens_below_epsilon(small_blocks: int) -> None:
    """A golden of zeros or below float64 epsilon is floored at it (Polygraphy's guard), only in the blocks that have
    one."""
    b = np.linspace(-1, 1, 3 * small_blocks)
    b[small_blocks + 5] = 0.0
    b[small_blocks + 6] = 1e-300
    a = b + 1e-3
    r = compare(a, b)
    assert_matches_reference(r, a, b)
    assert r.max_rel_error == pytest.approx(1e-3 / np.finfo(np.float64).eps)


def test_bfloat16_widened_by_its_bits() -> None:
    """bfloat16 to float64 through its bits gives ml_dtypes' own cast on every pattern (NaN as NaN)."""
    patterns = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(BF16)
    strided = patterns[::3]
    for x in (patterns, strided):
        with np.errstate(invalid="ignore"):  # signalling NaN patterns
            got = to_float64(x, np.empty(x.size))
            want = x.astype(np.float64)
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(got), nan)
        assert np.array_equal(got[~nan].view(np.uint64), want[~nan].view(np.uint64))


def tile_reference(
    a: np.ndarray, g: np.ndarray, tile: tuple[int, int], rtol: float, atol: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per-tile max |a - g| and mismatches (float32 arithmetic, locate's own), one tile at a time."""
    *lead, h, w = a.shape
    th, tw = tile
    grid = (*lead, -(-h // th), -(-w // tw))
    tmax, tmm = np.zeros(grid, np.float32), np.zeros(grid, np.int64)
    err = np.abs(a.astype(np.float32) - g.astype(np.float32))
    bad = err > np.float32(atol) + np.float32(rtol) * np.abs(g.astype(np.float32))
    for index in np.ndindex(*grid):
        *ld, r, c = index
        box = (*ld, slice(r * th, (r + 1) * th), slice(c * tw, (c + 1) * tw))
        tmax[index], tmm[index] = err[box].max(), bad[box].sum()
    return tmax, tmm


@pytest.mark.parametrize("shape", [(2, 64, 96), (3, 70, 100), (65, 33), (1000,)])
@pytest.mark.parametrize("wrong", ["sparse", "dense"])
def test_tile_maps_on_whole_and_partial_tiles(shape: tuple[int, ...], wrong: str) -> None:
    """The per-tile max error and mismatch maps equal a tile-by-tile numpy reference, on tensors of whole tiles (reduced
    row-wise, then by column) and of partial last tiles (reduced at the tile starts), bfloat16 against float32."""
    rng = np.random.default_rng(sum(shape))
    g = rng.standard_normal(shape).astype(np.float32)
    a = g.astype(BF16)
    flat = a.reshape(-1)
    if wrong == "sparse":
        flat[rng.choice(flat.size, 5, replace=False)] += BF16.type(1.0)
    else:
        a = (g * np.float32(1.05)).astype(BF16)
    rtol, atol = 2.0**-6, 2.0**-7
    tile = (32, 32)
    found = scan(lambda w: a[w] if w else a, lambda w: g[w] if w else g, shape, (a.dtype, g.dtype), tile, None,
                 rtol=rtol, atol=atol, pcc=None)
    tmax, tmm = tile_reference(a if len(shape) > 1 else a[None], g if len(shape) > 1 else g[None], tile, rtol, atol)
    assert np.array_equal(found.tile_max.reshape(tmax.shape), tmax)
    assert np.array_equal(found.tile_mismatches.reshape(tmm.shape), tmm)
    assert found.mismatches == int(tmm.sum())


def test_flat_blocks_of_views_are_the_flat_array() -> None:
    """Blocks of a non-contiguous array (a permute's view, a transpose, a reversed or strided slice, a broadcast,
    Fortran order, zero-size and 0-d arrays), whole or a span of it, are its C-order values cut at the same positions
    as a contiguous copy's, whatever the block."""
    base = np.arange(2 * 16 * 24 * 8, dtype=np.float32).reshape(2, 16, 24, 8)
    views = [base.transpose(0, 2, 1, 3), base.transpose(3, 2, 1, 0), base[:, ::-1, 1::3], base[..., ::2].T,
             np.broadcast_to(base[0, :1], (5, 16, 24, 8)), np.asfortranarray(base[0]), base[:, :0], base[0, 0, 0, 0],
             base[0, 0, :, 3]]
    for view in views:
        flat = np.ascontiguousarray(view).reshape(-1)
        for block in (1, 7, 64, 1000, 1 << 16):
            for start, stop in ((0, view.size), (view.size // 3, view.size - view.size // 5)):
                got = list(flat_blocks(view, block, start, stop))
                want = [flat[f : min(f + block, stop)] for f in range(start, stop, block)]
                assert [g.tolist() for g in got] == [w.tolist() for w in want], (view.shape, block, start, stop)
