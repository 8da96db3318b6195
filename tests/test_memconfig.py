"""Memory-config, shape, dtype and layout strings of every report age parse into the same structure."""

from __future__ import annotations

import json
import re
import sqlite3
from contextlib import closing
from typing import Any

import pytest
from conftest import FIXTURES

from reportdb.dtypes import DTYPES, TTNN_STORAGE_DTYPE
from reportdb.formats.memconfig import parse_dtype, parse_layout, parse_memory_config, parse_shape

MEMORY_LAYOUTS = {"INTERLEAVED", "SINGLE_BANK", "HEIGHT_SHARDED", "WIDTH_SHARDED", "BLOCK_SHARDED"}
BUFFER_TYPES = {"DRAM", "L1", "SYSTEM_MEMORY", "L1_SMALL", "TRACE"}


def _query(sql: str) -> set[str]:
    """Distinct non-null values of a one-column query over every fixture report database."""
    values: set[str] = set()
    for path in sorted(FIXTURES.glob("*/report/db.sqlite")):
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
            values.update(v for (v,) in conn.execute(sql) if v is not None)
    return values


def _manifest_entries() -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    for path in sorted(FIXTURES.glob("*/manifest.json")):
        entries.extend(json.loads(path.read_text())["files"])
    return entries


def _distinct(column: str) -> list[str]:
    """Distinct non-null ``tensors.column`` values of every fixture report."""
    return sorted(_query(f"SELECT DISTINCT {column} FROM tensors"))


def _real_memory_configs() -> list[str]:
    """Every memory-config text in the fixtures: manifests, tensors, and operation arguments."""
    values = {e["memory_config"] for e in _manifest_entries() if e.get("memory_config")}
    values.update(_distinct("memory_config"))
    values.update(
        _query(
            "SELECT DISTINCT value FROM operation_arguments WHERE name = 'memory_config' OR value LIKE '%MemoryConfig%'"
        )
    )
    return sorted(values)


REAL_MEMORY_CONFIGS = _real_memory_configs()

# The four formats of research/visualizer-and-report-schemas.md §1.5, completed where the note elides.
FORMAT_1 = (
    "MemoryConfig(memory_layout=TensorMemoryLayout::HEIGHT_SHARDED,buffer_type=BufferType::L1,"
    "shard_spec=ShardSpec(grid={[(x=0,y=0) - (x=7,y=7)]},shape={32, 64},orientation=ShardOrientation::ROW_MAJOR,halo=0))"
)
FORMAT_2 = (
    "MemoryConfig(memory_layout=TensorMemoryLayout::HEIGHT_SHARDED,buffer_type=BufferType::L1,"
    "shard_spec=ShardSpec(grid={[(x=0,y=0) - (x=7,y=7)]},shape={32, 64},orientation=ShardOrientation::ROW_MAJOR,"
    "mode=ShardMode::PHYSICAL,physical_shard_shape=std::nullopt))"
)
FORMAT_3 = FORMAT_2[:-1] + ",nd_shard_spec=std::nullopt,created_with_nd_shard_spec=0)"
# As ttnn-visualizer documents the 2026 graph-capture text, including its shard grid's missing brace.
FORMAT_4 = (
    "MemoryConfig(memory_layout=TensorMemoryLayout::HEIGHT_SHARDED,buffer_type=BufferType::L1,"
    'shard_spec=ShardSpec{grid=[{"start":{"x":0,"y":0},"end":{"x":5,"y":7}], shape=[224, 224], '
    "orientation=ShardOrientation::ROW_MAJOR},"
    'nd_shard_spec={"shard_shape":[224, 224],"grid":[{"start":{"x":0,"y":0},"end":{"x":5,"y":7}}],'
    '"orientation":"ShardOrientation::ROW_MAJOR","shard_distribution_strategy":"ShardDistributionStrategy::ROUND_ROBIN_1D"},'
    "created_with_nd_shard_spec=0)"
)

SHARD_8X8 = {
    "grid": [[[0, 0], [7, 7]]],
    "shape": [32, 64],
    "orientation": "ROW_MAJOR",
    "mode": None,
    "physical_shard_shape": None,
    "halo": None,
}


