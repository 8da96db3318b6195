"""Tensor files written by a real ttnn wheel, with the values ttnn itself reads back from them.

Run with the python of a venv that has ttnn installed (make_all.py does):

    python ttnn_tensors.py OUT

ttnn 0.60-0.62 write the legacy versioned ``.bin`` stream (version 5); 0.63 and later write
``.tensorbin`` (0.81 needs ``TT_METAL_MOCK_CLUSTER_DESC_PATH`` to tilize and pack block floats with no
device). Writes ``OUT/files/<name>.<ext>``, ``OUT/expected/<name>.npy`` (logical shape; bfloat16 and
block floats widened to float32 exactly; ``<name>.shard<i>.npy`` per device of a multi-device file)
and ``OUT/manifest.json``. Shapes are fixed and small; values come from a seeded generator.
"""

from __future__ import annotations

import argparse
import json
import pathlib
from importlib.metadata import version

import numpy as np
import ttnn

VERSION = version("ttnn")
TENSORBIN = tuple(int(p) for p in VERSION.split(".")[:2]) >= (0, 63)
EXT = "tensorbin" if TENSORBIN else "bin"
INT_RANGES = {"uint8": (0, 255), "uint16": (0, 65535), "uint32": (0, 2**32 - 1), "int32": (-(2**31), 2**31 - 1)}
NUMPY_TYPES = {"uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "int32": np.int32}
BLOCK_FLOATS = ("bfloat8_b", "bfloat4_b")

# Two files per dtype and layout: the first tile-aligned, the second not (padding in TILE layout).
# The .bin writer of 0.62 takes rank-4 shapes only; .tensorbin files cover ranks 1-5.
BIN_SHAPES = ([1, 1, 32, 64], [2, 3, 13, 21])
TENSORBIN_SHAPES = (
    ([64, 32], [37]),
    ([2, 32, 32], [3, 1, 2, 19, 45]),
    ([1, 2, 32, 64], [5, 9]),
    ([2, 1, 1, 32, 32], [2, 3, 41]),
)


def sample(rng: np.random.Generator, dtype: str, shape: list[int], specials: bool, scale: float | None = None) -> np.ndarray:
    """Values for one tensor: the full range for integers; normal values of ``scale`` (else a random power
    of ten) for floats, with a zero and a negative zero (and inf/-inf/nan when ``specials``)."""
    n = int(np.prod(shape))
    if dtype in INT_RANGES:
        lo, hi = INT_RANGES[dtype]
        return rng.integers(lo, hi, size=n, dtype=np.int64, endpoint=True).reshape(shape)
    values = rng.standard_normal(n) * (scale if scale is not None else 10.0 ** int(rng.integers(-2, 3)))
    values[: min(n, 2)] = [0.0, -0.0][: min(n, 2)]
    if specials and n >= 5:
        values[2:5] = [np.inf, -np.inf, np.nan]
    return values.reshape(shape)


def make(rng: np.random.Generator, dtype: str, layout: str, shape: list[int], *, specials: bool = False,
         scale: float | None = None, memory_config: object = None, tile: tuple[int, int] | None = None) -> ttnn.Tensor:
    """A host tensor built the way each wheel allows: numpy arrays of any rank on 0.63+, a flat list of
    floats of a rank-4 shape (converted and tilized by ttnn) on older wheels."""
    values = sample(rng, dtype, shape, specials, scale)
    if TENSORBIN:
        kwargs: dict = {"data_type": getattr(ttnn, dtype), "layout": getattr(ttnn, layout)}
        if tile is not None:
            kwargs["tile"] = ttnn.Tile(tile)
        if memory_config is not None:
            kwargs["mem_config"] = memory_config
        return ttnn.Tensor(values.astype(NUMPY_TYPES.get(dtype, np.float32)), **kwargs)
    if memory_config is not None:
        return ttnn.Tensor(values.ravel().tolist(), shape, getattr(ttnn, dtype), getattr(ttnn, layout), None, memory_config)
    tensor = ttnn.Tensor([float(v) for v in values.ravel()], shape, ttnn.float32, ttnn.ROW_MAJOR_LAYOUT)
    if dtype != "float32":
        tensor = ttnn.to_dtype(tensor, getattr(ttnn, dtype))
    if layout == "TILE_LAYOUT":
        tensor = tensor.pad_to_tile(0.0).to(ttnn.TILE_LAYOUT)
    return tensor


def read_back(tensor: ttnn.Tensor) -> np.ndarray:
    """What ttnn itself reads back, logical shape, bfloat16 and block floats widened to float32."""
    if "BFLOAT" in str(tensor.dtype):
        tensor = ttnn.to_dtype(tensor, ttnn.float32)
    try:
        return np.array(tensor.to_numpy())
    except Exception:  # old wheels cannot convert some layouts to numpy; to_list always works
        return np.array(tensor.to_list(), dtype=np.float32 if "FLOAT" in str(tensor.dtype) else np.int64)


class Corpus:
    """Writes files, expected values and the manifest entries of one output folder."""

    def __init__(self, out: pathlib.Path) -> None:
        self.out = out
        self.entries: list[dict] = []
        (out / "files").mkdir(parents=True)
        (out / "expected").mkdir(parents=True)

    def add(self, name: str, tensor: ttnn.Tensor, **extra: object) -> None:
        path = self.out / "files" / f"{name}.{EXT}"
        ttnn.dump_tensor(str(path), tensor)
        back = ttnn.load_tensor(str(path))
        devices = ttnn.get_device_tensors(back) if TENSORBIN else [back]
        if len(devices) > 1:
            for i, shard in enumerate(devices):
                np.save(self.out / "expected" / f"{name}.shard{i}.npy", read_back(shard))
        else:
            np.save(self.out / "expected" / f"{name}.npy", read_back(back))
        entry = {
            "name": name,
            "file": f"files/{name}.{EXT}",
            "dtype": str(tensor.dtype),
            "layout": str(tensor.layout),
            "shape": list(tensor.shape),
            "padded_shape": list(tensor.padded_shape),
            "memory_config": str(tensor.memory_config()),
            "num_shards": len(devices),
            **extra,
        }
        if hasattr(tensor, "tensor_topology"):
            entry["topology"] = str(tensor.tensor_topology())
        self.entries.append(entry)
        print("wrote", name, entry["shape"], entry["dtype"], entry["layout"], f"{len(devices)} shard(s)")

    def finish(self, seed: int) -> None:
        manifest = {"ttnn_version": VERSION, "format": EXT, "seed": seed, "files": self.entries}
        (self.out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


def memory_configs() -> dict[str, object]:
    """Height-sharded L1 (two cores, 32x64 shards), DRAM interleaved and L1 interleaved."""
    grid = ttnn.CoreRangeSet({ttnn.CoreRange(ttnn.CoreCoord(0, 0), ttnn.CoreCoord(1, 0))})
    shard = ttnn.ShardSpec(grid, [32, 64], ttnn.ShardOrientation.ROW_MAJOR)
    return {
        "height_sharded_l1": ttnn.MemoryConfig(ttnn.TensorMemoryLayout.HEIGHT_SHARDED, ttnn.BufferType.L1, shard),
        "dram_interleaved": ttnn.DRAM_MEMORY_CONFIG,
        "l1_interleaved": ttnn.L1_MEMORY_CONFIG,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=pathlib.Path)
    parser.add_argument("--seed", type=int, default=12)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    corpus = Corpus(args.out)
    k = 0

    dtypes = ["bfloat16", "float32", "uint32", "int32", "uint16", "uint8"] + (list(BLOCK_FLOATS) if TENSORBIN else [])
    for d, dtype in enumerate(dtypes):
        for layout in ("ROW_MAJOR_LAYOUT", "TILE_LAYOUT"):
            if dtype in BLOCK_FLOATS and layout == "ROW_MAJOR_LAYOUT":
                continue  # block floats exist in TILE layout only
            shapes = TENSORBIN_SHAPES[(d + (layout == "TILE_LAYOUT")) % len(TENSORBIN_SHAPES)] if TENSORBIN else BIN_SHAPES
            for i, shape in enumerate(shapes):
                specials = i == 1 and dtype in ("bfloat16", "float32")
                corpus.add(f"t{k:03d}_{dtype}_{layout.split('_')[0].lower()}", make(rng, dtype, layout, list(shape), specials=specials))
                k += 1

    for mc_name, mc in memory_configs().items():
        try:
            if TENSORBIN:
                tensor = make(rng, "bfloat16", "TILE_LAYOUT", [1, 1, 64, 64], memory_config=mc)
            else:
                tensor = make(rng, "float32", "TILE_LAYOUT", [1, 1, 64, 64], memory_config=mc)
            corpus.add(f"t{k:03d}_mc_{mc_name}", tensor, memory_config_name=mc_name)
        except RuntimeError as exc:  # 0.81 refuses a sharded memory config on a host tensor
            print("skipped", mc_name, str(exc).splitlines()[0][:160])
        k += 1

    if TENSORBIN:
        for tile in ((16, 32), (32, 16), (16, 16)):
            for dtype in ("bfloat16", "bfloat8_b", "float32"):
                tensor = make(rng, dtype, "TILE_LAYOUT", [2, 20, 50], tile=tile)
                corpus.add(f"t{k:03d}_tile{tile[0]}x{tile[1]}_{dtype}", tensor, tile=list(tile))
                k += 1
        meshes: dict[tuple[int, int], tuple[list[int], ...]] = {
            (1, 2): ([2, 22, 22], [2, 37, 1], [2, 46, 3]),
            (2, 4): ([2, 43, 17], [2, 30, 9], [2, 12, 42]),
            (1, 8): ([2, 6, 5], [2, 7, 32], [2, 28, 9]),
        }
        for mesh, mesh_shapes in meshes.items():
            for (dtype, layout), shape in zip((("bfloat16", "TILE_LAYOUT"), ("float32", "ROW_MAJOR_LAYOUT"), ("bfloat8_b", "TILE_LAYOUT")), mesh_shapes):
                count = mesh[0] * mesh[1]
                replicated = mesh == (1, 8) and dtype == "bfloat16"  # one host tensor on every device
                shards = [make(rng, dtype, layout, shape)] * count if replicated else [make(rng, dtype, layout, shape) for _ in range(count)]
                tensor = ttnn.from_host_shards(shards, ttnn.MeshShape(*mesh))
                corpus.add(f"t{k:03d}_mesh{mesh[0]}x{mesh[1]}_{dtype}", tensor, mesh=list(mesh), replicated=replicated)
                k += 1
    corpus.finish(args.seed)


if __name__ == "__main__":
    main()
