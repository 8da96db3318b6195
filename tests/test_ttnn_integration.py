"""Integration with the real ttnn wheels, each in its own cached venv (see ``ttnn_env.py``).

- ttnn 0.62.2 on CPython 3.10: a report written through the legacy ``ttnn.database`` with
  ``reportdb.ttnn.patch_database()``: every row in the report database, text verbatim, detailed
  tensors in the database (no ``tensors/`` folder) with the values ttnn itself reads.
- ttnn 0.81.1 on CPython 3.12: ``reportdb.ttnn.convert`` of host, block-float, custom-tile, sharded
  memory-config and multi-device tensors, checked against ttnn's own values and against reportdb's
  reader of the ``.tensorbin`` that ``ttnn.dump_tensor`` writes; and ``capture()`` through the hooks.
"""

from __future__ import annotations

import json
import sqlite3
import textwrap
from pathlib import Path

import numpy as np
import pytest

import reportdb
from ttnn_env import ttnn_env

pytestmark = pytest.mark.slow

def _result(stdout: str) -> dict:
    """The script's ``RESULT {json}`` line (ttnn logs to stdout too)."""
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"no RESULT line in:\n{stdout[-3000:]}"
    return json.loads(lines[-1][len("RESULT "):])


NASTY = ["it's", 'say "hi"', "'); DROP TABLE operations; --", "two\nlines", "ünïcødé ✓ 漢字"]

LEGACY_SCRIPT = textwrap.dedent(
    """
    import dataclasses, json, pathlib, sys, types
    import numpy as np
    import ttnn
    try:
        import torch  # noqa: F401
    except ImportError:  # ttnn.database imports torch for isinstance checks only
        stub = types.ModuleType("torch"); stub.Tensor = type("Tensor", (), {}); sys.modules["torch"] = stub
    import ttnn.database as db
    from reportdb.ttnn import patch_database

    out = pathlib.Path(sys.argv[1]); nasty = json.loads(sys.argv[2])
    report = out / "report"; expected = out / "expected"; expected.mkdir(parents=True)
    ttnn.CONFIG.enable_detailed_tensor_report = True

    @dataclasses.dataclass
    class Op:
        python_fully_qualified_name: str

    def make(values, shape, dtype, tile):
        t = ttnn.Tensor([float(v) for v in values], shape, ttnn.float32, ttnn.ROW_MAJOR_LAYOUT)
        if dtype != ttnn.float32:
            t = ttnn.to_dtype(t, dtype)
        return t.pad_to_tile(0.0).to(ttnn.TILE_LAYOUT) if tile else t

    def readback(t):
        if t.layout == ttnn.TILE_LAYOUT:
            t = t.to(ttnn.ROW_MAJOR_LAYOUT)
        return np.array(ttnn.to_dtype(t, ttnn.float32).to_list(), dtype=np.float32).reshape(list(t.shape))

    rng = np.random.default_rng(3)
    tid = 1
    with patch_database(batch_seconds=0):
        prev = None
        for op_id in range(1, 6):
            op = Op(["ttnn.add", "ttnn.matmul", "ttnn.softmax"][op_id % 3])
            db.insert_operation(report, op_id, op, None)
            ins = [prev] if prev is not None else []
            for k in range(2):
                shape = [1, 1, int(rng.integers(1, 40)), int(rng.integers(1, 40))]
                dtype = [ttnn.bfloat16, ttnn.float32][k]
                t = make(rng.standard_normal(int(np.prod(shape))), shape, dtype, tile=bool(k))
                t.tensor_id = tid; tid += 1
                ins.append(t)
            db.insert_input_tensors(report, op_id, ins)
            db.insert_operation_arguments(report, op_id, list(nasty), {"memory_config": nasty[0], "note": nasty[1]})
            db.insert_stack_trace(report, op_id, [f"File 'model.py', line {op_id}", "it's \\"here\\"", "x", "y"])
            out_t = make(rng.standard_normal(32 * 64), [1, 1, 32, 64], ttnn.bfloat16, tile=True)
            out_t.tensor_id = tid; tid += 1
            db.insert_output_tensors(report, op_id, [out_t])
            db.insert_operation(report, op_id, op, 0.5 + op_id)
            rec = db.TensorComparisonRecord(out_t.tensor_id, 1000 + op_id, True, 0.99, 0.995)
            db.insert_tensor_comparison_records(report, "local_tensor_comparison_records", [rec])
            latest = db.query_latest_operation(report)
            assert latest.operation_id == op_id, latest
            for t in ins + [out_t]:
                np.save(expected / f"{t.tensor_id}.npy", readback(t))
            prev = out_t
        assert db.query_tensor_by_id(report, 1).shape.startswith("Shape(")
    print("RESULT", json.dumps({"tensors": tid - 1}))
    """
)


