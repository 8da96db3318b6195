"""The result types users read: dataclasses whose ``to_dict()`` is JSON-ready with the keys ``--json`` prints, one
shape for a tensor's statistics whatever its shard count, a checked read-back of a logged migration summary, and
small HTML tables for notebooks in which a report's own text (table names, operation names, sources, errors) is
escaped, never markup."""

from __future__ import annotations

import json
import sqlite3
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

import reportdb
from reportdb.errors import CorruptionError, InvalidArgumentError
from reportdb.legacy.summary import MigrationSummary
from reportdb.spec import Distribution, Placement

#: Report content that would run or restyle something if a notebook rendered it as markup.
HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>&amp;'

#: The keys (in order) ``compare --json`` has printed for every metric vector: kept, so scripts keep working.
COMPARISON_KEYS = [
    "shape_a", "shape_b", "dtype_a", "dtype_b", "rtol", "atol", "pcc_threshold", "fit_tol", "count", "finite_count",
    "pcc", "pcc_ttmetal", "cosine", "max_abs_error", "mean_abs_error", "max_rel_error", "mean_rel_error", "ulp_dtype",
    "ulp_max", "ulp_mean", "allclose_mismatches", "nan_mismatches", "inf_mismatches", "fit_scale", "fit_offset",
    "constant_input", "scale_or_offset_error", "nonfinite_mismatch", "shape_mismatch", "passed", "notes",
    "sqnr_db", "abs_error_p50", "abs_error_p99", "abs_error_p999", "bitwise_equal",  # added after the others
    "tile_shape", "tile_sqnr_db", "worst_tile", "tile_sqnr_p50", "full_stats",
]


class _Tables(HTMLParser):
    """The tables of an HTML fragment as lists of rows of cell texts (captions apart), and every tag seen."""

    def __init__(self, markup: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.tables: list[list[list[str]]] = []
        self.captions: list[str] = []
        self._cell: list[str] | None = None
        self._caption: list[str] | None = None
        self.feed(markup)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "caption":
            self._caption = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell))
            self._cell = None
        elif tag == "caption" and self._caption is not None:
            self.captions.append("".join(self._caption))
            self._caption = None

    def handle_data(self, data: str) -> None:
        for buf in (self._cell, self._caption):
            if buf is not None:
                buf.append(data)


def parsed(markup: str) -> _Tables:
    """The parsed fragment, checked to hold only table markup (report text escaped, never a tag of its own)."""
    tables = _Tables(markup)
    assert set(tables.tags) <= {"table", "caption", "tr", "th", "td"}, tables.tags
    return tables


def field_cells(markup: str) -> dict[str, str]:
    """The first table of a two-column (field, value) HTML view, as a dict."""
    rows = parsed(markup).tables[0]
    assert rows[0] == ["field", "value"]
    return {row[0]: row[1] for row in rows[1:]}


def _run(path: Path, names: list[str], scale: float = 1.0) -> Path:
    """A Writer report of one operation output per name, the second one scaled by ``scale``."""
    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)
    with reportdb.Writer(path) as w:
        for op_id, name in enumerate(names, 1):
            w.put_tensor(op_id, x * (scale if op_id == 2 else 1.0) + op_id)
            w.add_operation(op_id, name, outputs=[op_id])
    return path


# --- to_dict: the keys --json printed before --------------------------------------------------------------------


def test_comparison_to_dict_keeps_the_json_keys_and_is_strict_json() -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = a.copy()
    b[0, 0] = np.nan
    result = reportdb.compare(a, b)
    data = result.to_dict()
    assert list(data) == COMPARISON_KEYS
    assert data["shape_a"] == [3, 4] and data["notes"] == list(result.notes) and data["nan_mismatches"] == 1
    assert json.loads(json.dumps(data, allow_nan=False)) == data
    assert result.flags == ("nonfinite_mismatch",) and not result.passed
    mismatch = reportdb.compare(a, b.T).to_dict()
    assert list(mismatch) == COMPARISON_KEYS and mismatch["shape_mismatch"] and mismatch["pcc"] is None
    with pytest.raises(AttributeError):  # frozen: a result read by many is not changed by one
        result.passed = True  # type: ignore[misc]


