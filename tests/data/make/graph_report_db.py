"""A report database of the newest schema (``graph_report`` 3.5), made by ttnn 0.81.1 itself.

Run with the python of a venv that has ttnn 0.81.1, with ``TT_METAL_MOCK_CLUSTER_DESC_PATH`` set and
the working directory outside any git checkout (the importer records the git remote of the current
directory):

    python graph_report_db.py OUT.sqlite

ttnn 0.81 captures a graph of host-only operations with no device, writes it as JSON
(``ttnn.graph.end_graph_capture_to_file``) and imports that into SQLite with its own importer
(``ttnn.graph.import_report``), the way ``ttnn-visualizer`` reports are made since 0.81. The result
has operations, tensors, producers and the ``report_metadata`` schema version, and no tensor values.
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import sys
import tempfile
import types

import numpy as np
import ttnn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=pathlib.Path)
    args = parser.parse_args()
    # ttnn's operation decorator imports torch for an isinstance check; this venv has none
    stand_in = types.ModuleType("torch")
    stand_in.Tensor = type("Tensor", (), {})  # type: ignore[attr-defined]
    sys.modules.setdefault("torch", stand_in)
    with tempfile.TemporaryDirectory() as work:
        capture = pathlib.Path(work) / "capture.json"
        ttnn.graph.begin_graph_capture(ttnn.graph.RunMode.NORMAL)
        values = np.random.default_rng(5).standard_normal((2, 40)).astype(np.float32)
        host = ttnn.Tensor(values, data_type=ttnn.bfloat16, layout=ttnn.ROW_MAJOR_LAYOUT)
        tiled = ttnn.to_layout(host, ttnn.TILE_LAYOUT)
        ttnn.to_layout(tiled, ttnn.ROW_MAJOR_LAYOUT)
        ttnn.graph.end_graph_capture_to_file(str(capture))
        db = ttnn.graph.import_report(str(capture), str(pathlib.Path(work) / "imported"))
        shutil.copyfile(db, args.out)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