def test_legacy_062_report_through_patch_database(tmp_path: Path) -> None:
    env = ttnn_env("0.62.2", "3.10")
    script = tmp_path / "legacy.py"
    script.write_text(LEGACY_SCRIPT)
    proc = env.run(str(script), str(tmp_path), json.dumps(NASTY))
    count = _result(proc.stdout)["tensors"]
    report = tmp_path / "report"
    assert not (report / "tensors").exists(), "detailed tensors must go into the database, not files"
    assert (report / "config.json").is_file()
    conn = sqlite3.connect(report / "db.sqlite")
    try:
        assert conn.execute("SELECT operation_id, duration FROM operations ORDER BY operation_id").fetchall() == [
            (i, 0.5 + i) for i in range(1, 6)
        ]
        args = conn.execute("SELECT name, value FROM operation_arguments WHERE operation_id=2 ORDER BY rowid").fetchall()
        assert args == [(str(i), v) for i, v in enumerate(NASTY)] + [("memory_config", NASTY[0]), ("note", NASTY[1])]
        traces = conn.execute("SELECT stack_trace FROM stack_traces WHERE operation_id=1").fetchall()
        assert traces == [("it's \"here\"\nFile 'model.py', line 1",)]
        rows = conn.execute("SELECT tensor_id, shape, dtype, layout FROM tensors ORDER BY tensor_id").fetchall()
        assert [r[0] for r in rows] == list(range(1, count + 1))
        assert rows[0][1:] == (rows[0][1], "DataType.BFLOAT16", "Layout.ROW_MAJOR") and rows[0][1].startswith("Shape([")
        assert rows[1][2:] == ("DataType.FLOAT32", "Layout.TILE")
        links = conn.execute("SELECT COUNT(*) FROM input_tensors").fetchone()[0]
        assert links == 2 + 4 * 3
        assert conn.execute("SELECT COUNT(*) FROM local_tensor_comparison_records").fetchone()[0] == 5
    finally:
        conn.close()
    with reportdb.open(report) as r:
        assert r.tensor_ids() == list(range(1, count + 1))
        for tid in range(1, count + 1):
            expected = np.load(tmp_path / "expected" / f"{tid}.npy")
            np.testing.assert_array_equal(r.tensor(tid).astype(np.float32), expected)
            info = r.tensor_info(tid)
            assert info.spec.ttnn_dtype in ("BFLOAT16", "FLOAT32") and info.source["format"] == "ttnn"
    assert reportdb.verify(report).ok