def _config(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "memory_layout": None,
        "buffer_type": None,
        "shard_spec": None,
        "nd_shard_spec": None,
        "created_with_nd_shard_spec": None,
        "extra": {},
    }
    return {**base, **fields}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            FORMAT_1,
            _config(memory_layout="HEIGHT_SHARDED", buffer_type="L1", shard_spec={**SHARD_8X8, "halo": False}),
            id="2024-halo",
        ),
        pytest.param(
            FORMAT_2,
            _config(memory_layout="HEIGHT_SHARDED", buffer_type="L1", shard_spec={**SHARD_8X8, "mode": "PHYSICAL"}),
            id="2025-mode",
        ),
        pytest.param(
            FORMAT_3,
            _config(
                memory_layout="HEIGHT_SHARDED",
                buffer_type="L1",
                shard_spec={**SHARD_8X8, "mode": "PHYSICAL"},
                created_with_nd_shard_spec=False,
            ),
            id="mid-2025-nd",
        ),
        pytest.param(
            FORMAT_4,
            _config(
                memory_layout="HEIGHT_SHARDED",
                buffer_type="L1",
                shard_spec={**SHARD_8X8, "grid": [[[0, 0], [5, 7]]], "shape": [224, 224]},
                nd_shard_spec={
                    "shard_shape": [224, 224],
                    "grid": [[[0, 0], [5, 7]]],
                    "orientation": "ROW_MAJOR",
                    "shard_distribution_strategy": "ROUND_ROBIN_1D",
                },
                created_with_nd_shard_spec=False,
            ),
            id="2026-graph-capture",
        ),
        pytest.param(
            "MemoryConfig(WIDTH_SHARDED,L1,shard_spec=ShardSpec{grid=[{0,0}-{7,3}], shape=[32, 64]})",
            _config(
                memory_layout="WIDTH_SHARDED",
                buffer_type="L1",
                shard_spec={**SHARD_8X8, "grid": [[[0, 0], [7, 3]]], "orientation": None},
            ),
            id="abbreviated-positional",
        ),
        pytest.param(
            "MemoryConfig(memory_layout=TensorMemoryLayout::BLOCK_SHARDED,buffer_type=BufferType::L1,"
            "shard_spec=ShardSpec(grid={[(x=0,y=0) - (x=3,y=1)], [(x=0,y=5) - (x=1,y=6)]},shape={64, 32},"
            "orientation=ShardOrientation::COL_MAJOR,mode=ShardMode::LOGICAL,physical_shard_shape={64, 64}))",
            _config(
                memory_layout="BLOCK_SHARDED",
                buffer_type="L1",
                shard_spec={
                    "grid": [[[0, 0], [3, 1]], [[0, 5], [1, 6]]],
                    "shape": [64, 32],
                    "orientation": "COL_MAJOR",
                    "mode": "LOGICAL",
                    "physical_shard_shape": [64, 64],
                    "halo": None,
                },
            ),
            id="two-ranges-physical-shape",
        ),
        pytest.param(
            "MemoryConfig(memory_layout=TensorMemoryLayout.INTERLEAVED,buffer_type=BufferType.DRAM)",
            _config(memory_layout="INTERLEAVED", buffer_type="DRAM"),
            id="python-dot-enums",
        ),
    ],
)
def test_documented_formats(text: str, expected: dict[str, Any]) -> None:
    assert parse_memory_config(text) == expected


def test_ttnn_081_sharded_with_nd_shard_spec() -> None:
    text = next(t for t in REAL_MEMORY_CONFIGS if "NdShardSpec(" in t)
    parsed = parse_memory_config(text)
    assert parsed is not None
    assert parsed["shard_spec"]["grid"] == parsed["nd_shard_spec"]["grid"] == [[[0, 0], [1, 0]]]
    assert parsed["nd_shard_spec"] == {
        "shard_shape": [32, 64],
        "grid": [[[0, 0], [1, 0]]],
        "orientation": "ROW_MAJOR",
        "shard_distribution_strategy": "ROUND_ROBIN_1D",
    }
    assert parsed["extra"] == {}


