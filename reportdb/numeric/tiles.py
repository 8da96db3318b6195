"""Per-tile error energies of a comparison, accumulated in the same streamed pass as the metric vector, so a verdict
can see one wrong tile that the whole-tensor figures average away.

Tiles are those of the tensor's last two dims (32x32 unless told; ``(lead, tile row, tile col)`` with the leading dims
flattened), the same grid as ``reportdb locate``'s. Where a tile would hold fewer than :data:`MIN_TILE_VALUES` values
on average -- a 1-D tensor or a single row (a device holds it in row 0 of its tiles, 32 values a tile), matrices of
fewer than 8 rows or columns, or matrices far smaller than a tile -- the local block is a run of ``h * w``
consecutive values instead (a tile's worth; ``tile_shape`` then reads ``(1, h * w)`` and ``worst_tile`` is
``(0, 0, k)``: values ``k*h*w`` to ``(k+1)*h*w - 1`` of the flattened tensor). The error energy of 32 values is too
noisy to judge alone: bfloat16 rounding alone puts the worst of a million 32-value tiles 5 dB below the tensor's
SQNR, against 1 dB for 1024-value ones (32Mi Gaussian values, benchmarks/NOTES.md); and the per-tile arrays stay at
most a 256th of the element count.

Per tile ``t`` the pass sums, over the jointly finite positions, the error energy ``E_err(t) = sum (a - b)^2`` and the
golden energy ``E_b(t) = sum b^2``. ``tile_sqnr_db`` is the minimum over tiles with an error of
``10 log10(max(E_b(t), FLOOR * n_t * E_b / N) / E_err(t))`` (``n_t`` the tile's jointly finite positions, ``E_b / N``
the tensor's mean golden energy), ``worst_tile`` that tile, ``tile_sqnr_p50`` the median tile's (tiles without error
count as infinitely good; None when that is the median). :data:`FLOOR` is 0.1: each tile is judged against at least a
tenth of its share of the tensor's energy, so a near-zero tile (relu zeros, softmax tails, a matmul tile whose sums
cancel) does not fail by the absolute error it may carry, while a fault on a tile of less than the mean energy (exp
and softmax outputs are heavy-tailed) still shows. Measured (benchmarks/NOTES.md): the errors of correct device
results are mostly relative (rounding, fidelity truncation), every op family's worst tile moves by at most 0.7 dB
between FLOOR 1 and 0; a LoFi matmul tile whose exact sums cancel to zero is -18 dB against its own energy, 27.4 dB at
FLOOR 0.1, 31 dB at 0.25 and above; x1.1 of a quarter-energy tile reads 20 dB at FLOOR <= 0.25 but 25.8 dB at 1,
and x1.1 of exp and softmax tiles 19.9-20.1 dB at 0.1 against 27-28 dB at 1.

Cost: a block's runs of ``w`` consecutive elements of one row belong to one tile, so the squared sums of those runs
come from one ``einsum`` over the block reshaped to runs (``np.add.reduceat`` where rows are not a multiple of ``w``
or a block starts mid-run), and ``np.bincount`` adds the run sums into the tiles.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import ComparisonError

#: Each tile's reference energy is at least this fraction of its share of the tensor's energy (module docstring).
FLOOR = 0.1
#: Below this many values a tile on average, tiles of the last two dims give way to runs of consecutive values.
MIN_TILE_VALUES = 256
#: The tile shape when none is given: ttnn's default tile.
DEFAULT_TILE = (32, 32)


class TileGeometry:
    """Where each flat (C-order) position of a tensor of ``shape`` falls among its tiles of ``tile`` (h, w)."""

    def __init__(self, shape: tuple[int, ...], tile: tuple[int, int] = DEFAULT_TILE) -> None:
        th, tw = int(tile[0]), int(tile[1])
        if th < 1 or tw < 1:
            raise ComparisonError(f"a tile is at least 1x1, not {tile}: give (height, width) >= 1, like (32, 32)")
        size = math.prod(shape)
        height, width = (shape[-2], shape[-1]) if len(shape) >= 2 else (1, shape[0] if shape else 1)
        lead = math.prod(shape[:-2]) if len(shape) >= 2 else 1
        tiles = lead * -(-height // th) * -(-width // tw)
        if size and tiles * MIN_TILE_VALUES > size:  # vectors, thin or tiny matrices: runs of h*w values
            lead, height, width, th, tw = 1, 1, size, 1, th * tw
        self.tile = (th, tw)
        self.lead, self.height, self.width = lead, height, width
        self.rows, self.cols = -(-height // th), -(-width // tw)
        self.count = lead * self.rows * self.cols if size else 0
        self._run_table: np.ndarray | None = None

    def run_table(self) -> np.ndarray:
        """The tile of every run of ``w`` elements from position 0, where rows are a whole number of runs (or the
        tensor is one row): one broadcast sum of each row's first tile and the run's column, built once (int32 or
        int64, one entry per ``w`` elements), so an aligned block's runs take a slice of it."""
        if self._run_table is None:
            th, _ = self.tile
            index = np.dtype(np.int32 if self.count < 2**31 else np.int64)
            lead: np.ndarray = np.arange(self.lead, dtype=index)
            height: np.ndarray = np.arange(self.height, dtype=index)
            first = (lead[:, None] * self.rows + height[None, :] // th) * self.cols
            cols: np.ndarray = np.arange(self.cols, dtype=index)
            self._run_table = (first.reshape(-1, 1) + cols[None, :]).reshape(-1)
        return self._run_table

    def tile_of(self, positions: np.ndarray) -> np.ndarray:
        """The flat tile index of each flat position in ``positions`` (int64)."""
        row, col = np.divmod(positions, self.width)
        lead, r = np.divmod(row, self.height)
        return (lead * self.rows + r // self.tile[0]) * self.cols + col // self.tile[1]

    def run_starts(self, start: int, m: int) -> np.ndarray:
        """The starts (relative to ``start``) of the runs of ``[start, start + m)`` that each lie in one tile: the
        block's first position, and every position where a tile column or a row begins."""
        w, tw = self.width, self.tile[1]
        first_row, last_row = start // w, (start + m - 1) // w
        offsets = np.arange(0, w, tw, dtype=np.int64)
        starts = (np.arange(first_row, last_row + 1, dtype=np.int64)[:, None] * w + offsets[None, :]).reshape(-1)
        starts = starts[(starts > start) & (starts < start + m)] - start
        return np.concatenate((np.zeros(1, np.int64), starts))

    def aligned(self, start: int) -> bool:
        """Whether runs of ``w`` elements from ``start`` never cross a row's end but at a run's end."""
        return start % self.tile[1] == 0 and (self.width % self.tile[1] == 0 or self.lead * self.height == 1)

    def sizes(self) -> np.ndarray | float:
        """The element count of each tile (edge tiles of a size not a multiple of the tile's hold fewer); one number
        when every tile is whole."""
        th, tw = self.tile
        if self.height % th == 0 and self.width % tw == 0:
            return float(th * tw)
        heights = np.minimum(th, self.height - np.arange(self.rows) * th)
        widths = np.minimum(tw, self.width - np.arange(self.cols) * tw)
        return np.tile(np.outer(heights, widths).reshape(-1), self.lead).astype(np.float64)

    def index(self, flat: int) -> tuple[int, int, int]:
        """``(flattened leading-dims index, tile row, tile col)`` of the flat tile index ``flat``."""
        lead, rest = divmod(flat, self.rows * self.cols)
        return lead, *divmod(rest, self.cols)


class TileEnergies:
    """The running per-tile error and golden energies of one comparison (and, where a side held NaN/Inf, the
    positions left out per tile); accumulators of disjoint positions merge by adding."""

    def __init__(self, geometry: TileGeometry) -> None:
        self.geometry = geometry
        self.error = np.zeros(geometry.count)
        self.golden = np.zeros(geometry.count)
        self.excluded: np.ndarray | None = None

    def _runs(self, start: int, values: np.ndarray) -> np.ndarray:
        """The squared sums of ``values`` (float64, the block at flat ``start``) by run (:meth:`_run_tiles`'s runs)."""
        geo, m = self.geometry, values.size
        tw = geo.tile[1]
        if geo.aligned(start):
            whole = m - m % tw
            sums = np.einsum("ij,ij->i", values[:whole].reshape(-1, tw), values[:whole].reshape(-1, tw))
            if whole < m:
                tail = values[whole:]
                sums = np.append(sums, float(np.einsum("i,i->", tail, tail)))
            return sums
        return np.add.reduceat(values * values, geo.run_starts(start, m))

    def _run_tiles(self, start: int, m: int) -> np.ndarray:
        """The tile of each run of the block of ``m`` elements at flat ``start``: runs of ``w`` elements where the
        block is aligned to them, else the runs :meth:`TileGeometry.run_starts` gives."""
        geo = self.geometry
        if geo.aligned(start):
            tw = geo.tile[1]
            return geo.run_table()[start // tw : -(-(start + m) // tw)]
        return geo.tile_of(geo.run_starts(start, m) + start)

    def _add_runs(self, into: np.ndarray, tiles: np.ndarray, sums: np.ndarray) -> None:
        """Add run sums into their tiles, touching only the range of tiles the block covers (a block spans a tile row
        or two, so the work stays per block, not per tensor)."""
        geo = self.geometry
        first, last = int(tiles[0]), int(tiles[-1])  # C-order runs go from tile row band to band, never back
        if geo.lead * geo.height == 1:  # one row: its runs' tiles only grow
            low, high = first, last
        else:
            low, high = first - first % geo.cols, last - last % geo.cols + geo.cols - 1
        into[low : high + 1] += np.bincount(tiles - low, weights=sums, minlength=high - low + 1)

    def add(self, start: int, error: np.ndarray | None, golden: np.ndarray) -> float:
        """Fold in one block at flat position ``start``: its errors ``a - b`` (or ``|a - b|``; None: all zero) and
        golden values ``b``, both float64, zero where a position is left out. Returns the block's error energy
        ``sum (a - b)^2`` (its run sums' total, so the caller needs no pass of its own)."""
        tiles = self._run_tiles(start, golden.size)
        self._add_runs(self.golden, tiles, self._runs(start, golden))
        if error is None:
            return 0.0
        sums = self._runs(start, error)
        self._add_runs(self.error, tiles, sums)
        return float(sums.sum())

    def exclude(self, start: int, left_out: np.ndarray) -> None:
        """Count the positions of the block at ``start`` that ``left_out`` (bool) marks as not jointly finite."""
        where = np.flatnonzero(left_out)
        if where.size:
            if self.excluded is None:
                self.excluded = np.zeros(self.geometry.count)
            self.excluded += np.bincount(self.geometry.tile_of(where + start), minlength=self.geometry.count)

    def merge(self, other: TileEnergies) -> None:
        """Fold in the energies of other positions of the same tensor."""
        self.error += other.error
        self.golden += other.golden
        if other.excluded is not None:
            self.excluded = other.excluded.copy() if self.excluded is None else self.excluded + other.excluded

    def summary(self, golden_energy: float, finite: int, median: bool = True) -> dict[str, Any]:
        """``tile_shape``, ``tile_sqnr_db``, ``worst_tile`` and ``tile_sqnr_p50`` (module docstring) given the whole
        tensor's golden energy over its ``finite`` jointly finite positions (the median left None unless ``median``:
        no verdict reads it). The ratios are ranked before any logarithm is taken: a few passes over the tiles,
        however many there are."""
        out: dict[str, Any] = {"tile_shape": self.geometry.tile, "tile_sqnr_db": None, "worst_tile": None,
                               "tile_sqnr_p50": None}
        error = self.error
        if not finite or not math.isfinite(golden_energy) or not error.size or not float(error.max()) > 0:
            return out
        if golden_energy <= 0:  # a zero golden: no SQNR, the worst tile is the one with the most error
            out["worst_tile"] = self.geometry.index(int(np.argmax(error)))
            return out
        sizes = self.geometry.sizes() if self.excluded is None else self.geometry.sizes() - self.excluded
        reference = np.maximum(self.golden, np.multiply(sizes, FLOOR * golden_energy / finite))
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.divide(reference, error, out=reference)  # +inf where a tile has no error
        if self.excluded is not None:  # a tile of only left-out positions has neither energy: no error either
            ratio[np.isnan(ratio)] = np.inf
        worst = int(np.argmin(ratio))
        out["tile_sqnr_db"] = _finite(_db(float(ratio[worst])))
        out["worst_tile"] = self.geometry.index(worst)
        if not median:
            return out
        low, high = (ratio.size - 1) // 2, ratio.size // 2
        middle = np.partition(ratio, [low, high])[[low, high]]
        out["tile_sqnr_p50"] = _finite((_db(float(middle[0])) + _db(float(middle[1]))) / 2)
        return out


def _db(ratio: float) -> float:
    """``10 log10(ratio)``, +inf for an infinite ratio (a tile without error)."""
    return 10.0 * math.log10(ratio) if math.isfinite(ratio) else math.inf


def _finite(value: float) -> float | None:
    """``value``, None when it is not finite (so the metric vector stays JSON)."""
    return value if math.isfinite(value) else None


def tile_geometry(shape: tuple[int, ...], tile: tuple[int, int]) -> TileGeometry:
    """The tiles of a tensor of ``shape``; ComparisonError when ``tile`` is not two whole numbers >= 1."""
    if not (isinstance(tile, (tuple, list)) and len(tile) == 2
            and all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) and t >= 1 for t in tile)):
        raise ComparisonError(f"tile must be (height, width), two whole numbers >= 1, like (32, 32); got {tile!r}")
    return TileGeometry(tuple(int(s) for s in shape), (int(tile[0]), int(tile[1])))
