"""Planted faults and the device-like results they are planted in, shared by ``tests/test_calibration.py`` and
``benchmarks/bench_calibration.py``.

A *case* is one op family's output computed twice from the same inputs: the golden (float64 math on the values the
device's inputs hold, as replay computes it) and what a correct device gives (``reportdb.numeric.fidelity``: math
fidelity, tile-ordered accumulation, bfloat16 and block-float packing), plus the device's output for other inputs (a
stale shard's "last run"). A *fault* turns a correct device result into a wrong one the way real bugs do: one tile,
one face, one core's shard, one device's shard.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from reportdb.numeric import fidelity

TILE = 32
CORES = 8  # a height-sharded tensor's cores
DEVICES = 8  # a 1x8 mesh sharding the last dim


@dataclass(frozen=True)
class Case:
    """One device-like result: its family and label, the ttnn op and output dtype a policy judges it by, the golden,
    the correct device result and the device's result on other inputs (a stale run)."""

    family: str
    label: str
    op: str
    dtype: str
    golden: np.ndarray
    device: np.ndarray
    stale: np.ndarray


# --- faults: each returns a wrong copy of ``device`` (``stale`` is the same op's output on other inputs), or None
# when the tensor is too small to hold that fault.


def _grid(x: np.ndarray) -> tuple[int, int, int]:
    """(matrices, tile rows, tile cols) of ``x``'s last two dims (whole tiles only)."""
    return int(np.prod(x.shape[:-2], dtype=np.int64)), x.shape[-2] // TILE, x.shape[-1] // TILE


def _target(x: np.ndarray) -> tuple[int, int, int]:
    """The tile a tile fault hits: the middle one (matrix, tile row, tile col), away from every edge of the grid."""
    lead, rows, cols = _grid(x)
    return lead // 2, rows // 2, cols // 2


def _tile(x: np.ndarray, where: tuple[int, int, int]) -> np.ndarray:
    """A writable view of one 32x32 tile of ``x`` (3-D view of its matrices)."""
    m, r, c = where
    return x.reshape(-1, x.shape[-2], x.shape[-1])[m, r * TILE : (r + 1) * TILE, c * TILE : (c + 1) * TILE]


def _on_tile(change: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray, np.ndarray], np.ndarray | None]:
    """A fault that replaces the target tile by ``change`` of it."""

    def fault(device: np.ndarray, stale: np.ndarray) -> np.ndarray | None:
        out = device.copy()
        view = _tile(out, _target(out))
        view[...] = change(view.copy())
        return out

    return fault


def fill_from_neighbour(device: np.ndarray, stale: np.ndarray) -> np.ndarray | None:
    """The target tile holds the next tile's values (the tile to its right, else below, else the next matrix's)."""
    lead, rows, cols = _grid(device)
    m, r, c = _target(device)
    if cols > 1:
        source = (m, r, (c + 1) % cols)
    elif rows > 1:
        source = (m, (r + 1) % rows, c)
    elif lead > 1:
        source = ((m + 1) % lead, r, c)
    else:
        return None
    out = device.copy()
    _tile(out, (m, r, c))[...] = _tile(device, source)
    return out


def swap_faces(device: np.ndarray, stale: np.ndarray) -> np.ndarray | None:
    """The target tile's top-left 16x16 face swapped with its right-hand neighbour face."""
    out = device.copy()
    view = _tile(out, _target(out))
    left = view[:16, :16].copy()
    view[:16, :16] = view[:16, 16:]
    view[:16, 16:] = left
    return out


def _core_rows(x: np.ndarray) -> tuple[np.ndarray, int] | None:
    """``x`` as (rows, last dim) and the rows each of :data:`CORES` cores holds, when they split evenly."""
    rows = x.reshape(-1, x.shape[-1])
    if rows.shape[0] % CORES or rows.shape[0] < CORES:
        return None
    return rows, rows.shape[0] // CORES


