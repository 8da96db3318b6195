"""A ttnn 0.81.1 report folder with comparison mode's sidecars, written by the wheel's own code, and the values.

Run with the python of a venv holding ttnn 0.81.1 and torch (the golden-function venv of
tests/test_references_golden.py), with ``TT_METAL_MOCK_CLUSTER_DESC_PATH`` set, outside any git checkout:

    python comparison_sidecars.py OUT

It does what ttnn's own pytest report fixture (``ttnn.graph_report``) does at the end of a test, with comparison mode
on and no device: graph capture of host operations whose golden functions run on the CPU, then
``ttnn.graph.end_graph_capture_to_file(comparison-report/graph_capture.json)`` (which writes the ``.python_io.json`` and
``.comparison_records.json`` sidecars beside it), ``ttnn.graph.import_report(report, report)`` (``db.sqlite`` with the
records and the ``tensor_lifetime`` table, and the ``graph_capture.tensor_lifetime.json`` sidecar), the capture file
removed, ``config.json`` saved, the maker's folder made relative (``neutral_paths.py``). The operations, as the wheel records them: a tilize, a BFLOAT8_B conversion and a
typecast (all match), a reshape of the TILE tensor whose device result its golden does not match (local and global
records fail: the culprit) and a typecast of that (local record passes, global fails: its victim). ``OUT/values.npz`` holds the values of every output (``t<tensor id>``, read back with
``ttnn.to_torch``) and of every golden tensor the records name, taken where ttnn builds each golden's report row;
``OUT/values.json`` says which are outputs and which goldens. (The folder is not named ``report`` and has no
``manifest.json``: it is no tensor-file fixture.)
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil

import neutral_paths
import numpy as np
import torch
import ttnn
import ttnn.decorators

VALUES: dict[int, np.ndarray] = {}


def keep(tensor: object) -> None:
    """Remember the values of a ttnn or torch tensor under its tensor id."""
    if isinstance(tensor, ttnn.Tensor):
        value = ttnn.to_torch(tensor)
    else:
        value = tensor
    assert isinstance(value, torch.Tensor)
    VALUES[int(tensor.tensor_id)] = value.detach().to(torch.float32).numpy().copy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=pathlib.Path)
    args = parser.parse_args()
    report = args.out / "comparison-report"
    if args.out.exists():
        shutil.rmtree(args.out)
    report.mkdir(parents=True)

    report_row = ttnn.decorators.get_tensor_report_record

    def record_golden(tensor: object) -> dict:  # ttnn builds a report row for each golden tensor it compared
        keep(tensor)
        return report_row(tensor)

    ttnn.decorators.get_tensor_report_record = record_golden
    ttnn.CONFIG.enable_comparison_mode = True
    ttnn.CONFIG.comparison_mode_pcc = 0.999999
    ttnn.CONFIG.enable_detailed_tensor_report = True  # Python stack traces: the tensor_lifetime sidecar
    ttnn.CONFIG.root_report_path = str(args.out)
    ttnn.CONFIG.report_name = "comparison-report"  # a report path turns on global goldens
    ttnn.graph.begin_graph_capture(ttnn.graph.RunMode.NORMAL)
    values = torch.tensor(np.random.default_rng(81).standard_normal((32, 64)).astype(np.float32))
    x = ttnn.from_torch(values, dtype=ttnn.bfloat16, layout=ttnn.ROW_MAJOR_LAYOUT)
    tiled = ttnn.to_layout(x, ttnn.TILE_LAYOUT)
    quantized = ttnn.to_dtype(tiled, ttnn.bfloat8_b)
    widened = ttnn.typecast(quantized, ttnn.float32)
    reshaped = ttnn.reshape(widened, (64, 32))
    narrowed = ttnn.typecast(reshaped, ttnn.bfloat16)
    outputs = [x, tiled, quantized, widened, reshaped, narrowed]
    capture = report / "graph_capture.json"
    ttnn.graph.end_graph_capture_to_file(str(capture))
    ttnn.CONFIG.enable_comparison_mode = False  # reading the outputs back makes no more records
    ttnn.decorators.get_tensor_report_record = report_row
    for tensor in outputs:
        keep(tensor)
    ttnn.graph.import_report(report, report)
    capture.unlink()
    ttnn.save_config_to_json_file(report / "config.json")
    neutral_paths.rewrite(report)  # the records name this script's folder: the checkout's, not the maker's
    np.savez(args.out / "values.npz", **{f"t{k}": v for k, v in sorted(VALUES.items())})
    (args.out / "values.json").write_text(json.dumps({
        "ttnn": ttnn.__version__ if hasattr(ttnn, "__version__") else "0.81.1",
        "outputs": [int(t.tensor_id) for t in outputs],
        "goldens": sorted(set(VALUES) - {int(t.tensor_id) for t in outputs}),
    }, indent=1))
    print("wrote", args.out, sorted(p.name for p in report.iterdir()))


if __name__ == "__main__":
    main()