def test_run_comparison_and_golden_results_nest_their_metrics(tmp_path: Path) -> None:
    a = _run(tmp_path / "a", ["ttnn.add", "ttnn.relu"])
    b = _run(tmp_path / "b", ["ttnn.add", "ttnn.relu"], scale=2.0)
    with reportdb.open(a) as ra, reportdb.open(b) as rb:
        result = reportdb.compare_runs(ra, rb)
    assert [r.first_divergence for r in result.rows] == [False, True] and result.first_divergence == result.rows[1]
    data = result.to_dict()
    assert list(data) == ["first_divergence", "counts", "matched_by", "rows", "unmatched_a", "unmatched_b"]
    assert list(data["rows"][1]) == [
        "operation_id_a", "operation_id_b", "name", "output_index", "tensor_a", "tensor_b", "shape", "pcc",
        "max_abs_error", "ulp_max", "flags", "passed", "metrics", "status", "first_divergence",
        "verdict", "failed", "notes",  # added after the others
    ]
    assert data["first_divergence"] == data["rows"][1] and data["rows"][1]["shape"] == [8, 8]
    assert data["rows"][1]["flags"] == ["scale_or_offset_error"] and list(data["rows"][1]["metrics"]) == COMPARISON_KEYS
    json.dumps(data, allow_nan=False)

    con = sqlite3.connect(a / "db.sqlite")
    con.execute(
        "INSERT INTO local_tensor_comparison_records(tensor_id, golden_tensor_id, matches, desired_pcc, actual_pcc)"
        " VALUES (1, 1, 1, 0.99, 1.0), (9, 1, 0, 0.99, 0.5)"
    )
    con.commit()
    con.close()
    with reportdb.open(a) as ra:
        compared, missing = reportdb.compare_golden(ra)
    assert (compared.status, compared.passed, missing.status, missing.passed) == ("compared", True, "tensor not stored", None)
    assert list(compared.to_dict()) == [
        "kind", "tensor_id", "rank", "golden_tensor_id", "desired_pcc", "recorded_pcc", "recorded_matches", "metrics",
        "status", "operation_id", "name", "verdict", "failed", "role", "error_growth_db", "notes",  # added after the others
    ]
    assert missing.to_dict()["metrics"] is None and compared.to_dict()["metrics"]["passed"] is True


# --- statistics: one shape whatever the shard count -------------------------------------------------------------


def test_tensor_stats_has_one_shape_for_one_shard_and_for_many(tmp_path: Path) -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    with reportdb.open(tmp_path / "r.sqlite", "a") as report:
        report.put_tensor(1, x)
        report.put_tensor(
            2, shards=[((0,), x), ((1,), x + 10)], distribution=Distribution((2,), (Placement("shard", 0),))
        )
        one, two = report.tensor_stats(1), report.tensor_stats(2)
        summary = report.summary()
    assert (one.count, one.min, one.max, one.mean, one.zero_count, one.nan_count) == (6, 0.0, 5.0, 2.5, 1, 0)
    assert one.shard is one.shards[0] and one.mesh_coordinates == ((),) and sum(one.hist_counts or ()) == 6
    assert [s.min for s in two.shards] == [0.0, 10.0] and two.mesh_coordinates == ((0,), (1,))
    with pytest.raises(InvalidArgumentError, match="2 shards.*read them from .shards"):
        two.mean
    for stats in (one, two):
        data = stats.to_dict()
        assert list(data) == ["tensor_id", "rank", "shards", "mesh_coordinates"]
        assert list(data["shards"][0]) == [
            "count", "min", "max", "mean", "std", "absmax", "nan_count", "inf_count", "zero_count", "hist_counts",
            "hist_edges",
        ]
        json.dumps(data, allow_nan=False)
    assert summary.tensors == 2 and summary.shards == 3 and summary.tables["rdb_tensor"] == 2
    assert list(summary.to_dict()) == [
        "path", "schema_revision", "schema_head", "report_schema_version", "tables", "tensors", "shards",
        "logical_bytes", "stored_bytes", "content_address",
    ]
    assert summary.content_address == "blake3"


# --- the migration summary read back from a log ------------------------------------------------------------------


def test_a_logged_migration_summary_reads_back_equal_and_a_malformed_one_is_corruption(tmp_path: Path) -> None:
    report = _run(tmp_path / "run", ["ttnn.add"])
    summary = reportdb.migrate(report, tmp_path / "out")
    assert not summary.already_migrated and summary.verified.ok and summary.verified.path.endswith("db.sqlite")
    data = summary.to_dict()
    assert MigrationSummary.from_json(json.dumps(data), "log") == summary
    older = {k: v for k, v in data.items() if k not in ("skipped", "triggers_copied", "already_migrated", "seconds")}
    older["verified"] = {k: v for k, v in data["verified"].items() if k not in ("path", "against")}
    back = MigrationSummary.from_json(json.dumps(older), "log")  # what an older reportdb logged
    assert back.tensors == summary.tensors and back.skipped == () and back.verified.path == ""
    for bad in ("{", json.dumps([1]), json.dumps(dict(data, tensors={"stored": "many"})),
                json.dumps(dict(data, tables={"t": True})), json.dumps(dict(data, skipped=[{"kind": 1}])), b"bytes"):
        with pytest.raises(CorruptionError, match="migration summary is malformed"):
            MigrationSummary.from_json(bad, "log")