def _on_core(
    change: Callable[[np.ndarray, int], None],
) -> Callable[[np.ndarray, np.ndarray], np.ndarray | None]:
    """A fault on a height-sharded tensor: ``change(rows, per)`` rewrites core 3's (of 8) shard of ``rows`` in place."""

    def fault(device: np.ndarray, stale: np.ndarray) -> np.ndarray | None:
        out = device.copy()
        split = _core_rows(out)
        if split is None:
            return None
        change(*split)
        return out

    return fault


def _scale_core(rows: np.ndarray, per: int) -> None:
    """Core 3 wrote its shard of rows x1.5."""
    rows[3 * per : 4 * per] *= 1.5


def _copy_core(rows: np.ndarray, per: int) -> None:
    """Core 3 holds core 4's rows."""
    rows[3 * per : 4 * per] = rows[4 * per : 5 * per].copy()


core_scaled = _on_core(_scale_core)
core_wrong_rows = _on_core(_copy_core)


def device_stale(device: np.ndarray, stale: np.ndarray) -> np.ndarray | None:
    """A 1x8 mesh sharding the last dim whose device 5 kept last run's values (the op on other inputs)."""
    width = device.shape[-1]
    if width % DEVICES:
        return None
    per = width // DEVICES
    out = device.copy()
    out[..., 5 * per : 6 * per] = stale[..., 5 * per : 6 * per]
    return out


#: Every fault, by name. ``x1.1`` is only expected to show where the dtype's rounding is finer than 10%.
FAULTS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray | None]] = {
    "tile sign flipped": _on_tile(lambda t: -t),
    "tile x1.5": _on_tile(lambda t: t * 1.5),
    "tile x1.1": _on_tile(lambda t: t * 1.1),
    "tile rows reversed": _on_tile(lambda t: t[::-1, :]),
    "tile cols reversed": _on_tile(lambda t: t[:, ::-1]),
    "face swapped": swap_faces,
    "tile zeroed": _on_tile(np.zeros_like),
    "tile from another": fill_from_neighbour,
    "core 3 x1.5": core_scaled,
    "core 3 has core 4's rows": core_wrong_rows,
    "device 5 stale": device_stale,
}


# --- device-like results: each builder gives (golden, device) for one shape from a random generator.

Builder = Callable[[tuple[int, ...], np.random.Generator], "tuple[np.ndarray, np.ndarray]"]


def _bf16_normal(rng: np.random.Generator, shape: tuple[int, ...], scale: float = 1.0) -> np.ndarray:
    """Normal values already at bfloat16 precision (what a device's bfloat16 input holds), as float32."""
    return fidelity.to_bfloat16(rng.standard_normal(shape, dtype=np.float32) * np.float32(scale))


def matmul_builder(k: int, operands: str, fid: str, dest: str, out: str = "BFLOAT16") -> Builder:
    """A (..., M, K) @ (K, N) matmul whose operands are held in ``operands``, computed at ``fid`` into ``dest``."""

    def build(shape: tuple[int, ...], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        a = fidelity.round_to(_bf16_normal(rng, shape[:-1] + (k,)), operands)
        b = fidelity.round_to(_bf16_normal(rng, (k, shape[-1]), 1.0 / np.sqrt(k)), operands)
        golden = np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)
        return golden, fidelity.matmul(a, b, fid, dest=dest, out_dtype=out)

    return build


