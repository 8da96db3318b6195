"""Compare an actual tensor with its expected (golden) one: a vector of metrics, never PCC alone.

PCC is blind to scale and offset and tt-metal's ``comp_pcc`` hides NaN/Inf, so :func:`compare` reports PCC
next to error magnitudes, ULPs, allclose counts, non-finite mismatches and a linear-fit check. ``a`` is the
actual (device, "calculated") tensor and ``b`` the expected (golden) one: like ``numpy.isclose``, tolerances
and relative errors are taken relative to ``b``.

Definitions (all arithmetic in float64, streamed over blocks of :data:`BLOCK_ELEMENTS` elements so memory
stays bounded; partial moments are merged with Chan, Golub & LeVeque's pairwise formula, which also lets
large pairs be split into spans streamed on separate cores):

* ``pcc``: Pearson correlation over the positions where *both* sides are finite, clipped to [-1, 1]; None
  when fewer than two such positions exist or either side is constant there (``constant_input``).
* ``pcc_ttmetal``: tt-metal's ``comp_pcc(golden=b, calculated=a)`` number: ``a`` is first cast to ``b``'s
  dtype; both all-NaN (or empty) gives 1.0, exactly one all-NaN gives 0.0, exactly one all-zero gives 0.0;
  NaN and ±Inf are then replaced by 0 on both sides; equal tensors give 1.0; otherwise the minimum of
  ``np.ma.corrcoef``'s 2x2 matrix, which is 1.0 when a side has zero variance.
* ``cosine``: cosine similarity over the jointly finite positions (None if either side is all zero there).
* ``max_abs_error`` / ``mean_abs_error``: of ``|a - b|``; ``max_rel_error`` / ``mean_rel_error``: of
  ``|a - b| / max(|b|, REL_EPS)`` with ``REL_EPS`` = float64 epsilon (Polygraphy's zero guard); both over the
  jointly finite positions.
* ``sqnr_db``: ``10 log10(sum b^2 / sum (a - b)^2)`` over the jointly finite positions; None when either sum is 0
  (no error at all, or a zero golden), so it stays JSON.
* ``abs_error_p50`` / ``abs_error_p99`` / ``abs_error_p999``: quantiles of ``|a - b|`` over the jointly finite
  positions, as numpy's ``quantile`` (linear), streamed through a 65,536-bin histogram of float32 bit patterns: within
  0.4% of the exact value (see ``numeric/quantiles.py``).
* ``bitwise_equal``: both sides hold the same dtype and the same bytes (NaN payloads and -0 included).
* ``ulp_max`` / ``ulp_mean``: distance in units in the last place of ``ulp_dtype``, the coarser float dtype
  of the two (fewer mantissa bits; an integer side takes the other side's float dtype). Both sides are
  rounded to it and their bit patterns mapped to ordered integers, so the distance is an integer count of
  representable values between them, +0 and -0 being equal. Positions where either rounded value is not
  finite are skipped. With no float side (integers, bool) ``ulp_dtype`` is ``"integer"`` and a ULP is the
  absolute difference.
* ``allclose_mismatches``: positions where ``|a - b| > atol + rtol * |b|`` (numpy's convention); NaN matches
  NaN, ±Inf matches the same infinity, anything else non-finite mismatches.
* ``nan_mismatches``: positions where exactly one side is NaN. ``inf_mismatches``: positions where a side is
  ±Inf and the other does not hold that same infinity (NaN against Inf counts in both).
* ``fit_scale`` / ``fit_offset``: the symmetric (reduced-major-axis) line ``b ~ k*a + c``, ``k = sign(r) *
  std(b) / std(a)``, which unlike the least-squares slope is not shrunk by uncorrelated noise.
  ``scale_or_offset_error`` is set when ``pcc >= pcc`` threshold but ``|k - 1| > t`` or ``|c| > t *
  max(rms(a), rms(b)) + atol``, with ``t = fit_tol + (1/pcc - 1)``: pure noise at correlation r can move the
  ratio of spreads by up to 1/r, so only the excess counts; an actual side shrunk no more than math fidelity's
  operand truncation explains is not an error, only noted (``numeric/fit.py``).
* ``tile_shape`` / ``tile_sqnr_db`` / ``worst_tile`` / ``tile_sqnr_p50``: the SQNR of each tile of the last two dims
  (32x32 unless ``tile=`` says), each tile's golden energy floored at its share of the tensor's: the worst tile's,
  where it is, and the median tile's (``numeric/tiles.py``).
* ``passed``: False on a shape mismatch or any non-finite mismatch; otherwise, when ``pcc`` is undefined
  (constant, empty, single-element or all-non-finite inputs), ``allclose_mismatches == 0``; otherwise
  ``pcc >= pcc`` threshold and no scale/offset error.
* ``full_stats``: whether the comparison holds every field. ``compare(full=False)`` computes only what a tolerance
  policy's verdict reads (``analysis/policy.py``: PCC and the fitted line, allclose mismatches, the largest absolute
  error, SQNR, the tiles, non-finite mismatches; ULPs only with ``ulps=True``), by the same arithmetic, so those
  fields are the same to the bit; the :data:`DISTRIBUTION` fields (and the ULPs when not asked for) are then None.
  Replay makes them for the outputs that fail, and for all with ``full_stats``: about half a comparison's cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..dtypes import dtype_name
from ..errors import ComparisonError
from ..results import Result
from .blocks import Moments, dot, flat_blocks, parallel_map, scratch, split_range, to_float64
from .fit import fit_check
from .quantiles import AbsErrorHistogram
from .tiles import DEFAULT_TILE, TileEnergies, TileGeometry, tile_geometry
from .tolerances import dtype_tolerances
from .ttmetal import TtMetalState, casts_exactly
from .ulps import UlpCounter, ulp_dtype

#: Elements per block of a comparison: 512 KiB of float64, so a block's passes mostly stay in a core's cache, and a
#: tensor of 1M elements already splits into spans for two threads (``split_range``: four blocks a span at least).
BLOCK_ELEMENTS = 1 << 16

#: Floor of the relative-error denominator, ``max(|b|, REL_EPS)`` (float64 machine epsilon, as Polygraphy).
REL_EPS = float(np.finfo(np.float64).eps)

#: Spread below this fraction of |mean| triggers an exact test for a constant block (summation noise
#: would otherwise leave a tiny non-zero variance on constant data).
_CONSTANT_REL = 1e-12


#: The metric vector's boolean flags that say why a comparison failed besides a low PCC.
FLAGS = ("shape_mismatch", "nonfinite_mismatch", "scale_or_offset_error", "constant_input")

#: The fields no verdict reads, which ``compare(full=False)`` leaves None: tt-metal's PCC, the mean and relative
#: errors, the error quantiles and the median tile's SQNR. (Bitwise equality, which the ``bitwise`` criterion reads,
#: is always kept: a byte comparison of blocks whose values are equal, stopped at the first that differs.)
DISTRIBUTION = ("pcc_ttmetal", "mean_abs_error", "max_rel_error", "mean_rel_error", "abs_error_p50", "abs_error_p99",
                "abs_error_p999", "tile_sqnr_p50")


class _PairMoments:
    """Streaming moments of a pair of float64 sequences over the same positions: each side's count, mean and M2,
    and their co-moment (the sum of products of deviations), which merges alongside the sides' means."""

    __slots__ = ("a", "b", "cab")

    def __init__(self) -> None:
        self.a = Moments()
        self.b = Moments()
        self.cab = 0.0

    @property
    def n(self) -> int:
        """The number of positions (the same on both sides)."""
        return self.a.n

    @classmethod
    def of_block(cls, xa: np.ndarray, xb: np.ndarray, sum_a: float, sum_b: float, work: np.ndarray) -> _PairMoments:
        """The moments of one block, given its sums; ``work`` is float64 and at least ``2 * xa.size`` long."""
        new = cls()
        m = xa.size
        if m == 0:
            return new
        da = np.subtract(xa, sum_a / m, out=work[:m])
        db = np.subtract(xb, sum_b / m, out=work[m : 2 * m])
        new.a = _block_moments(xa, da, sum_a / m)
        new.b = _block_moments(xb, db, sum_b / m)
        new.cab = dot(da, db) if new.a.m2 and new.b.m2 else 0.0
        return new

    @classmethod
    def centring(cls, xa: np.ndarray, xb: np.ndarray) -> _PairMoments:
        """The moments of one block, centring ``xa`` and ``xb`` (float64 scratch, not needed after) in place."""
        new = cls()
        if xa.size:
            new.a = _centre(xa)
            new.b = _centre(xb)
            new.cab = dot(xa, xb) if new.a.m2 and new.b.m2 else 0.0
        return new

    def merge(self, other: _PairMoments) -> None:
        """Fold ``other`` (a disjoint set of positions) into these moments."""
        delta_a, weight = self.a.merge(other.a)
        delta_b, _ = self.b.merge(other.b)
        self.cab += other.cab + delta_a * delta_b * weight


