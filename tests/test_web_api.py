"""reportdb.web through Flask's test client: every endpoint of the contract, values and metrics checked against numpy
on the real fixture reports (migrated here) and on a report built here (a multi-device tensor, bfloat16 and
BFLOAT8_B tensors, golden pairs with known errors); bad ids, bad slices, oversized windows, hostile names and damaged
reports answered as JSON errors with a hint, never a traceback page."""

from __future__ import annotations

import hashlib
import io
import json
import math
import shutil
import sqlite3
import struct
import zlib
from pathlib import Path
from typing import Any

import flask
import ml_dtypes
import numpy as np
import pytest

import reportdb
import reportdb.web as web
from reportdb.analysis.policy import dtype_defaults
from reportdb.numeric import streamed
from reportdb.store import engine
from reportdb.web import views

from conftest import FIXTURES

REPORTS = {"r62": "ttnn-0.62.2-bin", "r64": "ttnn-0.64.5-report-tensorbin"}


# --- the reports ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The two real fixture reports with comparison records, migrated (values stored)."""
    root = tmp_path_factory.mktemp("web-reports")
    for name, folder in REPORTS.items():
        reportdb.migrate(FIXTURES / folder / "report", root / name)
    return {name: root / name for name in REPORTS}


RNG = np.random.default_rng(13)
GOLDEN = RNG.standard_normal((2, 48, 70)).astype(np.float32)
ACTUAL = (GOLDEN + 1e-3 * RNG.standard_normal(GOLDEN.shape)).astype(np.float32)
ACTUAL[1, 5, 7] += 0.5  # one large error
NAN_GOLDEN = RNG.standard_normal((40, 33)).astype(np.float32)
NAN_ACTUAL = NAN_GOLDEN.copy()
NAN_ACTUAL[3, 4] = np.nan  # a non-finite mismatch, everything else equal
BF_GOLDEN = RNG.standard_normal((1, 1, 32, 64)).astype(ml_dtypes.bfloat16)
BF_ACTUAL = BF_GOLDEN.copy()
BF_ACTUAL[0, 0, 2, 3] = (BF_GOLDEN[0, 0, 2, 3:4].view(np.uint16) + 3).view(ml_dtypes.bfloat16)[0]  # 3 ULPs away
HALVES = [RNG.standard_normal((6, 10)).astype(np.float32) for _ in range(2)]
HALVES_GOLDEN = [HALVES[0] + np.float32(0.25), HALVES[1].copy()]  # device (0,0) is off by 0.25, (0,1) exact
REPLICA = RNG.standard_normal((4, 5)).astype(np.float32)
REPLICA_GOLDEN = REPLICA.copy()
REPLICA_GOLDEN[1, 2] += 0.5
BIG = RNG.standard_normal((1, 300, 257)).astype(np.float32)
BIG[0, 123, 45] = -40.0  # an outlier pooling must keep
BIG[0, 7, 200] = np.inf
LINE = RNG.standard_normal(1000).astype(np.float32)
DIST = {"mesh_shape": [1, 2], "placements": [{"kind": "replicate"}, {"kind": "shard", "dim": 1}]}

def make_report(folder: Path) -> Path:
    """A report of golden pairs with known errors, a multi-device pair, bfloat16 and BFLOAT8_B tensors, a tensor that
    spans many chunks and a 1-D one, with rows in the report tables (the current schema, with ``rank`` columns) that
    link them to operations and records."""
    folder.mkdir()
    with reportdb.open(folder, "a", chunk_size=4096) as report:
        report.put_tensor(1, ACTUAL)
        report.put_tensor(2, GOLDEN)
        report.put_tensor(3, NAN_ACTUAL)
        report.put_tensor(4, NAN_GOLDEN)
        report.put_tensor(5, BF_ACTUAL, ttnn_dtype="BFLOAT8_B", layout="TILE", tile_shape=(32, 32))
        report.put_tensor(6, BF_GOLDEN, ttnn_dtype="BFLOAT16", layout="TILE")
        report.put_tensor(20, shards=[((0, 0), HALVES[0]), ((0, 1), HALVES[1])], distribution=DIST)
        report.put_tensor(21, shards=[((0, 0), HALVES_GOLDEN[0]), ((0, 1), HALVES_GOLDEN[1])], distribution=DIST)
        # Multi-device actuals against one (global) golden tensor, as comparison mode records them.
        report.put_tensor(22, shards=[((0, 0), HALVES[0]), ((0, 1), HALVES[1])], distribution=DIST)
        report.put_tensor(23, np.concatenate(HALVES_GOLDEN, axis=1))
        report.put_tensor(24, shards=[((0, 0), REPLICA), ((0, 1), REPLICA)],
                          distribution={"mesh_shape": [1, 2], "placements": [{"kind": "replicate"}] * 2})
        report.put_tensor(25, REPLICA_GOLDEN)
        report.put_tensor(26, shards=[((0, 0), HALVES[0]), ((0, 1), HALVES[1])],
                          distribution={"mesh_shape": [1, 2], "placements": None, "strategy": "shard2d"})
        report.put_tensor(40, BIG)
        report.put_tensor(41, LINE)
        with report.batch(), report.connection() as conn:
            conn.executemany("INSERT INTO operations(operation_id, name, duration) VALUES (?, ?, 0.1)",
                             [(1, "ttnn.matmul"), (2, "ttnn.relu"), (3, "ttnn.add"), (4, "ttnn.all_gather"), (5, "ttnn.view")])
            conn.executemany("INSERT INTO input_tensors(operation_id, input_index, tensor_id) VALUES (?, ?, ?)",
                             [(1, 0, 30), (1, 1, 40), (2, 0, 1), (4, 0, 3)])
            conn.executemany("INSERT INTO output_tensors(operation_id, output_index, tensor_id) VALUES (?, ?, ?)",
                             [(1, 0, 1), (2, 0, 3), (3, 0, 5), (4, 0, 20), (5, 0, 41)])
            conn.execute("INSERT INTO tensors(tensor_id, shape, dtype) VALUES (30, 'Shape([4, 4])', 'DataType.FLOAT32')")
            records = "(tensor_id, golden_tensor_id, matches, desired_pcc, actual_pcc) VALUES (?, ?, ?, ?, ?)"
            conn.executemany(f"INSERT INTO local_tensor_comparison_records{records}",
                             [(1, 2, 1, 0.99, 0.9999), (3, 4, 0, 0.99, None), (5, 6, 1, 0.999, 0.99999),
                              (22, 23, 0, 0.99, 0.9), (24, 25, 0, 0.99, 0.9), (26, 23, 0, 0.99, 0.9)])
            conn.execute(f"INSERT INTO global_tensor_comparison_records{records}", (20, 21, 1, 0.99, 1.0))
    return folder


@pytest.fixture(scope="session")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_report(tmp_path_factory.mktemp("web-made") / "made")