def test_real_strings_were_found(fixtures_dir: Any) -> None:
    assert any(t.startswith("MemoryConfig(") for t in REAL_MEMORY_CONFIGS)
    assert _distinct("shape") and _distinct("dtype") and _distinct("layout")


@pytest.mark.parametrize("text", REAL_MEMORY_CONFIGS)
def test_every_real_memory_config(text: str) -> None:
    parsed = parse_memory_config(text)
    assert parsed is not None
    if not text.startswith("MemoryConfig("):
        assert parsed == {"unparsed": text}  # e.g. the bare "DRAM" of an operation argument
        return
    assert parsed["memory_layout"] in MEMORY_LAYOUTS
    assert parsed["buffer_type"] in BUFFER_TYPES
    assert parsed["created_with_nd_shard_spec"] is False
    assert set(parsed["extra"]) <= {"per_core_allocation", "range_lockstep_allocation"}
    assert all(parsed["extra"][k] == "0" for k in parsed["extra"])
    assert ("per_core_allocation=0" in text) == ("per_core_allocation" in parsed["extra"])
    if parsed["memory_layout"].endswith("_SHARDED"):
        spec = parsed["shard_spec"]
        assert spec["grid"] and spec["shape"] and spec["orientation"] == "ROW_MAJOR"
        (x0, y0), (x1, y1) = spec["grid"][0]
        assert f"(x={x0},y={y0}) - (x={x1},y={y1})" in text
        assert "shape={%d, %d}" % tuple(spec["shape"]) in text
    else:
        assert parsed["shard_spec"] is None and parsed["nd_shard_spec"] is None


MEMORY_CONFIG_NAMES = {
    "dram_interleaved": ("INTERLEAVED", "DRAM"),
    "l1_interleaved": ("INTERLEAVED", "L1"),
    "height_sharded_l1": ("HEIGHT_SHARDED", "L1"),
}


@pytest.mark.parametrize(
    "entry", [e for e in _manifest_entries() if "memory_config_name" in e], ids=lambda e: e["name"]
)
def test_manifest_memory_config_names(entry: dict[str, Any]) -> None:
    parsed = parse_memory_config(entry["memory_config"])
    assert parsed is not None
    assert (parsed["memory_layout"], parsed["buffer_type"]) == MEMORY_CONFIG_NAMES[entry["memory_config_name"]]


@pytest.mark.parametrize("text", [None, "", "None", "  ", "std::nullopt"])
def test_missing_memory_config(text: str | None) -> None:
    assert parse_memory_config(text) is None


def test_unknown_keys_are_kept_verbatim() -> None:
    text = (
        "MemoryConfig(memory_layout=TensorMemoryLayout::INTERLEAVED,buffer_type=BufferType::DRAM,"
        "shard_spec=ShardSpec(grid={[(x=0,y=0) - (x=1,y=1)]},shape={32, 32},orientation=ShardOrientation::ROW_MAJOR,"
        "future_field={1, 2}),new_thing=Foo(a=1,b=[2, 3]),buffer_type2=7)"
    )
    parsed = parse_memory_config(text)
    assert parsed is not None
    assert parsed["extra"] == {"shard_spec.future_field": "{1, 2}", "new_thing": "Foo(a=1,b=[2, 3])", "buffer_type2": "7"}
    assert parsed["shard_spec"]["grid"] == [[[0, 0], [1, 1]]]


def test_unreadable_known_values_go_to_extra() -> None:
    parsed = parse_memory_config("MemoryConfig(memory_layout=??,buffer_type=1,shard_spec=ShardSpec(grid=oops),halo=x)")
    assert parsed is not None
    assert parsed["memory_layout"] is None and parsed["buffer_type"] is None
    assert parsed["shard_spec"]["grid"] is None
    assert parsed["extra"] == {"memory_layout": "??", "buffer_type": "1", "shard_spec.grid": "oops", "halo": "x"}