def _block_moments(x: np.ndarray, centred: np.ndarray, mean: float) -> Moments:
    """The moments of a block from its centred values; an exactly constant block gets its exact value as mean and
    M2 = 0 (summation noise would otherwise leave a tiny spread)."""
    m2 = dot(centred, centred)
    if math.sqrt(m2 / x.size) <= _CONSTANT_REL * abs(mean) and x[0] == x.max() == x.min():
        return Moments(x.size, float(x[0]), 0.0)
    return Moments(x.size, mean, m2)


_subtract, _abs, _divide = np.subtract, np.absolute, np.divide
_sum, _max, _min = np.add.reduce, np.maximum.reduce, np.minimum.reduce  # no ndarray-method wrapper per call


def _centre(x: np.ndarray) -> Moments:
    """The moments of a float64 block, whose values are replaced by their deviations from its mean. An exactly
    constant block gets its exact value as mean and M2 = 0 (summation noise would otherwise leave a tiny spread): when
    the spread is that small every value lies within a factor 2 of the mean, so the subtraction is exact and the
    deviations are all equal exactly when the values are."""
    first = float(x[0])
    mean = float(_sum(x)) / x.size
    _subtract(x, mean, out=x)
    m2 = dot(x, x)
    if math.sqrt(m2 / x.size) <= _CONSTANT_REL * abs(mean) and _min(x) == _max(x):
        return Moments(x.size, first, 0.0)
    return Moments(x.size, mean, m2)