def test_an_in_place_rerun_refuses_a_tampered_summary_with_a_clear_error(tmp_path: Path) -> None:
    folder = _run(tmp_path / "run", ["ttnn.add"])
    assert not reportdb.migrate(folder).already_migrated
    assert reportdb.migrate(folder).already_migrated
    con = sqlite3.connect(folder / "db.sqlite")
    con.execute("UPDATE rdb_migration_log SET detail = json_set(detail, '$.source', 5) WHERE kind = 'summary'")
    con.commit()
    con.close()
    with pytest.raises(CorruptionError, match="rdb_migration_log.*source is int"):
        reportdb.migrate(folder)


# --- notebooks: small HTML tables, report text escaped -----------------------------------------------------------


def test_comparison_html_shows_each_metric_and_its_notes() -> None:
    result = reportdb.compare(np.array([1.0, np.nan, 3.0]), np.array([1.0, 2.0, 3.5]))
    cells = field_cells(result._repr_html_())
    assert cells["pcc"] == f"{result.pcc:.6g}" and cells["passed"] == "False" and cells["shape_a"] == "(3)"
    assert cells["nan_mismatches"] == "1" and cells["note"] == result.notes[-1]
    assert parsed(result._repr_html_()).captions == ["Comparison"]


def test_run_comparison_html_escapes_operation_names(tmp_path: Path) -> None:
    a = _run(tmp_path / "a", ["ttnn.add", HOSTILE])
    b = _run(tmp_path / "b", ["ttnn.add", HOSTILE], scale=2.0)
    with reportdb.open(a) as ra, reportdb.open(b) as rb:
        result = reportdb.compare_runs(ra, rb)
    markup = result._repr_html_()
    assert "<script>" not in markup and "&lt;script&gt;" in markup
    (table,) = parsed(markup).tables
    assert table[0][:4] == ["", "op A", "op B", "name"]
    assert [row[0] for row in table[1:]] == ["", ">>"]
    assert table[2][3] == HOSTILE and table[2][9] == "scale_or_offset_error"  # the text itself, shown as text


def test_report_and_tensor_info_html_escape_stored_text(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite"
    with reportdb.open(path, "a") as report:
        report.put_tensor(1, np.zeros((2, 2), np.float32), layout="TILE", source={"format": HOSTILE})
        report.put_tensor(2, np.ones(3, np.int32))
    con = sqlite3.connect(path)
    con.execute("UPDATE rdb_tensor SET n_shards = 7 WHERE tensor_id = 2")  # damaged rows
    con.commit()
    con.close()
    with reportdb.open(path) as report:
        info_markup = report.tensor_info(1)._repr_html_()
        report_markup = report._repr_html_()
        stats = report.tensor_stats(1)
    for markup in (info_markup, report_markup):
        assert "<script>" not in markup and "<img" not in markup
    info = parsed(info_markup)
    cells = {row[0]: row[1] for row in info.tables[0][1:]}
    assert (cells["shape"], cells["dtype"], cells["layout"], cells["source"]) == ("(2, 2)", "float32", "TILE", f"format: {HOSTILE}")
    assert info.tables[1][1] == ["()", "float32", "(2, 2)", "16"]
    summary_table, tensors = parsed(report_markup).tables
    assert {row[0]: row[1] for row in summary_table[1:]}["tensors"] == "2"
    assert tensors[1] == ["1", "0", "(2, 2)", "float32", "-", "TILE", "1", "16"]
    assert tensors[2][:2] == ["2", "0"] and "damaged" in tensors[2][2]  # its error, in its row
    stats_rows = parsed(stats._repr_html_()).tables[0]
    assert stats_rows[0][:3] == ["mesh coordinate", "count", "min"] and stats_rows[1][:3] == ["()", "4", "0"]


def test_long_tables_are_cut_and_say_how_many_rows_are_left() -> None:
    from reportdb.results import MAX_HTML_ROWS, html_table

    rows = parsed(html_table(("n",), [(i,) for i in range(MAX_HTML_ROWS + 7)])).tables[0]
    assert len(rows) == 1 + MAX_HTML_ROWS + 1 and rows[-1] == ["... 7 more"]