def eltwise_builder(op: str, fid: str = "HiFi4") -> Builder:
    """An element-wise op on bfloat16 inputs, computed exactly (the FPU's multiply at ``fid``) and rounded to bf16."""
    unary: dict[str, Callable[[np.ndarray], np.ndarray]] = {
        "silu": lambda x: x / (1 + np.exp(-x)),
        "exp": np.exp,
        "gelu": lambda x: 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x**3))),
        "relu": lambda x: np.maximum(x, 0),
        "reciprocal": lambda x: 1 / x,
    }

    def build(shape: tuple[int, ...], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        x = _bf16_normal(rng, shape, 2.0)
        if op in ("add", "multiply"):
            y = _bf16_normal(rng, shape)
            exact = x.astype(np.float64) + y if op == "add" else x.astype(np.float64) * y
            device = fidelity.to_bfloat16(exact) if op == "add" else fidelity.multiply(x, y, fid)
            return exact.astype(np.float32), device
        if op == "reciprocal":
            x = np.where(np.abs(x) < 0.25, np.float32(0.25), x)  # away from the pole, as a model's inputs are
        exact = unary[op](x.astype(np.float64))
        return exact.astype(np.float32), fidelity.to_bfloat16(exact)

    return build


def reduce_builder(op: str, dest: str, terms: int = 16) -> Builder:
    """Sum or mean over a leading dim of ``terms`` tiles, added tile by tile into a ``dest`` accumulator."""

    def build(shape: tuple[int, ...], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        x = _bf16_normal(rng, (terms,) + shape)
        acc = np.zeros(shape, dtype=np.float32)
        for term in x:
            acc = acc + term
            if dest == "BFLOAT16":
                acc = fidelity.to_bfloat16(acc)
        exact = x.astype(np.float64).sum(axis=0)
        if op == "mean":
            exact /= terms
            acc = fidelity.multiply(acc, np.float32(1.0 / terms))
        return exact.astype(np.float32), fidelity.to_bfloat16(acc)

    return build


def norm_builder(op: str) -> Builder:
    """Layernorm, rmsnorm or softmax over the last dim with bfloat16 intermediates (sums in float32), bf16 output."""
    bf = fidelity.to_bfloat16

    def build(shape: tuple[int, ...], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        x = _bf16_normal(rng, shape, 2.0)
        x64 = x.astype(np.float64)
        width = np.float32(shape[-1])
        if op == "softmax":
            e64 = np.exp(x64 - x64.max(axis=-1, keepdims=True))
            exact = e64 / e64.sum(axis=-1, keepdims=True)
            e = bf(np.exp(x - x.max(axis=-1, keepdims=True)))
            device = bf(e * bf(1 / e.sum(axis=-1, keepdims=True)))
        elif op == "layer_norm":
            c64 = x64 - x64.mean(axis=-1, keepdims=True)
            exact = c64 / np.sqrt((c64**2).mean(axis=-1, keepdims=True) + 1e-5)
            c = bf(x - bf(x.sum(axis=-1, keepdims=True) / width))
            device = bf(c * bf(1 / np.sqrt(bf((c * c).sum(axis=-1, keepdims=True) / width) + 1e-5)))
        else:
            exact = x64 / np.sqrt((x64**2).mean(axis=-1, keepdims=True) + 1e-5)
            device = bf(x * bf(1 / np.sqrt(bf((x * x).sum(axis=-1, keepdims=True) / width) + 1e-5)))
        return exact.astype(np.float32), device.astype(np.float32)

    return build


def movement_builder(op: str) -> Builder:
    """Data movement (transpose of the last two dims, or a copy such as reshape/tilize): exact on a device."""

    def build(shape: tuple[int, ...], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        if op == "transpose":
            x = _bf16_normal(rng, shape[:-2] + (shape[-1], shape[-2]))
            out = np.ascontiguousarray(np.swapaxes(x, -1, -2))
        else:
            out = _bf16_normal(rng, shape)
        return out, out.copy()

    return build


def typecast_builder(out: str) -> Builder:
    """A float32 tensor cast to ``out`` (bfloat16 or a block float), judged against the float32 values it came from."""

    def build(shape: tuple[int, ...], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        x = rng.standard_normal(shape, dtype=np.float32)
        return x, fidelity.round_to(x, out)

    return build


def make_case(family: str, label: str, op: str, dtype: str, build: Builder, shape: tuple[int, ...], seed: int) -> Case:
    """Build a case: golden and device from one seed, the stale run from the next."""
    golden, device = build(shape, np.random.default_rng(seed))
    _, stale = build(shape, np.random.default_rng(seed + 1))
    return Case(family, label, op, dtype, golden, device, stale)


def families() -> list[tuple[str, str, str, str, Builder]]:
    """Every (family, label, ttnn op, output dtype, builder) the calibration covers."""
    out: list[tuple[str, str, str, str, Builder]] = []
    for operands in ("BFLOAT16", "BFLOAT8_B", "BFLOAT4_B"):
        for fid in fidelity.FIDELITY_PHASES:
            for dest in ("FLOAT32", "BFLOAT16"):
                label = f"{operands} in, {fid}, {dest} dest"
                out.append(("matmul", label, "ttnn.linear", "BFLOAT16", matmul_builder(256, operands, fid, dest)))
    out.append(("matmul", "BFLOAT8_B in/out, LoFi", "ttnn.matmul", "BFLOAT8_B",
                matmul_builder(256, "BFLOAT8_B", "LoFi", "FLOAT32", "BFLOAT8_B")))
    out.append(("matmul", "BFLOAT4_B in/out, LoFi", "ttnn.matmul", "BFLOAT4_B",
                matmul_builder(256, "BFLOAT4_B", "LoFi", "FLOAT32", "BFLOAT4_B")))
    for op in ("add", "silu", "exp", "gelu", "relu", "reciprocal"):
        out.append(("eltwise", op, f"ttnn.{op}", "BFLOAT16", eltwise_builder(op)))
    for fid in ("LoFi", "HiFi2", "HiFi4"):
        out.append(("eltwise", f"multiply {fid}", "ttnn.multiply", "BFLOAT16", eltwise_builder("multiply", fid)))
    for op in ("sum", "mean"):
        for dest in ("FLOAT32", "BFLOAT16"):
            out.append(("reduction", f"{op}, {dest} dest", f"ttnn.{op}", "BFLOAT16", reduce_builder(op, dest)))
    for op in ("layer_norm", "rms_norm", "softmax"):
        out.append(("normalization", op, f"ttnn.{op}", "BFLOAT16", norm_builder(op)))
    for op in ("transpose", "reshape"):
        out.append(("data movement", op, f"ttnn.{op}", "BFLOAT16", movement_builder(op)))
    for dtype in ("BFLOAT16", "BFLOAT8_B", "BFLOAT4_B"):
        out.append(("typecast", f"FLOAT32 -> {dtype}", "ttnn.typecast", dtype, typecast_builder(dtype)))
    return out


def expected_to_show(fault: str, dtype: str) -> bool:
    """Whether a verdict must catch ``fault`` in a ``dtype`` output: x1.1 (a 10% change of one tile, 20 dB) hides
    under BFLOAT4_B's own rounding (about 18 dB), every other fault must show."""
    return not (fault == "tile x1.1" and dtype == "BFLOAT4_B")


def tiles_hit(fault: str, shape: tuple[int, ...]) -> set[tuple[int, int, int]]:
    """The tiles (matrix, tile row, tile col) ``fault`` changes in a tensor of ``shape``, as a verdict names them."""
    lead, rows, cols = int(np.prod(shape[:-2], dtype=np.int64)), shape[-2] // TILE, shape[-1] // TILE
    grid = {(m, r, c) for m in range(lead) for r in range(rows) for c in range(cols)}

    def holds(first: int, per: int, shard: int) -> bool:
        """Whether a tile whose rows (or columns) start at ``first`` reaches into shard ``shard`` of ``per`` each."""
        return first // per <= shard <= (first + TILE - 1) // per

    if fault.startswith("core"):  # core 3's rows, counted over every matrix's rows in order
        per = lead * shape[-2] // CORES
        return {(m, r, c) for m, r, c in grid if holds(m * shape[-2] + r * TILE, per, 3)}
    if fault.startswith("device"):  # device 5's columns
        return {(m, r, c) for m, r, c in grid if holds(c * TILE, shape[-1] // DEVICES, 5)}
    return {(lead // 2, rows // 2, cols // 2)}
