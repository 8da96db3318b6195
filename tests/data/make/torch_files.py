"""``.pt`` files written by real torch, with the values torch itself holds; golden tensors for reports.

Run with a python that has torch 2.13 (make_all.py does):

    python torch_files.py pt OUT                       # OUT/files/*.pt, OUT/expected/*.npy, OUT/manifest.json
    python torch_files.py goldens REPORT EXPECTED      # golden .pt + comparison records in a legacy report

``pt``: every dtype a report can hold, ranks 0-4, non-contiguous and strided views of a larger
storage, a detached tensor that required grad, and one file from the old non-zip serializer.
``goldens``: for each output tensor without a comparison record, a golden tensor near the device
values (three noise levels, so some comparisons fail), saved as comparison mode saved goldens
(``torch.save(torch.Tensor(t))``), with its ``tensors`` row and a local and a global record whose PCC
is computed here in float64.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sqlite3

import numpy as np
import torch

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64, torch.int32, torch.int16,
          torch.int8, torch.uint8, torch.bool]
GOLDEN_NOISE = (0.001, 0.05, 1.0)  # relative to the mean magnitude: passes, passes barely, fails


def torch_values(t: torch.Tensor) -> np.ndarray:
    """The values torch holds, C-ordered, bfloat16 widened to float32 (exactly); keeps 0-d arrays."""
    return np.array((t.float() if t.dtype == torch.bfloat16 else t).numpy(), order="C")


def write_pt_corpus(out: pathlib.Path, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    (out / "files").mkdir(parents=True)
    (out / "expected").mkdir(parents=True)
    entries: list[dict] = []

    def save(name: str, tensor: torch.Tensor, kind: str, **options: object) -> None:
        torch.save(tensor, out / "files" / f"{name}.pt", **options)  # type: ignore[arg-type]
        np.save(out / "expected" / f"{name}.npy", torch_values(tensor))
        entries.append({"name": name, "file": f"files/{name}.pt", "dtype": str(tensor.dtype), "shape": list(tensor.shape),
                        "kind": kind})

    k = 0
    for dtype in DTYPES:
        # ranks 0, 1 and 3 for every dtype; rank 4 for float32, the dtype legacy reports saved
        for shape in [(), (int(torch.randint(1, 12, (1,), generator=generator)),), (5, 7, 9)] + ([(2, 3, 4, 5)] if dtype == torch.float32 else []):
            base = torch.randn(shape, generator=generator) * 50
            tensor = base > 0 if dtype == torch.bool else base.to(dtype)
            views = [("plain", tensor)]
            if len(shape) >= 2:
                views += [("transposed", tensor.transpose(-1, -2)), ("slice", tensor[..., ::2])]  # both share the storage
            for kind, view in views:
                name = f"p{k:03d}_{str(dtype).split('.')[-1]}_{kind}"
                save(name, torch.Tensor(view) if dtype == torch.float32 and kind == "plain" else view, kind)
                k += 1
    grad = (torch.randn(3, 5, generator=generator) * 3).requires_grad_()
    save("p900_detached", grad.detach().cpu(), "detached")
    save("p901_legacy_serializer", torch.randn(4, 6, generator=generator), "legacy_serializer",
         _use_new_zipfile_serialization=False)
    manifest = {"torch_version": torch.__version__, "seed": seed, "files": entries}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(len(entries), "files")


def pcc(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation in float64 (what comparison mode recorded)."""
    return float(np.corrcoef(a.astype(np.float64).ravel(), b.astype(np.float64).ravel())[0, 1])


def add_goldens(report: pathlib.Path, expected: pathlib.Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    conn = sqlite3.connect(report / "db.sqlite")
    outputs = [row[0] for row in conn.execute("SELECT tensor_id FROM output_tensors ORDER BY operation_id, output_index")]
    recorded = {row[0] for row in conn.execute("SELECT tensor_id FROM local_tensor_comparison_records")}
    golden_id = 1_000_000
    for n, tensor_id in enumerate(t for t in outputs if t not in recorded and (expected / f"{t}.npy").exists()):
        device = np.load(expected / f"{tensor_id}.npy").astype(np.float32)
        scale = float(np.abs(device).mean() + 1e-3) * GOLDEN_NOISE[n % len(GOLDEN_NOISE)]
        golden = (device + rng.normal(0.0, scale, device.shape)).astype(np.float32)
        golden_id += 1
        torch.save(torch.Tensor(torch.from_numpy(golden)), report / "tensors" / f"{golden_id}.pt")
        np.save(expected / f"{golden_id}.npy", golden)
        conn.execute("INSERT INTO tensors (tensor_id, shape, dtype, layout) VALUES (?, ?, ?, ?)",
                     (golden_id, str(torch.Size(golden.shape)), "torch.float32", "torch.strided"))
        actual = pcc(golden, device)
        for table in ("local_tensor_comparison_records", "global_tensor_comparison_records"):
            conn.execute(f"INSERT INTO {table} (tensor_id, golden_tensor_id, matches, desired_pcc, actual_pcc) VALUES (?, ?, ?, ?, ?)",
                         (tensor_id, golden_id, actual >= 0.99, 0.99, actual))
    conn.commit()
    conn.close()
    print("goldens added:", golden_id - 1_000_000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    pt = commands.add_parser("pt")
    pt.add_argument("out", type=pathlib.Path)
    goldens = commands.add_parser("goldens")
    goldens.add_argument("report", type=pathlib.Path)
    goldens.add_argument("expected", type=pathlib.Path)
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args()
    if args.command == "pt":
        write_pt_corpus(args.out, args.seed)
    else:
        add_goldens(args.report, args.expected, args.seed)


if __name__ == "__main__":
    main()