DEVICE_REPORT_SCRIPT = textwrap.dedent(
    """
    import json, pathlib, sys, types
    import ttnn
    try:
        import torch  # noqa: F401
    except ImportError:
        stub = types.ModuleType("torch"); stub.Tensor = type("Tensor", (), {}); sys.modules["torch"] = stub
    import ttnn.database as db
    from reportdb.ttnn import patch_database

    out = pathlib.Path(sys.argv[1])
    reports = ttnn._ttnn.reports
    # No device can be opened here: ttnn's own readers of device memory are replaced by stand-ins that carry exactly
    # the attributes of ttnn's real result classes (read from the bindings), so both report writers see the same input.
    fields = {name: sorted(n for n in dir(getattr(reports, name)) if not n.startswith("_"))
              for name in ("DeviceInfo", "BufferInfo", "BufferPageInfo")}

    class Device:
        def __init__(self, i): self.i = i
        def id(self): return self.i

    devices = [Device(0), Device(1)]
    kind = lambda v: types.SimpleNamespace(value=v)
    info = {d.i: types.SimpleNamespace(**{n: 1000 * (d.i + 1) + k for k, n in enumerate(fields["DeviceInfo"])}) for d in devices}

    def buffers(devs):
        return [types.SimpleNamespace(device_id=d.id(), address=4096 * k + d.id(), max_size_per_bank=64 * k, buffer_type=kind(k % 2))
                for d in devs for k in range(3)]

    def pages(devs):
        # two banks on two cores, three pages each, one buffer per device
        return [types.SimpleNamespace(device_id=d.id(), address=4096 * d.id(), core_y=0, core_x=k % 2, bank_id=k % 2,
                                      page_index=k, page_address=8192 + 32 * k, page_size=32, buffer_type=kind(1))
                for d in devs for k in range(6)]

    for name, made in (("BufferInfo", buffers(devices)[0]), ("BufferPageInfo", pages(devices)[0])):
        assert sorted(vars(made)) == fields[name], (name, sorted(vars(made)), fields[name])
    reports.get_device_info = lambda device: info[device.id()]
    reports.get_buffers = buffers
    reports.get_buffer_pages = pages

    def run(report):
        db.insert_devices(report, devices)
        db.insert_devices(report, devices)  # a device already recorded is not recorded again
        for op in (1, 2):
            db.insert_buffers(report, op, devices)
            db.insert_buffer_pages(report, op, devices[op - 1:])

    run(out / "reference")  # ttnn's own database.py
    db.SQLITE_CONNECTION.close()
    with patch_database(batch_seconds=0):
        run(out / "report")
    print("RESULT", json.dumps({"device_fields": fields["DeviceInfo"]}))
    """
)


def test_legacy_062_devices_and_buffers_through_patch_database(tmp_path: Path) -> None:
    """insert_devices, insert_buffers and insert_buffer_pages write the rows ttnn's own database.py writes."""
    env = ttnn_env("0.62.2", "3.10")
    script = tmp_path / "devices.py"
    script.write_text(DEVICE_REPORT_SCRIPT)
    device_fields = _result(env.run(str(script), str(tmp_path)).stdout)["device_fields"]
    ref = sqlite3.connect(tmp_path / "reference" / "db.sqlite")
    ours = sqlite3.connect(tmp_path / "report" / "db.sqlite")
    try:
        for table, order in (("devices", "device_id"), ("buffers", "operation_id, device_id, address"),
                             ("buffer_pages", "operation_id, device_id, page_index")):
            columns = ", ".join(row[1] for row in ref.execute(f"PRAGMA table_info({table})"))
            expected = ref.execute(f"SELECT {columns} FROM {table} ORDER BY {order}").fetchall()
            assert expected, table
            assert ours.execute(f"SELECT {columns} FROM {table} ORDER BY {order}").fetchall() == expected, table
        assert len(device_fields) == 17
        # The chunks ttnn-visualizer makes of ttnn's pages (its GROUP BY), stored where it reads them in a new report.
        chunks = ("SELECT operation_id, device_id, address, bank_id, core_x, core_y, MIN(page_address),"
                  " MAX(page_address + page_size) - MIN(page_address), MAX(page_size), COUNT(*), buffer_type FROM buffer_pages"
                  " GROUP BY operation_id, device_id, address, bank_id, core_x, core_y, buffer_type ORDER BY 1, 2, 3, 4, 5, 6")
        stored = ("SELECT operation_id, device_id, address, bank_id, core_x, core_y, chunk_address, chunk_size, page_size,"
                  " num_pages, buffer_type FROM buffer_chunks ORDER BY 1, 2, 3, 4, 5, 6")
        assert ours.execute(stored).fetchall() == ref.execute(chunks).fetchall()
        assert {row[0] for row in ours.execute("SELECT num_pages FROM buffer_chunks")} == {3}
    finally:
        ref.close()
        ours.close()
    assert reportdb.verify(tmp_path / "report").ok