@pytest.fixture(scope="session")
def client(migrated: dict[str, Path], made: Path) -> Any:
    app = web.create_app([migrated["r62"], migrated["r64"], made])
    yield app.test_client()
    app.extensions["reportdb"].close()


def get(client: Any, url: str, status: int = 200) -> Any:
    """The JSON answer of ``url``, its status checked (an error must hold a message and a hint)."""
    response = client.get(url)
    assert response.mimetype == "application/json", (url, response.status_code, response.data[:300])
    data = json.loads(response.get_data(as_text=True))
    assert response.status_code == status, (url, data)
    if status >= 400:
        assert set(data) == {"error", "hint"} and data["error"] and data["hint"], data
    return data


def floats(nested: Any) -> np.ndarray:
    """JSON values back as float64 ("nan", "inf", "-inf" strings included)."""
    return np.array(json.loads(json.dumps(nested), parse_constant=float), dtype=object).astype(np.float64)


def ref_pool(view: np.ndarray, cy: int, cx: int) -> np.ndarray:
    """Max-abs pooling cell by cell: NaN if the block holds one, else the signed value of largest magnitude (the
    positive one on a tie)."""
    view = view.astype(np.float64)
    out = np.empty((-(-view.shape[0] // cy), -(-view.shape[1] // cx)))
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            block = view[i * cy : (i + 1) * cy, j * cx : (j + 1) * cx]
            if np.isnan(block).any():
                out[i, j] = np.nan
            else:
                m = np.abs(block).max()
                out[i, j] = m if (block == m).any() else -m
    return out


def read_png(data: bytes) -> np.ndarray:
    """An 8-bit RGB PNG (filter 0 rows, as reportdb.web writes them) as rows x cols x 3."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        assert struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])[0] == zlib.crc32(kind + body)
        chunks[kind] = chunks.get(kind, b"") + body
        pos += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert (depth, colour) == (8, 2)
    raw = np.frombuffer(zlib.decompress(chunks[b"IDAT"]), np.uint8).reshape(height, 1 + 3 * width)
    assert not raw[:, 0].any()
    return raw[:, 1:].reshape(height, width, 3)


# --- reports and operations -------------------------------------------------------------------------------------------


def test_reports_lists_each_served_report_with_its_counts(client: Any, migrated: dict[str, Path]) -> None:
    reports = {r["name"]: r for r in get(client, "/api/reports")["reports"]}
    assert list(reports) == ["r62", "r64", "made"]
    for name in REPORTS:
        conn = sqlite3.connect(migrated[name] / "db.sqlite")
        expected = {
            "operations": conn.execute("SELECT COUNT(*) FROM operations").fetchone()[0],
            "tensors": conn.execute("SELECT COUNT(*) FROM rdb_tensor").fetchone()[0],
            "comparisons": sum(conn.execute(f"SELECT COUNT(*) FROM {k}_tensor_comparison_records").fetchone()[0]
                               for k in ("local", "global")),
        }
        conn.close()
        assert {k: reports[name][k] for k in expected} == expected
        assert reports[name]["bytes"] == (migrated[name] / "db.sqlite").stat().st_size
        assert reports[name]["comparisons"] > 0
    assert reports["made"]["operations"] == 5 and reports["made"]["tensors"] == 15


def test_operations_page_filter_and_sort_follow_the_report_tables(client: Any, migrated: dict[str, Path]) -> None:
    conn = sqlite3.connect(migrated["r64"] / "db.sqlite")
    ops = conn.execute("SELECT operation_id, name FROM operations ORDER BY operation_id").fetchall()
    outputs = conn.execute("SELECT operation_id, tensor_id FROM output_tensors ORDER BY operation_id, output_index").fetchall()
    recorded = dict(conn.execute("SELECT tensor_id, actual_pcc FROM local_tensor_comparison_records").fetchall())
    conn.close()
    page = get(client, "/api/reports/r64/operations")
    assert page["total"] == len(ops) and [i["id"] for i in page["items"]] == [o[0] for o in ops]
    assert [i["name"] for i in page["items"]] == [o[1] for o in ops]
    for item in page["items"]:
        assert [r["tensor_id"] for r in item["outputs"]] == [t for op, t in outputs if op == item["id"]]
        pccs = [recorded[r["tensor_id"]] for r in item["outputs"] if r["tensor_id"] in recorded]
        # recomputed by the engine under the policy (the PCC that opens), which matches what ttnn recorded
        assert item["worst_pcc"] == (pytest.approx(min(pccs), abs=1e-9) if pccs else None)
    worst = get(client, "/api/reports/r64/operations?sort=pcc&order=asc")["items"]
    with_pcc = [i["worst_pcc"] for i in worst if i["worst_pcc"] is not None]
    assert with_pcc == sorted(with_pcc) and worst[0]["worst_pcc"] == pytest.approx(min(recorded.values()), abs=1e-9)
    assert worst[0]["passed"] is False  # the fixture's 0.748 record
    assert all(i["worst_pcc"] is None for i in worst[len(with_pcc) :])  # nulls last
    names = get(client, "/api/reports/r64/operations?filter=ADD&sort=name&order=desc")
    assert names["items"] and all("add" in i["name"].lower() for i in names["items"])
    assert names["total"] == sum("add" in o[1].lower() for o in ops)
    part = get(client, "/api/reports/r64/operations?offset=2&limit=3")
    assert [i["id"] for i in part["items"]] == [o[0] for o in ops[2:5]] and part["total"] == len(ops)


def test_operation_refs_describe_stored_and_unstored_tensors(client: Any) -> None:
    items = {i["id"]: i for i in get(client, "/api/reports/made/operations")["items"]}
    unstored, big = items[1]["inputs"]
    assert unstored == {"tensor_id": 30, "rank": 0, "stored": False, "shape": [4, 4], "dtype": None,
                        "ttnn_dtype": "FLOAT32", "comparisons": {"local": None, "global": None}}
    assert big["stored"] and big["shape"] == list(BIG.shape) and big["dtype"] == "float32"
    bf = items[3]["outputs"][0]
    assert bf["dtype"] == "bfloat16" and bf["ttnn_dtype"] == "BFLOAT8_B"
    local = bf["comparisons"]["local"]
    assert 0.99999 < local.pop("pcc") <= 1.0  # recomputed by the engine under the policy, as the list shows it
    assert local == {"golden_tensor_id": 6, "desired_pcc": 0.999, "recorded_pcc": 0.99999,
                     "recorded_matches": True, "passed": True, "role": "pass", "failed": [],
                     # ttnn-visualizer's names (its TensorComparisonRecord), as recorded
                     "tensor_id": 5, "matches": True, "actual_pcc": 0.99999}
    assert items[4]["outputs"][0]["comparisons"]["global"]["golden_tensor_id"] == 21


def test_a_recomputed_comparison_shows_in_the_operation_list(tmp_path: Path) -> None:
    """The list shows the engine's recomputed PCC and verdict (``compare_golden`` under the policy), the same the
    comparison endpoint answers (the record of tensor 3 said nothing; recomputed, its NaN fails it)."""
    app = web.create_app([make_report(tmp_path / "made")])
    client = app.test_client()
    result = get(client, "/api/compare-tensor/local/3")
    ref = get(client, "/api/reports/made/operations")["items"][1]["outputs"][0]["comparisons"]["local"]
    assert ref["passed"] is False and ref["pcc"] == result["metrics"]["pcc"]
    worst_first = get(client, "/api/reports/made/operations?sort=pcc")["items"]
    assert [(i["id"], i["passed"]) for i in worst_first if i["id"] == 2] == [(2, False)]
    app.extensions["reportdb"].close()


# --- tensors: metadata, values, heatmaps ------------------------------------------------------------------------------


def test_tensor_metadata_is_the_stored_spec_and_statistics(client: Any, migrated: dict[str, Path]) -> None:
    with reportdb.open(migrated["r64"]) as report:
        for tensor_id in report.tensor_ids():
            info = report.tensor_info(tensor_id)
            stats = report.tensor_stats(tensor_id).shards
            got = get(client, f"/api/reports/r64/tensors/{tensor_id}")
            assert got["shape"] == (None if info.shape is None else list(info.shape)) and got["dtype"] == info.dtype
            assert got["ttnn_dtype"] == info.spec.ttnn_dtype and got["layout"] == info.spec.layout
            assert got["memory_config"] == info.spec.memory_config and got["nbytes"] == info.nbytes
            assert [s["shape"] for s in got["shards"]] == [list(s.shape) for s in info.shards]
            if len(stats) == 1:
                assert got["stats"]["count"] == stats[0].count and got["stats"]["max"] == stats[0].max
                assert got["histogram"]["counts"] == list(stats[0].hist_counts)
            else:  # per shard, and for the whole only when a device is chosen
                assert got["stats"] is None and [s["stats"]["count"] for s in got["shards"]] == [s.count for s in stats]
                device = ",".join(map(str, got["shards"][-1]["device"]))
                assert get(client, f"/api/reports/r64/tensors/{tensor_id}?device={device}")["stats"]["max"] == stats[-1].max
    bf8 = get(client, "/api/reports/made/tensors/5")
    assert (bf8["dtype"], bf8["ttnn_dtype"], bf8["tile"]) == ("bfloat16", "BFLOAT8_B", [32, 32])


def test_tensor_metadata_reads_no_value_bytes(made: Path, tmp_path: Path) -> None:
    """With every chunk's bytes damaged, metadata still answers; values say the report is damaged (422)."""
    work = tmp_path / "made"
    shutil.copytree(made, work)
    conn = sqlite3.connect(work / "db.sqlite")
    conn.execute("UPDATE rdb_chunk SET data = zeroblob(length(data))")
    conn.commit()
    conn.close()
    app = web.create_app([work])
    client = app.test_client()
    assert get(client, "/api/reports/made/tensors/40")["shape"] == list(BIG.shape)
    error = get(client, "/api/reports/made/tensors/40/values?slice=0,0:2,0:2", 422)
    assert "verify" in error["hint"] and "integrity" in error["error"]
    missing = get(client, "/api/reports/made/tensors/999", 404)
    assert "report made" in missing["error"] and str(work) not in missing["error"]  # the report's name, not its path
    app.extensions["reportdb"].close()


def test_values_as_json_and_npy_equal_numpy(client: Any, migrated: dict[str, Path]) -> None:
    with reportdb.open(migrated["r64"]) as report:
        for tensor_id in report.tensor_ids():
            whole = report.tensor(tensor_id)
            window = tuple(slice(1, min(n, 9), 2) if n > 1 else 0 for n in whole.shape)
            text = ",".join(f"{s.start}:{s.stop}:2" if isinstance(s, slice) else "0" for s in window)
            got = get(client, f"/api/reports/r64/tensors/{tensor_id}/values?slice={text}")
            expected = whole[window].astype(np.float64)
            assert got["shape"] == list(expected.shape) and got["dtype"] == str(whole.dtype)
            np.testing.assert_array_equal(floats(got["values"]), expected)
            npy = client.get(f"/api/reports/r64/tensors/{tensor_id}/values?slice={text}&format=npy")
            assert npy.status_code == 200 and npy.mimetype == "application/octet-stream"
            widened = whole[window].astype(np.float32) if whole.dtype.kind == "V" else whole[window]  # bfloat16 -> f32
            loaded = np.load(io.BytesIO(npy.data))
            assert loaded.dtype == widened.dtype and npy.headers["X-Reportdb-Dtype"] == str(whole.dtype)
            np.testing.assert_array_equal(loaded, widened)


def test_values_of_bfloat16_and_nonfinite_values(client: Any) -> None:
    got = get(client, "/api/reports/made/tensors/5/values?slice=0,0,0:4,-8:")
    assert got["slice"] == "0,0,0:4,56:64" and got["dtype"] == "bfloat16"
    np.testing.assert_array_equal(floats(got["values"]), BF_ACTUAL[0, 0, 0:4, -8:].astype(np.float64))
    got = get(client, "/api/reports/made/tensors/40/values?slice=0,7,199:202")
    assert got["values"][1] == "inf" and got["values"][0] == float(BIG[0, 7, 199])
    assert get(client, "/api/reports/made/tensors/3/values?slice=3,4")["values"] == "nan"
    assert get(client, "/api/reports/made/tensors/41/values")["shape"] == [1000]  # no slice: the whole tensor


@pytest.mark.parametrize("text", ["a", "0:1:2:3", "0:5:-1", "::0", "0,0,0,0,0", "0,999", "-999", "1.5", "0,,1", " : x"])
def test_bad_slices_are_400(client: Any, text: str) -> None:
    get(client, f"/api/reports/made/tensors/40/values?slice={text}", 400)


def test_oversized_windows_are_413_with_a_hint(client: Any, tmp_path: Path) -> None:
    assert BIG.size > web.limits.MAX_JSON_ELEMENTS
    error = get(client, "/api/reports/made/tensors/40/values", 413)
    assert "narrow" in error["hint"] and "npy" in error["hint"]
    assert client.get("/api/reports/made/tensors/40/values?format=npy").status_code == 200  # 77k < 1M elements
    huge = np.zeros(web.limits.MAX_NPY_ELEMENTS + 1, np.uint8)
    (tmp_path / "huge").mkdir()
    with reportdb.open(tmp_path / "huge", "a") as report:
        report.put_tensor(1, huge)
    app = web.create_app([tmp_path / "huge"])
    assert get(app.test_client(), "/api/reports/huge/tensors/1/values?format=npy", 413)["error"]
    assert app.test_client().get("/api/reports/huge/tensors/1/values?format=npy&slice=0:1000").status_code == 200
    app.extensions["reportdb"].close()


@pytest.mark.parametrize("band", [1 << 22, 1000])
def test_heatmap_is_maxabs_pooling_band_by_band(client: Any, band: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each cell keeps the signed value of largest magnitude (the outlier -40 and the Inf survive), equal to pooling
    done cell by cell in numpy, whether the region is read in one band or in many."""
    monkeypatch.setattr(views, "BAND_ELEMENTS", band)
    got = get(client, "/api/reports/made/tensors/40/heatmap?format=json&width=40&height=30")
    assert got["cell"] == [10, 7] and got["shape2d"] == [300, 257] and got["y"] == [0, 300] and got["x"] == [0, 257]
    grid = floats(got["grid"])
    np.testing.assert_array_equal(grid, ref_pool(BIG[0], 10, 7))
    assert grid[123 // 10, 45 // 7] == -40.0 and grid[0, 200 // 7] == np.inf
    zoom = get(client, "/api/reports/made/tensors/40/heatmap?format=json&y=100:150&x=-57:&width=512&height=512")
    assert zoom["cell"] == [1, 1] and zoom["x"] == [200, 257]
    np.testing.assert_array_equal(floats(zoom["grid"]), BIG[0, 100:150, 200:].astype(np.float64))
    assert zoom["min"] == float(BIG[0, 100:150, 200:].min())


def test_heatmap_views_and_png(client: Any) -> None:
    line = get(client, "/api/reports/made/tensors/41/heatmap?format=json&width=100")
    assert line["shape2d"] == [1, 1000] and line["cell"] == [1, 10]
    np.testing.assert_array_equal(floats(line["grid"]), ref_pool(LINE[None, :], 1, 10))
    lead = get(client, "/api/reports/made/tensors/1/heatmap?format=json&index=1&width=70&height=48")
    np.testing.assert_array_equal(floats(lead["grid"]), ACTUAL[1].astype(np.float64))
    response = client.get("/api/reports/made/tensors/40/heatmap?width=40&height=30")
    assert response.status_code == 200 and response.mimetype == "image/png"
    image = read_png(response.data)
    assert image.shape == (30, 37, 3)
    assert tuple(image[0, 200 // 7]) == views.NONFINITE["inf"]
    assert response.headers["X-Reportdb-Scale"] == "diverging"
    assert float(response.headers["X-Reportdb-Min"]) == -float(response.headers["X-Reportdb-Max"]) == -40.0
    assert tuple(image[123 // 10, 45 // 7]) == tuple(views.LUTS["diverging"][0])  # -40: the scale's low end


@pytest.mark.parametrize("query, status", [
    ("width=0", 400), ("width=5000", 413), ("width=2048&height=2048&format=json", 413), ("height=abc", 400), ("y=5:2", 400), ("y=0:10:2", 400), ("x=3", 400),
    ("index=1", 400), ("index=0,0", 400), ("format=gif", 400), ("y=400:500", 400),
])
def test_bad_heatmap_parameters(client: Any, query: str, status: int) -> None:
    get(client, f"/api/reports/made/tensors/40/heatmap?{query}", status)


def test_heatmap_of_too_many_elements_is_413(client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(web.limits, "MAX_POOL_ELEMENTS", 1000)
    assert "zoom" in get(client, "/api/reports/made/tensors/40/heatmap", 413)["hint"]
    assert get(client, "/api/reports/made/tensors/40/heatmap?format=json&y=0:10&x=0:100")["cell"] == [1, 1]


def test_multi_device_tensor_by_shard_and_assembled(client: Any) -> None:
    meta = get(client, "/api/reports/made/tensors/20")
    assert meta["shape"] == [6, 20] and meta["mesh_shape"] == [1, 2] and meta["stats"] is None
    assert [(s["index"], s["device"], s["shape"]) for s in meta["shards"]] == [(0, [0, 0], [6, 10]), (1, [0, 1], [6, 10])]
    assert meta["shards"][1]["placement"] == [{"kind": "replicate", "dim": None}, {"kind": "shard", "dim": 1}]
    assert meta["shards"][1]["stats"]["max"] == float(HALVES[1].max())
    assert get(client, "/api/reports/made/tensors/20?device=0,1")["stats"]["min"] == float(HALVES[1].min())
    whole = np.concatenate(HALVES, axis=1)
    np.testing.assert_array_equal(floats(get(client, "/api/reports/made/tensors/20/values")["values"]), whole)
    np.testing.assert_array_equal(floats(get(client, "/api/reports/made/tensors/20/values?slice=2:5,8:13")["values"]),
                                  whole[2:5, 8:13])
    shard = get(client, "/api/reports/made/tensors/20/values?device=0,1&slice=1:3")
    np.testing.assert_array_equal(floats(shard["values"]), HALVES[1][1:3])
    heat = get(client, "/api/reports/made/tensors/20/heatmap?format=json&device=0,0&width=5&height=3")
    np.testing.assert_array_equal(floats(heat["grid"]), ref_pool(HALVES[0], 2, 2))
    for bad in ("device=5,5", "device=0"):
        get(client, f"/api/reports/made/tensors/20/values?{bad}", 404)
    get(client, "/api/reports/made/tensors/20/values?device=a,b", 400)


# --- comparisons ------------------------------------------------------------------------------------------------------


def test_compare_tensor_metrics_equal_numpy_on_the_real_fixture(client: Any) -> None:
    """Tensor 7 of the 0.64.5 fixture against its golden .pt file, both read straight from the legacy files."""
    folder = FIXTURES / REPORTS["r64"] / "report" / "tensors"
    actual = reportdb.load_tensor_file(folder / "7.tensorbin").array.astype(np.float64)
    golden = reportdb.load_tensor_file(folder / "1000003.pt").array.astype(np.float64)
    got = get(client, "/api/compare-tensor/local/7?report=r64")
    assert (got["report"], got["kind"], got["tensor_id"], got["golden_tensor_id"]) == ("r64", "local", 7, 1000003)
    m = got["metrics"]
    assert m["pcc"] == pytest.approx(np.corrcoef(actual.ravel(), golden.ravel())[0, 1], rel=1e-12)
    assert m["pcc"] == pytest.approx(got["record"]["recorded_pcc"], rel=1e-9)
    assert m["max_abs_error"] == pytest.approx(np.abs(actual - golden).max(), rel=1e-12)
    info = get(client, "/api/reports/r64/tensors/7")
    rtol, atol = dtype_defaults(info["ttnn_dtype"] or info["dtype"])[1]  # the policy's dtype-aware defaults
    assert (info["policy"]["rtol"], info["policy"]["atol"]) == (rtol, atol)  # the page proposes the same
    assert m["allclose_mismatches"] == int((~np.isclose(actual, golden, rtol=rtol, atol=atol)).sum())
    assert got["passed"] is False and got["tolerances"] == {"rtol": rtol, "atol": atol, "pcc": 0.99, "source": "policy"}
    assert got["comparison"] == {"tensor_id": 7, "golden_tensor_id": 1000003, "matches": False, "desired_pcc": 0.99,
                                 "actual_pcc": m["pcc"]}  # ttnn-visualizer's names
    assert got["verdict"]["failed"] and "pcc" in got["verdict"]["failed"]
    assert get(client, "/api/compare-tensor/global/7?report=r64")["kind"] == "global"


def test_compare_tensor_tolerances_take_effect(client: Any) -> None:
    base = get(client, "/api/compare-tensor/local/1?report=made")
    rtol, atol = dtype_defaults("float32")[1]
    assert base["tolerances"] == {"rtol": rtol, "atol": atol, "pcc": base["tolerances"]["pcc"], "source": "policy"}
    expected = reportdb.compare(ACTUAL, GOLDEN, rtol=rtol, atol=atol, pcc=base["tolerances"]["pcc"]).to_dict()
    assert base["metrics"] == json.loads(json.dumps(expected))
    assert base["passed"] is True and base["metrics"]["max_abs_error"] == pytest.approx(abs(ACTUAL - GOLDEN).max())
    strict = get(client, "/api/compare-tensor/local/1?report=made&pcc=0.9999999")
    assert strict["passed"] is False and strict["tolerances"]["pcc"] == 0.9999999
    loose = get(client, "/api/compare-tensor/local/1?report=made&rtol=0&atol=0.6")
    assert loose["metrics"]["allclose_mismatches"] == 0 and base["metrics"]["allclose_mismatches"] > 0
    nan = get(client, "/api/compare-tensor/local/3?report=made")
    assert nan["passed"] is False and nan["metrics"]["nan_mismatches"] == 1


def test_compare_tensor_per_device(client: Any) -> None:
    off = get(client, "/api/compare-tensor/global/20?report=made&device=0,0")
    exact = get(client, "/api/compare-tensor/global/20?report=made&device=0,1")
    assert off["metrics"]["max_abs_error"] == pytest.approx(0.25) and exact["metrics"]["max_abs_error"] == 0.0
    assert off["device"] == [0, 0]
    whole = get(client, "/api/compare-tensor/global/20?report=made")
    assert whole["metrics"]["count"] == 120 and whole["metrics"]["max_abs_error"] == pytest.approx(0.25)


def test_device_shard_against_one_golden_tensor(client: Any) -> None:
    """A shard of a multi-device tensor is compared with the part of the single golden tensor it covers (a
    replica with the whole); a distribution that does not say where shards lie is a 400."""
    off = get(client, "/api/compare-tensor/local/22?report=made&device=0,0")["metrics"]
    exact = get(client, "/api/compare-tensor/local/22?report=made&device=0,1")["metrics"]
    assert off["count"] == exact["count"] == 60 and off["max_abs_error"] == pytest.approx(0.25) and exact["max_abs_error"] == 0
    point = get(client, "/api/compare-tensor/local/22/point?report=made&device=0,1&at=2,-1")
    assert (point["actual"], point["golden"]) == (float(HALVES[1][2, 9]), float(HALVES_GOLDEN[1][2, 9]))
    heat = get(client, "/api/compare-tensor/local/22/heatmap?report=made&device=0,0&format=json&error=abs")
    np.testing.assert_allclose(floats(heat["grid"]), np.abs(HALVES[0].astype(np.float64) - HALVES_GOLDEN[0]))
    histogram = get(client, "/api/compare-tensor/local/22/histogram?report=made&device=0,1&error=abs")
    assert histogram["edges"][-1] == 0.5 and sum(histogram["counts"]) == 60  # all zero: the constant's +-0.5 edges
    replica = get(client, "/api/compare-tensor/local/24?report=made&device=0,1")["metrics"]
    assert replica["count"] == REPLICA.size and replica["max_abs_error"] == pytest.approx(0.5)
    assert "leave out device" in get(client, "/api/compare-tensor/local/26?report=made&device=0,1", 400)["hint"]
    get(client, "/api/compare-tensor/local/22?report=made&device=1,1", 404)


def test_compare_heatmap_mask_moves_with_the_tolerances(client: Any) -> None:
    url = "/api/compare-tensor/local/1/heatmap?report=made&format=json&error=mask&index=1&width=70&height=48"
    mask = floats(get(client, url + "&rtol=0&atol=0.01")["grid"])
    assert mask[5, 7] == 1 and mask.sum() == 1  # only the 0.5 error exceeds atol=0.01
    assert floats(get(client, url + "&rtol=0&atol=0.6")["grid"]).sum() == 0
    default = floats(get(client, url)["grid"])
    np.testing.assert_array_equal(default, (~np.isclose(ACTUAL[1], GOLDEN[1], rtol=dtype_defaults("float32")[1][0], atol=dtype_defaults("float32")[1][1])).astype(float))
    pooled = floats(get(client, url.replace("width=70&height=48", "width=7&height=6") + "&rtol=0&atol=0.01")["grid"])
    assert pooled.shape == (6, 7) and pooled[0, 0] == 1 and pooled.sum() == 1  # one element marks its cell
    nan = floats(get(client, "/api/compare-tensor/local/3/heatmap?report=made&format=json&error=mask")["grid"])
    assert nan[3, 4] == 1 and nan.sum() == 1


@pytest.mark.parametrize("error", ["abs", "rel", "ulp"])
def test_compare_heatmap_errors_equal_numpy(client: Any, error: str) -> None:
    got = get(client, f"/api/compare-tensor/local/1/heatmap?report=made&format=json&error={error}&width=10&height=12")
    a, g = ACTUAL.astype(np.float64), GOLDEN.astype(np.float64)
    if error == "abs":
        expected = np.abs(a - g)
    elif error == "rel":
        expected = np.abs(a - g) / np.maximum(np.abs(g), np.finfo(np.float64).eps)
    else:
        ordered = [np.where(x.view(np.int32) < 0, -(x.view(np.int32).astype(np.int64) & 0x7FFFFFFF), x.view(np.int32))
                   for x in (ACTUAL, GOLDEN)]
        expected = np.abs(ordered[0] - ordered[1]).astype(np.float64)
    assert got["cell"] == [4, 7] and got["scale"]["name"] == "sequential"
    np.testing.assert_allclose(floats(got["grid"]), ref_pool(expected[0], 4, 7), rtol=1e-12)


def test_compare_point_equals_numpy(client: Any) -> None:
    got = get(client, "/api/compare-tensor/local/1/point?report=made&at=1,5,7")
    a, g = float(ACTUAL[1, 5, 7]), float(GOLDEN[1, 5, 7])
    assert got["index"] == [1, 5, 7] and got["actual"] == a and got["golden"] == g
    assert got["abs_error"] == abs(a - g) and got["rel_error"] == pytest.approx(abs(a - g) / abs(g))
    bf = get(client, "/api/compare-tensor/local/5/point?report=made&at=0,0,2,3")
    assert bf["ulp"] == 3 and bf["actual"] == float(BF_ACTUAL[0, 0, 2, 3])
    assert get(client, "/api/compare-tensor/local/5/point?report=made&at=0,0,2,4")["ulp"] == 0
    nan = get(client, "/api/compare-tensor/local/3/point?report=made&at=-37,-29")
    assert nan["index"] == [3, 4] and nan["actual"] == "nan" and nan["abs_error"] == "inf"
    for bad in ("at=1,5", "at=9,0,0", "at=x"):
        get(client, f"/api/compare-tensor/local/1/point?report=made&{bad}", 400)


def test_compare_histogram_equals_numpy(client: Any) -> None:
    got = get(client, "/api/compare-tensor/local/1/histogram?report=made&error=abs&bins=16")
    err = np.abs(ACTUAL.astype(np.float64) - GOLDEN.astype(np.float64))
    assert got["edges"][0] == err.min() and got["edges"][-1] == err.max() and len(got["counts"]) == 16
    assert got["counts"] == np.histogram(err, bins=np.array(got["edges"]))[0].tolist()
    nan = get(client, "/api/compare-tensor/local/3/histogram?report=made")
    assert nan["nonfinite"] == 1 and sum(nan["counts"]) == NAN_ACTUAL.size - 1


def test_compare_histogram_streams_in_bands(client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(views, "BAND_ELEMENTS", 100)
    got = get(client, "/api/compare-tensor/local/1/histogram?report=made&error=rel&bins=8")
    err = np.abs(ACTUAL.astype(np.float64) - GOLDEN) / np.maximum(np.abs(GOLDEN.astype(np.float64)), np.finfo(float).eps)
    assert got["counts"] == np.histogram(err, bins=np.array(got["edges"]))[0].tolist()


@pytest.mark.parametrize("url, status", [
    ("/api/compare-tensor/local/1", 400),  # three reports served: which one?
    ("/api/compare-tensor/local/1?report=nope", 404),
    ("/api/compare-tensor/local/2?report=made", 404),  # a golden tensor has no record
    ("/api/compare-tensor/sideways/1?report=made", 404),
    ("/api/compare-tensor/global/1?report=made", 404),
    ("/api/compare-tensor/local/1?report=made&rtol=-1", 400),
    ("/api/compare-tensor/local/1?report=made&pcc=2", 400),
    ("/api/compare-tensor/local/1?report=made&atol=nan", 400),
    ("/api/compare-tensor/local/1/heatmap?report=made&error=sq", 400),
    ("/api/compare-tensor/local/1/histogram?report=made&bins=0", 400),
    ("/api/compare-tensor/local/1/histogram?report=made&error=mask", 400),
    ("/api/compare-tensor/local/7?report=r62", 404),  # the 0.62 record's golden was never written
])
def test_bad_compare_requests(client: Any, url: str, status: int) -> None:
    get(client, url, status)


def test_compare_of_oversized_tensors_is_413(client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(web.limits, "MAX_COMPARE_ELEMENTS", 100)
    assert "reportdb compare" in get(client, "/api/compare-tensor/local/1?report=made&rtol=0.5", 413)["hint"]


def test_runs_equal_compare_runs(client: Any, migrated: dict[str, Path]) -> None:
    got = get(client, "/api/runs?a=r62&b=r64")
    with reportdb.open(migrated["r62"]) as a, reportdb.open(migrated["r64"]) as b:
        expected = json.loads(json.dumps(reportdb.compare_runs(a, b).to_dict()))
    assert (got["a"], got["b"]) == ("r62", "r64")
    assert got["items"] == expected["rows"] and got["first_divergence"] == expected["first_divergence"]
    assert got["first_divergence"] is not None and got["first_divergence"]["first_divergence"] is True
    same = get(client, "/api/runs?a=r64&b=r64")
    assert same["first_divergence"] is None and all(r["passed"] for r in same["items"] if r["status"] == "compared")
    get(client, "/api/runs?a=r64", 400)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(web.limits, "MAX_RUN_BYTES", 1000)
        assert "reportdb compare" in get(client, "/api/runs?a=r64&b=r62&rtol=0.5", 413)["hint"]
    get(client, "/api/runs?a=r64&b=zzz", 404)


# --- names, paths, errors -----------------------------------------------------------------------------------------------


def test_report_names_are_unique_and_from_the_folder(tmp_path: Path, made: Path) -> None:
    (tmp_path / "x").mkdir()
    shutil.copyfile(made / "db.sqlite", tmp_path / "x" / "run.sqlite")
    names = web.reports.report_names([made, made / "db.sqlite", tmp_path / "x" / "run.sqlite", made])
    assert list(names) == ["made", "made-2", "run", "made-3"]


@pytest.mark.parametrize("url", [
    "/api/reports/..%2Fmade/operations", "/api/reports/%2e%2e/operations", "/api/reports/made%00/operations",
    "/api/reports/db.sqlite/tensors/1", "/api/reports/<script>/operations", "/api/reports/made/tensors/1%2F..%2F2",
    "/api/reports/made/tensors/99999999999999999999999", "/api/reports/made/tensors/1.0/values",
    "/static/../db.sqlite", "/static/%2e%2e/__init__.py", "/api/reports/made/tensors/-1",
])
def test_hostile_names_and_ids_never_reach_the_filesystem(client: Any, url: str) -> None:
    response = client.get(url)
    assert response.status_code in (400, 404), (url, response.status_code)
    assert response.mimetype == "application/json" and b"Traceback" not in response.data


def test_requests_change_nothing_in_the_report(made: Path, tmp_path: Path) -> None:
    work = tmp_path / "made"
    shutil.copytree(made, work)
    before = {p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns) for p in work.iterdir()}
    app = web.create_app([work])
    client = app.test_client()
    for url in ["/api/reports", "/api/reports/made/operations?sort=pcc", "/api/reports/made/tensors/40/heatmap",
                "/api/compare-tensor/local/1", "/api/compare-tensor/local/1/histogram", "/api/runs?a=made&b=made"]:
        assert client.get(url).status_code == 200
    app.extensions["reportdb"].close()
    after = {p.name: (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns) for p in work.iterdir()}
    assert after == before


def test_unservable_reports_fail_at_start(tmp_path: Path) -> None:
    with pytest.raises(reportdb.errors.ReportNotFoundError):
        web.blueprint([tmp_path / "missing"])
    with pytest.raises(reportdb.errors.InvalidArgumentError):
        web.blueprint([])
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "db.sqlite").write_bytes(b"not a database" * 100)
    with pytest.raises(reportdb.ReportDBError):
        web.blueprint([tmp_path / "bad"])
    hostile = tmp_path / "hostile"
    make_report(hostile)
    conn = sqlite3.connect(hostile / "db.sqlite")
    conn.execute("CREATE VIEW rdb_evil AS SELECT 1")
    conn.execute("ALTER TABLE rdb_chunk RENAME TO rdb_chunk_old")
    conn.execute("CREATE VIEW rdb_chunk AS SELECT * FROM rdb_chunk_old")
    conn.commit()
    conn.close()
    with pytest.raises(reportdb.errors.UnsafeReportError):
        web.blueprint([hostile])


def test_a_report_table_not_laid_out_as_expected_is_422(made: Path, tmp_path: Path) -> None:
    work = tmp_path / "made"
    shutil.copytree(made, work)
    conn = sqlite3.connect(work / "db.sqlite")
    conn.execute("DROP TABLE operations")
    conn.execute("CREATE TABLE operations (operation_id, name blob)")  # no type: values stay as inserted
    conn.execute("INSERT INTO operations VALUES ('x', x'00ff')")
    conn.execute("INSERT INTO operations VALUES (7, x'00ff')")
    conn.commit()
    conn.close()
    app = web.create_app([work])
    page = get(app.test_client(), "/api/reports/made/operations")  # odd values are read as what they are, not a crash
    assert [i["id"] for i in page["items"]] == [7]
    app.extensions["reportdb"].close()


def test_a_report_view_under_a_report_tables_name_is_not_read(made: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """An endless recursive view named ``operations`` (a hostile report) is not one of the report's tables: the list is
    empty and answers instead of spinning, the golden analysis behind it too (it read the view until the engine's
    statement bound stopped it; the bound is lowered to 0.5 s so that a read of the view shows as an error)."""
    monkeypatch.setattr(engine, "STATEMENT_TIMEOUT", 0.5)
    work = tmp_path / "made"
    shutil.copytree(made, work)
    conn = sqlite3.connect(work / "db.sqlite")
    conn.execute("DROP TABLE operations")
    conn.execute("CREATE VIEW operations AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c)"
                 " SELECT x AS operation_id, 'op' AS name FROM c")
    conn.commit()
    conn.close()
    app = web.create_app([work])
    client = app.test_client()
    listed = get(client, "/api/reports/made/operations")
    assert (listed["total"], listed["items"]) == (0, [])
    assert get(client, "/api/reports")["reports"][0]["operations"] == 0
    app.extensions["reportdb"].close()
    golden = reportdb.compare_golden(work)  # the engine reads no view: no QueryTimeoutError, the records still judged
    assert golden.records and golden.first_culprit is not None
    assert listed["first_culprit"]["tensor_id"] == golden.first_culprit.tensor_id


@pytest.mark.parametrize("query", ["rank=-1", "rank=x", "limit=0", "limit=5000", "offset=-3", "sort=size", "order=up"])
def test_bad_operation_list_parameters(client: Any, query: str) -> None:
    get(client, f"/api/reports/r64/operations?{query}", 400)


@pytest.mark.slow
def test_no_parameter_makes_a_500(client: Any) -> None:
    """Every endpoint with odd values for every parameter answers JSON with a 2xx or 4xx, never a 500."""
    urls = ["/api/reports/made/tensors/1/values", "/api/reports/made/tensors/20/heatmap",
            "/api/compare-tensor/local/1", "/api/compare-tensor/local/1/heatmap", "/api/compare-tensor/local/1/point",
            "/api/compare-tensor/local/1/histogram", "/api/reports/made/operations", "/api/reports/made/tensors/20"]
    odd = ["", "-", ":", ",", "0" * 5000, "1e400", "-0", "9" * 30, "nan", "inf", "\u00e9", "0,0,0,0,0,0,0,0,0", "%00"]
    names = ["slice", "rank", "device", "format", "index", "y", "x", "width", "height", "error", "rtol", "atol",
             "pcc", "at", "bins", "sort", "limit", "report"]
    for url in urls:
        for name in names:
            for value in odd:
                response = client.get(url, query_string={name: value, **({} if name == "report" else {"report": "made"})})
                assert response.status_code < 500 and response.mimetype in ("application/json", "image/png"), (url, name, value)


# --- the page and the blueprint in another app ---------------------------------------------------------------------------


def test_blueprint_under_a_prefix_in_another_app(made: Path) -> None:
    app = flask.Flask("host")

    @app.get("/api/own")
    def own() -> dict[str, str]:
        return {"own": "yes"}

    bp = web.blueprint([made])
    app.register_blueprint(bp, url_prefix="/reportdb")
    client = app.test_client()
    assert client.get("/api/own").get_json() == {"own": "yes"}
    assert client.get("/reportdb/api/reports").get_json()["reports"][0]["name"] == "made"
    assert client.get("/reportdb/api/compare-tensor/local/1").get_json()["passed"] is True
    assert client.get("/api/reports").status_code == 404  # nothing of ours outside the prefix
    if (web.api.STATIC / "index.html").is_file():
        page = client.get("/reportdb/")
        assert page.status_code == 200 and page.mimetype == "text/html"
        assert "default-src 'self'" in page.headers["Content-Security-Policy"]
        assert client.get("/reportdb").status_code in (301, 308)  # to P/, so the page's relative URLs resolve
    bp.close()


def test_colormaps_describe_the_png_scales(client: Any) -> None:
    maps = get(client, "/api/colormaps")
    for name in ("sequential", "diverging", "mask"):
        assert len(maps[name]) == 256 and maps[name] == views.LUTS[name].tolist()
    assert maps["nonfinite"]["nan"] == list(views.NONFINITE["nan"])


def test_scale_for_picks_diverging_only_for_both_signs() -> None:
    assert views.scale_for(np.array([[-1.0, 2.0]]), None).to_json() == {"name": "diverging", "min": -2.0, "max": 2.0}
    assert views.scale_for(np.array([[1.0, 2.0]]), None).name == "sequential"
    assert views.scale_for(np.array([[0.5, math.nan]]), "abs").to_json() == {"name": "sequential", "min": 0.0, "max": 0.5}
    assert views.scale_for(np.array([[0.0]]), "mask").name == "mask"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cy, cx", [(1, 1), (2, 3), (7, 1), (1, 17), (5, 40), (64, 64)])
def test_maxabs_pool_keeps_sign_ties_and_nonfinite(dtype: type, cy: int, cx: int) -> None:
    values = np.random.default_rng(cy * 100 + cx).standard_normal((61, 83)).astype(dtype)
    values[3, 3], values[3, 4] = 2.5, -2.5  # a tie: the positive one
    values[40, 50], values[40, 51] = np.inf, -np.inf
    values[10, 70] = np.nan
    values[59, 80] = -9.0
    values[20:30, 0:20] = -0.0
    got = views.maxabs_pool(values, cy, cx)
    assert got.dtype == values.dtype
    np.testing.assert_array_equal(got, ref_pool(values, cy, cx))
    np.testing.assert_array_equal(views.maxabs_pool(np.abs(values), cy, cx, signed=False), ref_pool(np.abs(values), cy, cx))


# --- streaming, tolerances at a point, pictures (round 2) ------------------------------------------------------------


def test_point_takes_the_tolerances(client: Any) -> None:
    """The hover's point says whether the element passes at the page's rtol/atol, and the bound it was held to."""
    url = "/api/compare-tensor/local/1/point?report=made&at=1,5,7"
    g = float(GOLDEN[1, 5, 7])
    default = get(client, url)
    assert default["mismatch"] is True and default["tolerances"] == dict(zip(("rtol", "atol"), dtype_defaults("float32")[1]))
    loose = get(client, url + "&rtol=0.01&atol=0.6")
    assert loose["mismatch"] is False and loose["allowed"] == pytest.approx(0.6 + 0.01 * abs(g))
    assert loose["abs_error"] == default["abs_error"]  # the errors do not depend on the tolerances
    assert get(client, "/api/compare-tensor/local/3/point?report=made&at=3,4&atol=1e30")["mismatch"] is True  # NaN
    get(client, url + "&rtol=-1", 400)


def _spy_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The element count of every array ``Report.tensor`` returns from now on."""
    sizes: list[int] = []
    real = reportdb.Report.tensor

    def spy(self: reportdb.Report, *args: Any, **kwargs: Any) -> Any:
        out = real(self, *args, **kwargs)
        sizes.append(int(np.asarray(out).size))
        return out

    monkeypatch.setattr(reportdb.Report, "tensor", spy)
    return sizes


def test_compare_tensor_reads_window_by_window(made: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """compare-tensor streams both tensors through small windows (never a whole one) and gives reportdb.compare's
    metrics; a shape mismatch reads nothing."""
    monkeypatch.setattr(streamed, "WINDOW_ELEMENTS", 100)
    app = web.create_app([made])
    sizes = _spy_reads(monkeypatch)
    got = get(app.test_client(), "/api/compare-tensor/local/1?rtol=1e-4&atol=1e-3")["metrics"]
    expected = reportdb.compare(ACTUAL, GOLDEN, rtol=1e-4, atol=1e-3).to_dict()
    assert sizes and max(sizes) <= 140 and sum(sizes) == 2 * ACTUAL.size  # windows of whole 70-element rows
    for key, value in expected.items():
        assert got[key] == (pytest.approx(value, rel=1e-9) if isinstance(value, float) else json.loads(json.dumps(value)))
    odd = streamed.compare_streamed(lambda w: pytest.fail("read"), lambda w: pytest.fail("read"), (2, 3), (3, 2),
                                       np.dtype(np.float32), np.dtype(np.float32), rtol=1e-5, atol=1e-8, pcc=0.99)
    assert odd.shape_mismatch and not odd.passed and (odd.shape_a, odd.shape_b) == ((2, 3), (3, 2))
    app.extensions["reportdb"].close()


def test_runs_read_window_by_window(made: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run against run compares each output pair window by window (none read whole) and gives compare_runs' rows."""
    with reportdb.open(made) as a:
        expected = json.loads(json.dumps(reportdb.compare_runs(a, a, atol=1e-2).to_dict()))
    monkeypatch.setattr(streamed, "WINDOW_ELEMENTS", 64)
    app = web.create_app([made, made])  # served as made and made-2
    sizes = _spy_reads(monkeypatch)
    got = get(app.test_client(), "/api/runs?a=made&b=made-2&atol=1e-2")
    app.extensions["reportdb"].close()
    assert [r["status"] for r in expected["rows"]].count("compared") >= 3
    biggest = max(math.prod(r["shape"]) for r in expected["rows"] if r["shape"])
    assert biggest > 2 * 64 and sizes and max(sizes) <= 70  # no output pair was read whole: rows of at most 70
    assert got["first_divergence"] == expected["first_divergence"] and len(got["items"]) == len(expected["rows"])
    for row, want in zip(got["items"], expected["rows"]):
        assert (row["status"], row["passed"], row["shape"], row["flags"]) == (want["status"], want["passed"], want["shape"],
                                                                             want["flags"])
        assert row["pcc"] == (None if want["pcc"] is None else pytest.approx(want["pcc"], rel=1e-9))
        assert row["metrics"] == (None if want["metrics"] is None else {
            k: pytest.approx(v, rel=1e-9) if isinstance(v, float) else v for k, v in want["metrics"].items()})


def test_pool_region_pipelines_bands_and_stops_at_a_failed_read() -> None:
    """Bands are read one ahead in a helper thread, pooled in order; a read that fails ends the pooling with its error
    once no read of the request is still running."""
    values = np.random.default_rng(5).standard_normal((50, 40)).astype(np.float32)
    area = views.region(values.shape, None, slice(None), slice(None), 8, 10)
    bands = list(area.bands())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(views, "BAND_ELEMENTS", 200)
        bands = list(area.bands())
        assert len(bands) > 3
        grid = views.pool_region(area, lambda y0, y1: values[y0:y1])
        np.testing.assert_array_equal(grid, ref_pool(values, area.cy, area.cx))
        read: list[int] = []

        def failing(y0: int, y1: int) -> np.ndarray:
            read.append(y0)
            if y0 >= bands[2][0]:
                raise reportdb.errors.CorruptionError("damaged")
            return values[y0:y1]

        with pytest.raises(reportdb.errors.CorruptionError):
            views.pool_region(area, failing)
        assert read == [b[0] for b in bands[:3]]  # nothing read past the failure


def test_png_of_a_large_image_is_one_valid_zlib_stream() -> None:
    """An image whose rows are deflated in two halves at once still decodes to itself (one zlib stream, adler32 of
    the whole)."""
    rgb = np.random.default_rng(9).integers(0, 6, (700, 600, 3)).astype(np.uint8)
    assert rgb.size + 700 > views._SPLIT_DEFLATE
    np.testing.assert_array_equal(read_png(views.png(rgb)), rgb)
    np.testing.assert_array_equal(read_png(views.png(rgb[:5, :7])), rgb[:5, :7])


def test_colour_maps_each_cell_through_its_scale() -> None:
    grid = np.array([[-2.0, -1.0, 0.0, 0.99, 2.0], [np.nan, np.inf, -np.inf, 1e300, -1e300]])
    scale = views.Scale("diverging", -2.0, 2.0)
    rgb = views.colour(grid, scale)
    for (i, j), value in np.ndenumerate(grid):
        if math.isnan(value):
            want = views.NONFINITE["nan"]
        elif math.isinf(value):
            want = views.NONFINITE["inf" if value > 0 else "-inf"]
        else:
            want = tuple(views.LUTS["diverging"][int(min(255.0, max(0.0, (value + 2.0) / 4.0 * 255.0 + 0.5)))])
        assert tuple(rgb[i, j]) == tuple(want), (i, j, value)
    flat = views.colour(np.full((2, 2), 3.0, np.float32), views.Scale("sequential", 3.0, 3.0))
    assert (flat == views.LUTS["sequential"][128]).all()