def check_params(rtol: float, atol: float, pcc: float, fit_tol: float) -> None:
    """Reject tolerances and thresholds that would make every comparison meaningless."""
    for name, value in (("rtol", rtol), ("atol", atol), ("fit_tol", fit_tol)):
        if not (isinstance(value, (int, float, np.number)) and math.isfinite(value) and value >= 0):
            raise ComparisonError(f"{name} must be a finite number >= 0, got {value!r}")
    if not (isinstance(pcc, (int, float, np.number)) and -1.0 <= pcc <= 1.0):
        raise ComparisonError(f"pcc threshold must lie in [-1, 1], got {pcc!r}")


def _finite_or_none(value: Any) -> Any:
    """Undefined or overflowed float metrics become None, so the result survives json.dumps(allow_nan=False)."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


@dataclass(frozen=True)
class Comparison(Result):
    """The metric vector of one comparison (see the module docstring for each field's definition): the inputs'
    shapes and dtypes, the tolerances used, then the metrics. Undefined metrics are None, never NaN; after a shape
    mismatch every metric is None (nothing else was compared). ``to_dict()`` is what ``--json`` prints."""

    shape_a: tuple[int, ...]
    shape_b: tuple[int, ...]
    dtype_a: str
    dtype_b: str
    rtol: float
    atol: float
    pcc_threshold: float
    fit_tol: float
    count: int | None = None
    finite_count: int | None = None
    pcc: float | None = None
    pcc_ttmetal: float | None = None
    cosine: float | None = None
    max_abs_error: float | None = None
    mean_abs_error: float | None = None
    max_rel_error: float | None = None
    mean_rel_error: float | None = None
    ulp_dtype: str | None = None
    ulp_max: int | None = None
    ulp_mean: float | None = None
    allclose_mismatches: int | None = None
    nan_mismatches: int | None = None
    inf_mismatches: int | None = None
    fit_scale: float | None = None
    fit_offset: float | None = None
    constant_input: bool | None = None
    scale_or_offset_error: bool | None = None
    nonfinite_mismatch: bool | None = None
    shape_mismatch: bool = False
    passed: bool = False
    notes: tuple[str, ...] = ()
    sqnr_db: float | None = None
    abs_error_p50: float | None = None
    abs_error_p99: float | None = None
    abs_error_p999: float | None = None
    bitwise_equal: bool | None = None
    tile_shape: tuple[int, int] | None = None
    tile_sqnr_db: float | None = None
    worst_tile: tuple[int, int, int] | None = None
    tile_sqnr_p50: float | None = None
    full_stats: bool = True

    @property
    def flags(self) -> tuple[str, ...]:
        """The names of the :data:`FLAGS` that are set: why the comparison failed besides a low PCC."""
        return tuple(f for f in FLAGS if getattr(self, f))

    def _html_fields(self) -> list[tuple[str, Any]]:
        """Every field but the notes, which follow as rows of their own (they are sentences)."""
        return [(k, v) for k, v in super()._html_fields() if k != "notes"] + [("note", n) for n in self.notes]


def compare(
    a: np.ndarray,
    b: np.ndarray,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    pcc: float = 0.99,
    fit_tol: float = 0.02,
    tile: tuple[int, int] = DEFAULT_TILE,
    full: bool = True,
    ulps: bool = True,
) -> Comparison:
    """Compare the actual tensor ``a`` with the expected (golden) tensor ``b``; see the module docstring for
    every field's definition. ``to_dict()`` of the result is JSON-serializable (no NaN: undefined metrics are None).
    ``rtol``/``atol`` default to the coarser dtype's (``numeric/tolerances.py``: bfloat16 2^-6 / 2^-7, float32
    1e-5 / 2^-23, integers 0), the same defaults as the tolerance policy's. ``tile`` is the (height, width) of the
    tiles of the last two dims judged one by one (``numeric/tiles.py``). ``full=False`` computes only what a verdict
    reads (the :data:`DISTRIBUTION` fields None, and the ULPs too unless ``ulps``): see ``full_stats``."""
    arr_a = np.asarray(a)
    arr_b = np.asarray(b)
    rtol, atol = default_tolerances(arr_a.dtype, arr_b.dtype, rtol, atol)
    check_params(rtol, atol, pcc, fit_tol)
    geometry = tile_geometry(arr_a.shape, tile)
    inputs: dict[str, Any] = dict(
        shape_a=tuple(arr_a.shape), shape_b=tuple(arr_b.shape), dtype_a=dtype_name(arr_a.dtype),
        dtype_b=dtype_name(arr_b.dtype), rtol=float(rtol), atol=float(atol), pcc_threshold=float(pcc),
        fit_tol=float(fit_tol),
    )
    if arr_a.shape != arr_b.shape:
        return Comparison(**inputs, shape_mismatch=True, passed=False, notes=("shapes differ: nothing else was compared",))
    with np.errstate(over="ignore", invalid="ignore"):  # overflowed sums surface as None, not warnings
        metrics = _compare_same_shape(arr_a, arr_b, float(rtol), float(atol), float(pcc), float(fit_tol), geometry,
                                      full, full or ulps)
    return Comparison(**inputs, **metrics, full_stats=full)


def default_tolerances(da: np.dtype, db: np.dtype, rtol: float | None, atol: float | None) -> tuple[float, float]:
    """``rtol``/``atol``, each None replaced by the default of the coarser dtype of the two (integers: 0)."""
    if rtol is not None and atol is not None:
        return rtol, atol
    coarser = ulp_dtype(da, db)
    d_rtol, d_atol = (0.0, 0.0) if coarser is None else dtype_tolerances(dtype_name(coarser))
    return (d_rtol if rtol is None else rtol), (d_atol if atol is None else atol)


class PairAccumulator:
    """Every running sum, maximum and count of one comparison over a run of blocks; two accumulators over
    disjoint runs merge into one, so halves of a large pair can be streamed on separate cores.

    A block is widened to float64 once per side; ``|a - b|`` is taken once and feeds the error sums, the histogram,
    the mismatch count (only where an error passes ``atol``) and the relative errors; then each side is centred in
    place for the moments. Where every value is finite (the maximum error is) and the actual side's dtype casts
    exactly into the golden's, tt-metal's PCC is the joint moments' own, with no pass of its own. Without ``full``
    the passes only :data:`DISTRIBUTION` fields need (histogram, relative errors, tt-metal's own PCC) are skipped, and without ``ulps`` the ULP distances; every other sum takes the same arithmetic.
    """

    def __init__(
        self, a_dtype: np.dtype, b_dtype: np.dtype, rtol: float, atol: float, block: int,
        tiles: TileGeometry | None = None, full: bool = True, ulps: bool = True,
    ) -> None:
        self.b_dtype = b_dtype
        self.tiles = TileEnergies(tiles) if tiles is not None else None
        self.rtol = rtol
        self.atol = atol
        self.block = block
        self.same_dtype = a_dtype == b_dtype
        self.tt_exact = casts_exactly(np.dtype(a_dtype), np.dtype(b_dtype))
        self.golden_float = b_dtype.kind not in "biu"
        self.ulp_dtype = ulp_dtype(a_dtype, b_dtype)
        self.full, self.count_ulps = full, ulps
        self.ulps = UlpCounter(self.ulp_dtype, block) if self.ulp_dtype is not None and ulps else None
        self.joint = _PairMoments()
        self.tt_moments = _PairMoments()
        self.tt = TtMetalState()
        self.max_abs = self.max_rel = self.sum_abs = self.sum_rel = self.sum_sq_error = 0.0
        self.histogram = AbsErrorHistogram(block) if full else None
        self.bitwise = self.same_dtype
        self.mismatches = self.nan_mismatches = self.inf_mismatches = 0
        # This thread's buffers (a block's work never outlives its add()): widened sides, |a - b|, |b|, flags.
        self.buf_a = scratch("compare_a", block, np.float64)
        self.buf_b = scratch("compare_b", block, np.float64)
        self.diff = scratch("compare_diff", block, np.float64)
        self.mag = scratch("compare_mag", block, np.float64)
        self.flags = scratch("compare_flags", block, np.bool_)

    def add(self, blk_a: np.ndarray, blk_b: np.ndarray, start: int = 0) -> None:
        """Fold in one block of the original arrays (1-D, same length, at most ``block`` elements) that begins at flat
        position ``start`` of the tensor (where its tiles are); run it under ``np.errstate(over="ignore",
        invalid="ignore")``: overflowed sums surface as None in the summary."""
        xa = to_float64(blk_a, self.buf_a)
        xb = to_float64(blk_b, self.buf_b)
        m = xa.size
        diff = _subtract(xa, xb, out=self.diff[:m])
        _abs(diff, out=diff)
        top = float(_max(diff))
        keep: np.ndarray | None = None
        sq_error: float | None = None  # sum (a - b)^2, when the tiles' pass gives it
        if top == 0.0:  # equal values: zero errors and ULPs, one side's moments, and comp_pcc's cast is exact
            if self.tiles is not None:
                self.tiles.add(start, None, xb)  # no error: the golden energies alone
            self._equal(xa, blk_a, blk_b)
            return
        if not math.isfinite(top):  # a NaN or ±Inf on a side (or a difference past float64's range)
            keep = self._specials(xa, xb)
            if self.tiles is not None:
                sq_error = self.tiles.add(start, np.where(keep, xa - xb, 0.0), np.where(keep, xb, 0.0))
                self.tiles.exclude(start, ~keep)
            if self.full:
                self._ttmetal_apart(blk_a, xa, xb)
            xa, xb = xa[keep], xb[keep]
            diff = _abs(_subtract(xa, xb, out=self.diff[: xa.size]), out=self.diff[: xa.size])
            top = float(_max(diff)) if diff.size else 0.0
        else:
            if self.tiles is not None:
                sq_error = self.tiles.add(start, diff, xb)
            if not self.tt_exact and self.full:
                self._ttmetal_apart(blk_a, xa, xb)
        self._errors(diff, xb, top, sq_error)
        moments = _PairMoments.centring(xa, xb)  # xa and xb are spent: centred in place
        self.joint.merge(moments)
        if self.ulps is not None:
            self.ulps.add(blk_a, blk_b, keep)
        if self.bitwise:  # only while every value so far is equal: a differing block settles it without a pass
            self.bitwise = top == 0.0 and _same_bytes(blk_a, blk_b)
        if keep is None and self.tt_exact:  # comp_pcc's cast and zeroing change nothing: the joint moments
            self._ttmetal_joint(moments, top == 0.0)

    def _equal(self, xa: np.ndarray, blk_a: np.ndarray, blk_b: np.ndarray) -> None:
        """Fold in a block whose two sides hold equal (finite) values: every error and ULP distance is zero (each value
        is one both dtypes hold, so rounding to the coarser changes neither), and both sides' moments are ``a``'s."""
        m = xa.size
        if self.histogram is not None:
            self.histogram.add_zeros(m)
        if self.ulps is not None:
            self.ulps.add_equal(m)
        side = _centre(xa)
        moments = _PairMoments()
        moments.a, moments.b = side, Moments(side.n, side.mean, side.m2)
        moments.cab = side.m2
        self.joint.merge(moments)
        if self.bitwise:
            self.bitwise = _same_bytes(blk_a, blk_b)
        self._ttmetal_joint(moments, True)

    def _ttmetal_joint(self, moments: _PairMoments, equal: bool) -> None:
        """comp_pcc's state for a block of finite values whose cast to the golden's dtype is exact: the joint
        moments."""
        tt = self.tt
        tt.golden_has_non_nan = tt.calc_has_non_nan = True
        tt.golden_has_nonzero |= moments.b.m2 > 0 or moments.b.mean != 0
        tt.calc_has_nonzero |= moments.a.m2 > 0 or moments.a.mean != 0
        tt.equal &= equal
        self.tt_moments.merge(moments)

    def _specials(self, xa: np.ndarray, xb: np.ndarray) -> np.ndarray:
        """Count a block's NaN and ±Inf mismatches (and allclose's mismatches among them); returns the mask of its
        jointly finite positions."""
        nan_a, nan_b = np.isnan(xa), np.isnan(xb)
        keep = np.isfinite(xa) & np.isfinite(xb)
        self.nan_mismatches += int(np.count_nonzero(nan_a != nan_b))
        inf_pos = np.isinf(xa) | np.isinf(xb)
        self.inf_mismatches += int(np.count_nonzero(inf_pos & (xa != xb)))
        same_special = (nan_a & nan_b) | (inf_pos & (xa == xb))
        self.mismatches += xa.size - int(np.count_nonzero(keep)) - int(np.count_nonzero(same_special))
        return keep

    def _errors(self, diff: np.ndarray, b: np.ndarray, top: float, sq_error: float | None) -> None:
        """Fold in the absolute errors ``diff`` (largest ``top``) of jointly finite positions whose golden values are
        ``b``: their sums (``sq_error``, the sum of their squares, when already known), histogram, allclose mismatches
        and relative errors."""
        k = diff.size
        if k == 0:
            return
        self.max_abs = max(self.max_abs, top)
        self.sum_sq_error += dot(diff, diff) if sq_error is None else sq_error
        if self.histogram is not None:
            self.sum_abs += float(_sum(diff))
            self.histogram.add(diff)
        if top == 0.0:  # every error is zero: no mismatch, every relative error zero
            return
        if top <= self.atol and not self.full:  # no mismatch (tolerances are at least atol), no relative error wanted
            return
        mag_b = _abs(b, out=self.mag[:k])
        if top > self.atol:  # tolerances are at least atol: below it nothing mismatches
            self.mismatches += self._mismatches(diff, mag_b)
        if not self.full:
            return
        if float(_min(mag_b)) < REL_EPS:  # a reduction costs a third of the in-place maximum it mostly spares
            np.maximum(mag_b, REL_EPS, out=mag_b)
        rel = _divide(diff, mag_b, out=mag_b)
        self.max_rel = max(self.max_rel, float(_max(rel)))
        self.sum_rel += float(_sum(rel))

    def _mismatches(self, diff: np.ndarray, mag_b: np.ndarray) -> int:
        """The count of ``diff > atol + rtol * |b|`` (numpy's isclose, in its float64 arithmetic); when few errors pass
        ``atol`` (rounding noise rarely does) the test runs on those alone."""
        k = diff.size
        over = np.greater(diff, self.atol, out=self.flags[:k])
        if np.count_nonzero(over) * 8 <= k:
            where = np.flatnonzero(over)
            return int(np.count_nonzero(diff[where] > self.atol + self.rtol * mag_b[where]))
        tol = np.multiply(mag_b, self.rtol, out=scratch("compare_tol", self.block, np.float64)[:k])
        tol += self.atol
        return int(np.count_nonzero(np.greater(diff, tol, out=self.flags[:k])))

    def _ttmetal_apart(self, blk_a: np.ndarray, xa: np.ndarray, xb: np.ndarray) -> None:
        """tt-metal comp_pcc(golden=b, calculated=a) where it differs from the joint moments: ``a`` cast to b's dtype
        first, NaN/Inf zeroed on both sides (``xa``, ``xb``: the block in float64, not yet filtered or centred)."""
        tt = self.tt
        calc = xa if self.tt_exact else blk_a.astype(self.b_dtype).astype(np.float64)
        golden = xb
        tt.golden_has_non_nan |= not bool(np.isnan(golden).all())
        tt.calc_has_non_nan |= not bool(np.isnan(calc).all())
        tt.golden_has_nonzero |= bool(np.count_nonzero(golden))
        tt.calc_has_nonzero |= bool(np.count_nonzero(calc))
        if self.golden_float:
            golden = np.where(np.isfinite(golden), golden, 0.0)
            calc = np.where(np.isfinite(calc), calc, 0.0)
        tt.equal &= bool(np.array_equal(golden, calc))
        work = scratch("compare_tt", 2 * self.block, np.float64)
        self.tt_moments.merge(_PairMoments.of_block(calc, golden, float(calc.sum()), float(golden.sum()), work))

    def merge(self, other: PairAccumulator) -> None:
        """Fold in an accumulator of the positions that follow this one's."""
        self.joint.merge(other.joint)
        self.tt_moments.merge(other.tt_moments)
        self.tt.merge(other.tt)
        if self.ulps is not None and other.ulps is not None:
            self.ulps.merge(other.ulps)
        self.max_abs = max(self.max_abs, other.max_abs)
        self.max_rel = max(self.max_rel, other.max_rel)
        self.sum_abs += other.sum_abs
        self.sum_rel += other.sum_rel
        self.sum_sq_error += other.sum_sq_error
        if self.histogram is not None and other.histogram is not None:
            self.histogram.merge(other.histogram)
        self.bitwise &= other.bitwise
        self.mismatches += other.mismatches
        self.nan_mismatches += other.nan_mismatches
        self.inf_mismatches += other.inf_mismatches
        if self.tiles is not None and other.tiles is not None:
            self.tiles.merge(other.tiles)

    def summary(self, size: int, pcc_threshold: float, fit_tol: float) -> dict[str, Any]:
        """The metric dict (``Comparison``'s fields but the inputs) of the ``size`` positions folded in (without
        ``full``, the :data:`DISTRIBUTION` fields None)."""
        extra: dict[str, Any] = {}
        if self.histogram is not None:
            p50, p99, p999 = self.histogram.quantiles((0.5, 0.99, 0.999), self.max_abs)
            extra = {"abs_error_p50": p50, "abs_error_p99": p99, "abs_error_p999": p999}
        extra["bitwise_equal"] = self.bitwise
        if self.tiles is not None:
            joint = self.joint
            extra |= self.tiles.summary(joint.b.m2 + joint.n * joint.b.mean * joint.b.mean, joint.n, median=self.full)
        tt = self.tt_moments
        metrics = extra | _summarize(
            size, self.joint, self.tt.result(size, tt.n, tt.a.m2, tt.b.m2, tt.cab), self.ulps, self.ulp_dtype,
            (self.max_abs, self.sum_abs, self.max_rel, self.sum_rel),
            (self.mismatches, self.nan_mismatches, self.inf_mismatches),
            self.rtol, self.atol, pcc_threshold, fit_tol, not self.same_dtype, self.sum_sq_error,
            self.full, self.count_ulps,
        )
        return metrics if self.full else metrics | dict.fromkeys(DISTRIBUTION)


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two blocks of one dtype hold the same bytes (NaN payloads and the sign of zero included)."""
    unsigned = np.dtype(f"<u{a.dtype.itemsize}") if a.dtype.itemsize in (1, 2, 4, 8) else None
    if unsigned is None:
        return a.tobytes() == b.tobytes()
    return bool(np.array_equal(np.ascontiguousarray(a).view(unsigned), np.ascontiguousarray(b).view(unsigned)))


def _compare_same_shape(
    a: np.ndarray, b: np.ndarray, rtol: float, atol: float, pcc_threshold: float, fit_tol: float,
    geometry: TileGeometry, full: bool = True, ulps: bool = True,
) -> dict[str, Any]:
    """The metric vector of two arrays of one shape, streamed block by block (large pairs on all cores); ``full``
    and ``ulps`` as :class:`PairAccumulator` takes them."""
    size = a.size
    block = max(1, min(size, BLOCK_ELEMENTS))

    def run(span: tuple[int, int]) -> PairAccumulator:
        acc = PairAccumulator(a.dtype, b.dtype, rtol, atol, block, geometry, full, ulps)
        start, stop = span
        with np.errstate(over="ignore", invalid="ignore"):  # per thread: overflows surface as None later
            blocks = zip(flat_blocks(a, block, start, stop), flat_blocks(b, block, start, stop))
            for first, (blk_a, blk_b) in zip(range(start, stop, block), blocks):
                acc.add(blk_a, blk_b, first)
        return acc

    total, *rest = parallel_map(run, split_range(size, block))
    for acc in rest:
        total.merge(acc)
    return total.summary(size, pcc_threshold, fit_tol)


def _clip_unit(value: float) -> float:
    """Clamp a correlation-like ratio to [-1, 1] (rounding can overshoot by an ulp); NaN stays NaN."""
    return value if math.isnan(value) else min(1.0, max(-1.0, value))


def _summarize(
    size: int,
    joint: _PairMoments,
    pcc_ttmetal: float,
    ulps: UlpCounter | None,
    ulp_dtype: np.dtype | None,
    errors: tuple[float, float, float, float],
    counts: tuple[int, int, int],
    rtol: float,
    atol: float,
    pcc_threshold: float,
    fit_tol: float,
    dtypes_differ: bool,
    sum_sq_error: float,
    full: bool = True,
    counted_ulps: bool = True,
) -> dict[str, Any]:
    """Turn the streamed sums into the metric dict, its flags and its notes (those about fields left out, without
    ``full`` or ``counted_ulps``, not said)."""
    max_abs, sum_abs, max_rel, sum_rel = errors
    mismatches, nan_mismatches, inf_mismatches = counts
    n = joint.n
    notes: list[str] = []
    if n < size:
        notes.append(
            f"{size - n} of {size} positions hold NaN or ±Inf on a side: pcc, cosine, errors and ULPs cover "
            f"the other {n}; pcc_ttmetal counts them as 0, as tt-metal does"
        )

    pcc: float | None = None
    constant = n >= 1 and (joint.a.m2 == 0 or joint.b.m2 == 0)
    if constant:
        sides = [name for name, m2 in (("a", joint.a.m2), ("b", joint.b.m2)) if m2 == 0]
        notes.append(f"pcc undefined: {' and '.join(sides)} constant; passed requires allclose")
    elif n < 2:
        notes.append("pcc undefined: fewer than two jointly finite positions; passed requires allclose")
    else:
        pcc = _clip_unit(joint.cab / (math.sqrt(joint.a.m2) * math.sqrt(joint.b.m2)))

    sum_aa = joint.a.m2 + n * joint.a.mean * joint.a.mean
    sum_bb = joint.b.m2 + n * joint.b.mean * joint.b.mean
    sum_ab = joint.cab + n * joint.a.mean * joint.b.mean
    cosine = _clip_unit(sum_ab / (math.sqrt(sum_aa) * math.sqrt(sum_bb))) if sum_aa > 0 and sum_bb > 0 else None

    if ulps is None and not counted_ulps:
        ulp_name = dtype_name(ulp_dtype) if ulp_dtype is not None else "integer"
        ulp_max: int | None = None
        ulp_mean: float | None = None
    elif ulps is None:
        ulp_name = "integer"
        ulp_max = int(max_abs) if n else None
        ulp_mean = sum_abs / n if n and full else None  # the mean absolute error's sum: a distribution figure
    else:
        ulp_name = dtype_name(ulp_dtype) if ulp_dtype is not None else "integer"
        ulp_max = ulps.max if ulps.count else None
        ulp_mean = ulps.total / ulps.count if ulps.count else None
        if dtypes_differ:
            notes.append(f"ULPs are counted in {ulp_name} after rounding both sides to it")
        if ulps.count < n:
            notes.append(f"{n - ulps.count} finite positions overflow {ulp_name} and are left out of the ULPs")
    if dtypes_differ and full:
        notes.append("pcc_ttmetal casts a to b's dtype first, as tt-metal casts calculated to golden's")

    sqnr = 10.0 * math.log10(sum_bb / sum_sq_error) if sum_bb > 0 and sum_sq_error > 0 else None
    fit_scale = fit_offset = None
    scale_or_offset = False
    if pcc is not None:
        fit_scale = math.copysign(math.sqrt(joint.b.m2) / math.sqrt(joint.a.m2), joint.cab)
        fit_offset = joint.b.mean - fit_scale * joint.a.mean
        if pcc >= pcc_threshold and pcc > 0:
            spread = max(math.sqrt(sum_aa / n), math.sqrt(sum_bb / n))
            scale_or_offset, note = fit_check(fit_scale, fit_offset, pcc, fit_tol, spread, atol)
            notes.extend([note] if note else [])

    nonfinite_mismatch = nan_mismatches + inf_mismatches > 0
    if nonfinite_mismatch:
        passed = False
    elif pcc is None:
        passed = mismatches == 0
    else:
        passed = pcc >= pcc_threshold and not scale_or_offset
    metrics = {
        "count": size,
        "finite_count": n,
        "pcc": pcc,
        "pcc_ttmetal": pcc_ttmetal,
        "cosine": cosine,
        "max_abs_error": max_abs if n else None,
        "mean_abs_error": sum_abs / n if n else None,
        "max_rel_error": max_rel if n else None,
        "mean_rel_error": sum_rel / n if n else None,
        "sqnr_db": sqnr,
        "ulp_dtype": ulp_name,
        "ulp_max": ulp_max,
        "ulp_mean": ulp_mean,
        "allclose_mismatches": mismatches,
        "nan_mismatches": nan_mismatches,
        "inf_mismatches": inf_mismatches,
        "fit_scale": fit_scale,
        "fit_offset": fit_offset,
        "constant_input": constant,
        "scale_or_offset_error": scale_or_offset,
        "nonfinite_mismatch": nonfinite_mismatch,
        "shape_mismatch": False,
        "passed": passed,
        "notes": tuple(notes),
    }
    return {key: _finite_or_none(value) for key, value in metrics.items()}