CONVERT_SCRIPT = textwrap.dedent(
    """
    import json, pathlib, sys
    import numpy as np
    import ttnn
    import reportdb
    from reportdb.ttnn import convert

    out = pathlib.Path(sys.argv[1]); (out / "files").mkdir(parents=True); (out / "expected").mkdir()
    rng = np.random.default_rng(5)

    def ttnn_values(t):
        if t.dtype not in (ttnn.float32, ttnn.uint32, ttnn.int32, ttnn.uint16, ttnn.uint8):
            t = ttnn.to_dtype(t, ttnn.float32)
        return np.asarray(t.to_numpy())

    def host(shape, dtype, layout, **kw):
        a = rng.standard_normal(shape).astype(np.float32) * 10
        if dtype in (ttnn.uint32, ttnn.uint16, ttnn.uint8, ttnn.int32):
            a = np.abs(a).astype({ttnn.uint32: np.uint32, ttnn.uint16: np.uint16, ttnn.uint8: np.uint8, ttnn.int32: np.int32}[dtype])
        return ttnn.Tensor(a, data_type=dtype, layout=layout, **kw)

    cases = {
        1: host([2, 20, 50], ttnn.float32, ttnn.ROW_MAJOR_LAYOUT),
        2: host([2, 20, 50], ttnn.bfloat16, ttnn.TILE_LAYOUT),
        3: host([3, 40, 70], ttnn.bfloat8_b, ttnn.TILE_LAYOUT),
        4: host([40, 70], ttnn.bfloat4_b, ttnn.TILE_LAYOUT),
        5: host([2, 40, 50], ttnn.bfloat8_b, ttnn.TILE_LAYOUT, tile=ttnn.Tile((16, 32))),
        6: host([5, 33], ttnn.uint32, ttnn.TILE_LAYOUT),
        7: host([7, 9], ttnn.int32, ttnn.ROW_MAJOR_LAYOUT),
        8: host([1, 1, 64, 64], ttnn.bfloat16, ttnn.TILE_LAYOUT, mem_config=ttnn.L1_MEMORY_CONFIG),  # 0.81 makes no sharded host tensor
        9: ttnn.from_host_shards([host([2, 32, 40], ttnn.bfloat16, ttnn.TILE_LAYOUT) for _ in range(4)], ttnn.MeshShape(1, 4)),
        10: ttnn.from_host_shards([host([2, 24, 16], ttnn.float32, ttnn.ROW_MAJOR_LAYOUT) for _ in range(8)], ttnn.MeshShape(2, 4)),
        11: ttnn.from_host_shards([host([1, 32, 32], ttnn.bfloat8_b, ttnn.TILE_LAYOUT)] * 2, ttnn.MeshShape(1, 2)),
    }
    with reportdb.Writer(out / "report", batch_seconds=0) as w:
        for tid, t in cases.items():
            w.put_tensor(tid, t)
            ttnn.dump_tensor(str(out / "files" / f"{tid}.tensorbin"), t)
            parts = ttnn.get_device_tensors(t)
            for i, part in enumerate(parts):
                np.save(out / "expected" / f"{tid}.{i}.npy", ttnn_values(part))
            c = convert(t)
            assert len(c.shards) == len(parts), (tid, len(c.shards), len(parts))
    print("RESULT", json.dumps({"ids": list(cases)}))
    """
)


