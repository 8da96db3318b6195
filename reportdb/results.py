"""What the result types users read share: JSON-ready conversion (``to_dict()``, which the CLI's ``--json`` prints)
and the small HTML table a notebook shows (``_repr_html_``); and :class:`ReportSummary`, which ``Report.summary``
returns.

A report's content is someone else's: every cell of the HTML is escaped with :func:`html.escape`, so a tensor name
or an error message holding markup shows as text and runs nothing. This module imports nothing of reportdb's, so
every layer (``store`` included) may use it.
"""

from __future__ import annotations

import dataclasses
import html
import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

#: Rows an HTML table shows at most; the rest are counted in a last row (a notebook cell is for a glance).
MAX_HTML_ROWS = 50


def jsonable(value: Any) -> Any:
    """``value`` as JSON-ready data: results by their ``to_dict()``, tuples as lists, non-finite floats as None
    (JSON has no NaN; the metrics use None for "undefined" already), numpy scalars as Python numbers."""
    if isinstance(value, Result):
        return value.to_dict()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:  # a numpy scalar
        return jsonable(value.item())
    return value


class Result:
    """Base of the frozen result dataclasses: ``to_dict()`` gives their fields, in order, as JSON-ready data, and
    ``_repr_html_`` shows them as a two-column table in Jupyter (a nested result or list as its size)."""

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON-ready data (see :func:`jsonable`), keyed by field name in declaration order."""
        assert dataclasses.is_dataclass(self)
        return {f.name: jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def _html_fields(self) -> list[tuple[str, Any]]:
        """The (name, value) pairs the notebook table shows; a subclass may leave long ones out."""
        assert dataclasses.is_dataclass(self)
        return [(f.name, getattr(self, f.name)) for f in dataclasses.fields(self)]

    def _repr_html_(self) -> str:
        """A two-column HTML table of the fields, every cell escaped."""
        return html_table(("field", "value"), self._html_fields(), caption=type(self).__name__)


def cell_text(value: Any) -> str:
    """One value as a table cell's text (not yet escaped): None as "-", floats to 6 significant digits, nested
    results, mappings and lists by their size."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, Result):
        return type(value).__name__
    if isinstance(value, Mapping):
        return f"{len(value)} entries" if len(value) > 8 else ", ".join(f"{k}: {cell_text(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, (int, str)) and not isinstance(v, bool) for v in value) and len(value) <= 8:
            return "(" + ", ".join(str(v) for v in value) + ")"
        return f"{len(value)} items"
    return str(value)


def html_table(
    header: Sequence[str], rows: Iterable[Sequence[Any]], *, caption: str | None = None, limit: int = MAX_HTML_ROWS
) -> str:
    """A small HTML table: ``header`` cells, then one row per sequence of values (at most ``limit``, the rest
    counted in a last row). Every caption, header and cell is escaped with :func:`html.escape`."""
    out = ["<table>"]
    if caption is not None:
        out.append(f"<caption>{html.escape(caption)}</caption>")
    out.append("<tr>" + "".join(f"<th>{html.escape(str(h))}</th>" for h in header) + "</tr>")
    left = 0
    for i, row in enumerate(rows):
        if i >= limit:
            left += 1
            continue
        out.append("<tr>" + "".join(f"<td>{html.escape(cell_text(v))}</td>" for v in row) + "</tr>")
    if left:
        out.append(f'<tr><td colspan="{len(header)}">... {left} more</td></tr>')
    out.append("</table>")
    return "".join(out)


@dataclass(frozen=True)
class ReportSummary(Result):
    """What ``Report.summary()`` tells about a report database: its path, reportdb schema revision (None for a
    legacy TTNN database read as it is) beside this reportdb's head, the report's own schema version, the row count
    of every table, the tensors, shards and bytes stored (compressed chunks at their stored size) against the
    logical bytes, and the hash the chunks are addressed by (``rdb_meta.chunk_address``: "blake3", "sha256", or
    "unknown" for a value reportdb does not know; None without tensor tables)."""

    path: str
    schema_revision: str | None
    schema_head: str
    report_schema_version: str | None
    tables: Mapping[str, int]
    tensors: int
    shards: int
    logical_bytes: int
    stored_bytes: int
    content_address: str | None = None