@pytest.mark.parametrize(
    "text",
    [
        "DRAM",
        "L1",
        "MemoryConfig(",
        "MemoryConfig)",
        "MemoryConfig(]]]}}})",
        "MemoryConfig(((((((",
        'MemoryConfig(memory_layout="unterminated',
        "MemoryConfig(shard_spec=ShardSpec(grid={[(x=0,y=0) - (x=7",
        "MemoryConfig(shard_spec=ShardSpec(grid={[(x=0,y=0)]},shape={a, b}))",
        "MemoryConfig(" + "[" * 5000 + ")",
        "MemoryConfig(memory_layout=TensorMemoryLayout::HEIGHT_SHARDED)" * 3,
        "Mémoire(configuration=✓)",
        "{'memory_layout': 'INTERLEAVED'}",
        "<ttnn._ttnn.tensor.MemoryConfig object at 0x7f>",
        "\x00\x01",
    ],
)
def test_odd_strings_do_not_raise(text: str) -> None:
    parsed = parse_memory_config(text)
    assert isinstance(parsed, dict)
    if "unparsed" in parsed:
        assert parsed == {"unparsed": text}
    json.dumps(parsed)


# --- shapes, dtypes, layouts ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "shape", "padded"),
    [
        ("Shape([1, 1, 32, 32])", [1, 1, 32, 32], None),
        ("ttnn.Shape([1, 1, 1[32], 2048])", [1, 1, 1, 2048], [1, 1, 32, 2048]),
        ("ttnn.Shape([1[32], 7[32]])", [1, 7], [32, 32]),
        ("torch.Size([1, 1, 32, 64])", [1, 1, 32, 64], None),
        ("torch.Size([])", [], None),
        ("Shape([])", [], None),
        ("[1, 2]", [1, 2], None),
        ("(3,)", [3], None),
        ("  Shape( [ 4 , 5 ] ) ", [4, 5], None),
    ],
)
def test_parse_shape(text: str, shape: list[int], padded: list[int] | None) -> None:
    assert parse_shape(text) == {"shape": shape, "padded_shape": padded}


@pytest.mark.parametrize("text", [None, "", "Shape", "Shape([a, b])", "[1,,2]", "[,]", "Shape([1, 2]) tail", "[-1]"])
def test_unreadable_shape(text: str | None) -> None:
    assert parse_shape(text) is None


@pytest.mark.parametrize("text", _distinct("shape"))
def test_every_real_shape(text: str) -> None:
    parsed = parse_shape(text)
    assert parsed is not None
    assert parsed["shape"] == [int(v) for v in re.findall(r"\d+", text)]


@pytest.mark.parametrize("entry", [e for e in _manifest_entries() if "shape" in e], ids=lambda e: e["name"])
def test_manifest_shapes(entry: dict[str, Any]) -> None:
    assert parse_shape(str(entry["shape"])) == {"shape": entry["shape"], "padded_shape": None}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("DataType.BFLOAT16", "BFLOAT16"),
        ("DataType::BFLOAT8_B", "BFLOAT8_B"),
        ("ttnn.DataType.FLOAT32", "FLOAT32"),
        ("<DataType.UINT32: 1>", "UINT32"),
        ("torch.bfloat16", "bfloat16"),
        ("bfloat16", "bfloat16"),
        (None, None),
        ("", None),
        ("None", None),
        ("not a dtype", None),
    ],
)
def test_parse_dtype(text: str | None, expected: str | None) -> None:
    assert parse_dtype(text) == expected


def test_every_real_dtype() -> None:
    texts = set(_distinct("dtype")) | {e["dtype"] for e in _manifest_entries()}
    for text in texts:
        name = parse_dtype(text)
        assert name in (DTYPES if text.startswith("torch.") else TTNN_STORAGE_DTYPE), text


@pytest.mark.parametrize(
    ("text", "expected"),
    [("Layout.TILE", "TILE"), ("Layout::ROW_MAJOR", "ROW_MAJOR"), ("torch.strided", "strided"), (None, None), ("", None)],
)
def test_parse_layout(text: str | None, expected: str | None) -> None:
    assert parse_layout(text) == expected


def test_every_real_layout() -> None:
    texts = set(_distinct("layout")) | {e["layout"] for e in _manifest_entries() if e.get("layout")}
    assert {parse_layout(t) for t in texts} <= {"TILE", "ROW_MAJOR", "strided"}