def test_081_convert_host_block_float_and_multi_device(tmp_path: Path) -> None:
    env = ttnn_env("0.81.1", "3.12")
    script = tmp_path / "convert.py"
    script.write_text(CONVERT_SCRIPT)
    proc = env.run(str(script), str(tmp_path))
    ids = _result(proc.stdout)["ids"]
    with reportdb.open(tmp_path / "report") as r:
        assert r.tensor_ids() == ids
        for tid in ids:
            info = r.tensor_info(tid)
            from_file = reportdb.load_tensor_file(tmp_path / "files" / f"{tid}.tensorbin")
            shards = r.shards(tid)
            assert len(shards) == len(from_file.shards), tid
            for i, (coord, array) in enumerate(shards):
                expected = np.load(tmp_path / "expected" / f"{tid}.{i}.npy")
                np.testing.assert_array_equal(array.astype(expected.dtype), expected, err_msg=f"tensor {tid} shard {i}")
                file_coord, file_array = from_file.shards[i]
                assert coord == tuple(file_coord), (tid, coord, file_coord)
                np.testing.assert_array_equal(array, file_array)
            spec, file_spec = info.spec, from_file.spec
            for field in ("ttnn_dtype", "layout", "tile_shape", "padded_shape", "distribution"):
                assert getattr(spec, field) == getattr(file_spec, field), (tid, field, getattr(spec, field), getattr(file_spec, field))
            # the text ttnn prints carries more fields than the file (per_core_allocation...): compare the common ones
            assert {k: spec.memory_config[k] for k in file_spec.memory_config} == file_spec.memory_config, tid
        assert r.tensor_info(3).spec.ttnn_dtype == "BFLOAT8_B" and r.tensor_info(3).dtype == "bfloat16"
        assert r.tensor_info(5).spec.tile_shape == (16, 32)
        assert r.tensor_info(8).spec.memory_config["buffer_type"] == "L1"
        for tid in (9, 10, 11):  # assembled as the topology says (from_host_shards: shard along dim 0)
            np.testing.assert_array_equal(r.tensor(tid), reportdb.load_tensor_file(tmp_path / "files" / f"{tid}.tensorbin").array)
        assert r.tensor(9).shape == (8, 32, 40)
    conn = sqlite3.connect(tmp_path / "report" / "db.sqlite")
    try:
        assert conn.execute("SELECT dtype, layout FROM tensors WHERE tensor_id=3").fetchone() == ("DataType.BFLOAT8_B", "Layout.TILE")
        assert conn.execute("SELECT memory_config FROM tensors WHERE tensor_id=8").fetchone()[0].startswith("MemoryConfig(")
    finally:
        conn.close()


CAPTURE_SCRIPT = textwrap.dedent(
    """
    import importlib.util, json, pathlib, sys, types
    import numpy as np
    import ttnn
    if importlib.util.find_spec("torch") is None:
        ttnn.tracer = types.SimpleNamespace(ENABLE_TRACER=False)  # ttnn's slow mode imports it only with torch
    import reportdb
    from reportdb.ttnn import capture

    out = pathlib.Path(sys.argv[1])
    a = ttnn.Tensor(np.arange(2 * 20 * 50, dtype=np.float32).reshape(2, 20, 50), data_type=ttnn.float32, layout=ttnn.TILE_LAYOUT)
    with reportdb.Writer(out / "report", store="outputs") as w, capture(w, stack_traces=True):
        b = ttnn.to_layout(a, ttnn.ROW_MAJOR_LAYOUT)
        c = ttnn.reshape(b, (2, 1000))
    np.save(out / "c.npy", c.to_numpy())
    print("RESULT", json.dumps({"a": a.tensor_id, "b": b.tensor_id, "c": c.tensor_id}))
    """
)


def test_081_capture_records_operations_through_hooks(tmp_path: Path) -> None:
    env = ttnn_env("0.81.1", "3.12")
    script = tmp_path / "capture.py"
    script.write_text(CAPTURE_SCRIPT)
    proc = env.run(str(script), str(tmp_path), extra_env={"TTNN_CONFIG_OVERRIDES": '{"enable_fast_runtime_mode": false}'})
    ids = _result(proc.stdout)
    conn = sqlite3.connect(tmp_path / "report" / "db.sqlite")
    try:
        ops = conn.execute("SELECT operation_id, name, duration FROM operations ORDER BY operation_id").fetchall()
        assert [(o[0], o[1]) for o in ops] == [(1, "ttnn.to_layout"), (2, "ttnn.reshape")]
        assert all(o[2] is not None and o[2] >= 0 for o in ops)
        assert conn.execute("SELECT tensor_id FROM input_tensors WHERE operation_id=2").fetchall() == [(ids["b"],)]
        assert conn.execute("SELECT tensor_id FROM output_tensors ORDER BY operation_id").fetchall() == [(ids["b"],), (ids["c"],)]
        assert conn.execute("SELECT value FROM operation_arguments WHERE operation_id=2 AND name='1'").fetchall() == [("(2, 1000)",)]
        assert "capture.py" in conn.execute("SELECT stack_trace FROM stack_traces WHERE operation_id=1").fetchone()[0]
    finally:
        conn.close()
    with reportdb.open(tmp_path / "report") as r:
        assert r.tensor_ids() == sorted([ids["b"], ids["c"]])  # store="outputs": the input a is described only
        np.testing.assert_array_equal(r.tensor(ids["c"]), np.load(tmp_path / "c.npy"))
