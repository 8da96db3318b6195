"""ttnn's report hooks into a Writer: ``patch_database()`` for legacy ttnn, ``capture(writer)`` for current ttnn.

- ``patch_database()``: legacy ttnn (the versions whose ``ttnn/database.py`` wrote ``tensors/*.bin``
  and ``*.pt`` files) writes its whole report through a ``Writer`` instead: rows go into the report
  database with bound parameters (the legacy module formatted values into SQL text, so an argument
  with a quote broke it) and detailed tensors go into the same database instead of files.
- ``capture(writer)``: current ttnn (no tensor values in its reports) records every operation, its
  arguments, duration and input/output tensors through ``ttnn.register_pre/post_operation_hook``.

``import ttnn`` happens only inside these functions, and the Writer is imported only when a patched function first
needs one, so ``reportdb.ttnn`` loads with neither.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

from ..errors import TtnnError
from ..formats.ttnn_tensor import is_ttnn_object, ttnn_version

if TYPE_CHECKING:  # the writer loads with the first Writer made here, not with this module
    from ..writer import Role, Writer

# --- legacy ttnn.database -------------------------------------------------------------------------

#: The functions of a legacy ``ttnn.database`` that ``patch_database`` replaces where the module has them; each is
#: replaced by the method of the same name of :class:`_LegacyDatabase`. The module's other functions (reading
#: ``tensors/`` files, graphs, queries the run never makes) stay as they are.
_REPLACED = (
    "insert_devices",
    "insert_operation",
    "insert_stack_trace",
    "insert_tensor",
    "store_tensor",
    "insert_input_tensors",
    "insert_output_tensors",
    "store_tensors",
    "insert_operation_arguments",
    "insert_tensor_comparison_records",
    "insert_buffers",
    "insert_buffer_pages",
    "insert_captured_graph",
    "query_latest_operation",
    "query_latest_tensor",
    "query_tensor_by_id",
    "query_output_tensor_by_tensor_id",
)

_DEVICE_FIELDS = (
    "num_y_cores", "num_x_cores", "num_y_compute_cores", "num_x_compute_cores", "worker_l1_size", "l1_num_banks",
    "l1_bank_size", "address_at_first_l1_bank", "address_at_first_l1_cb_buffer", "num_banks_per_storage_core",
    "num_compute_cores", "num_storage_cores", "total_l1_memory", "total_l1_for_tensors",
    "total_l1_for_interleaved_buffers", "total_l1_for_sharded_buffers", "cb_limit",
)
_TENSOR_COLUMNS = "tensor_id, shape, dtype, layout, memory_config, device_id, address, buffer_type"


class Patch:
    """What ``patch_database`` changed: ``restore()`` puts the original functions back and closes writers."""

    def __init__(self, module: Any, originals: dict[str, Callable[..., Any]], writers: dict[Path, Writer]) -> None:
        self._module = module
        self._originals = originals
        self.writers = writers

    def restore(self) -> None:
        for name, function in self._originals.items():
            setattr(self._module, name, function)
        for writer in self.writers.values():
            writer.close()
        self.writers.clear()

    def __enter__(self) -> "Patch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()


def patch_database(*, rank: int = 0, **writer_options: Any) -> Patch:
    """Make a legacy ``ttnn.database`` write its report, detailed tensors included, through a Writer.

    Every ``insert_*``/``store_*`` function of the module is replaced: rows go into
    ``<report_path>/db.sqlite`` through one Writer per report folder (closed at exit or by
    ``restore()``), with values bound as parameters, and detailed tensors (``ttnn.CONFIG.
    enable_detailed_tensor_report``) are stored in that database instead of ``tensors/`` files.
    The queries the run itself makes (latest operation and tensor ids) read the same database.
    ``writer_options`` are Writer options (``store``, ``stats``, batching...).
    """
    import ttnn
    import ttnn.database as db

    if not hasattr(db, "store_tensor"):
        raise TtnnError(
            f"ttnn {ttnn_version()} has no ttnn.database.store_tensor: it stores no tensor values; "
            "use reportdb.ttnn.capture(writer) with this ttnn instead"
        )
    legacy = _LegacyDatabase(ttnn, db, rank, writer_options)
    replacements = {name: getattr(legacy, name) for name in _REPLACED if hasattr(db, name)}
    originals = {name: getattr(db, name) for name in replacements}
    for name, function in replacements.items():
        setattr(db, name, function)
    return Patch(db, originals, legacy.writers)


class _LegacyDatabase:
    """Replacements for a legacy ``ttnn.database``'s functions, with their signatures, writing through one Writer
    per report folder (``writers``); the queries read the rows of this run's ``rank``."""

    def __init__(self, ttnn: Any, db: Any, rank: int, writer_options: dict[str, Any]) -> None:
        self._ttnn = ttnn
        self._db = db
        self._rank = rank
        self._writer_options = writer_options
        self.writers: dict[Path, Writer] = {}

    def _writer(self, report_path: Any) -> Writer:
        """The Writer of a report folder, made (with ttnn's ``config.json`` beside it, as ttnn does) on first use."""
        key = Path(report_path).resolve()
        if key not in self.writers:
            key.mkdir(parents=True, exist_ok=True)
            config_path = key / getattr(self._db, "CONFIG_PATH", "config.json")
            if not config_path.exists() and hasattr(self._ttnn, "save_config_to_json_file"):
                self._ttnn.save_config_to_json_file(config_path)
            from ..writer import Writer

            self.writers[key] = Writer(key, rank=self._rank, **self._writer_options)
        return self.writers[key]

    def _detailed(self) -> bool:
        return bool(self._ttnn.CONFIG.enable_detailed_tensor_report)

    def insert_devices(self, report_path: Any, devices: Any) -> None:
        writer = self._writer(report_path)
        for device in devices:
            info = self._ttnn._ttnn.reports.get_device_info(device)
            fields = {name: getattr(info, name) for name in _DEVICE_FIELDS if hasattr(info, name)}
            where, params = _of_rank(writer, "devices", self._rank)
            if not writer.query(f"SELECT 1 FROM devices WHERE device_id=? AND {where}", (device.id(), *params)):
                writer.add_device(device.id(), **fields)

    def insert_operation(self, report_path: Any, operation_id: int, operation: Any, duration: Any) -> None:
        self._writer(report_path).add_operation(operation_id, operation.python_fully_qualified_name, duration=duration)

    def insert_stack_trace(self, report_path: Any, operation_id: int, stack_trace: list[str]) -> None:
        text = "\n".join(stack_trace[:-2][::-1])  # as the legacy module formatted it
        self._writer(report_path).add_rows("stack_traces", [{"operation_id": operation_id, "stack_trace": text}])

    def insert_tensor(self, report_path: Any, tensor: Any) -> None:
        self._writer(report_path).put_tensor(int(tensor.tensor_id), tensor, store_values=False)

    def store_tensor(self, report_path: Any, tensor: Any) -> None:
        self._writer(report_path).put_tensor(int(tensor.tensor_id), tensor)

    def store_tensors(self, report_path: Any, tensors: Any) -> None:
        writer = self._writer(report_path)
        for tensor in tensors:
            writer.put_tensor(int(tensor.tensor_id), tensor, store_values=self._detailed())

    def insert_input_tensors(self, report_path: Any, operation_id: int, input_tensors: Any) -> None:
        self._link_tensors(report_path, operation_id, input_tensors, "input_tensors", "input_index")

    def insert_output_tensors(self, report_path: Any, operation_id: int, output_tensors: Any) -> None:
        self._link_tensors(report_path, operation_id, output_tensors, "output_tensors", "output_index")

    def _link_tensors(self, report_path: Any, operation_id: int, tensors: Any, table: str, index: str) -> None:
        """An operation's input or output tensors (values when detailed) and their rows in ``table``."""
        writer = self._writer(report_path)
        role: Role = "output" if table == "output_tensors" else "input"
        for tensor in tensors:
            writer.put_tensor(int(tensor.tensor_id), tensor, role=role, store_values=self._detailed())
        writer.add_rows(
            table, [{"operation_id": operation_id, index: i, "tensor_id": int(t.tensor_id)} for i, t in enumerate(tensors)]
        )

    def insert_operation_arguments(
        self, report_path: Any, operation_id: int, function_args: Any, function_kwargs: Any
    ) -> None:
        args, kwargs = self._db.convert_arguments_to_strings(function_args, function_kwargs)
        rows = [{"operation_id": operation_id, "name": str(i), "value": str(v)} for i, v in enumerate(args)]
        rows += [{"operation_id": operation_id, "name": str(k), "value": str(v)} for k, v in kwargs.items()]
        self._writer(report_path).add_rows("operation_arguments", rows)

    def insert_tensor_comparison_records(self, report_path: Any, table_name: str, records: Any) -> None:
        self._writer(report_path).add_rows(
            table_name,
            [
                {"tensor_id": r.tensor_id, "golden_tensor_id": r.golden_tensor_id, "matches": int(bool(r.matches)),
                 "desired_pcc": r.desired_pcc, "actual_pcc": r.actual_pcc}
                for r in records
            ],
        )

    def insert_buffers(self, report_path: Any, operation_id: int, devices: Any) -> None:
        self._writer(report_path).add_rows(
            "buffers",
            [
                {"operation_id": operation_id, "device_id": b.device_id, "address": b.address,
                 "max_size_per_bank": b.max_size_per_bank, "buffer_type": b.buffer_type.value}
                for b in self._ttnn._ttnn.reports.get_buffers(list(devices))
            ],
        )

    def insert_buffer_pages(self, report_path: Any, operation_id: int, devices: Any) -> None:
        pages = [
            {"operation_id": operation_id, "device_id": p.device_id, "address": p.address, "core_y": p.core_y,
             "core_x": p.core_x, "bank_id": p.bank_id, "page_index": p.page_index,
             "page_address": p.page_address, "page_size": p.page_size, "buffer_type": p.buffer_type.value}
            for p in self._ttnn._ttnn.reports.get_buffer_pages(list(devices))
        ]
        writer = self._writer(report_path)
        writer.add_rows("buffer_pages", pages)
        # The visualizer reads buffer_chunks whenever the table exists, as it does in a new report: the chunks
        # it would have made of these pages go there too.
        writer.add_rows("buffer_chunks", _buffer_chunks(pages))

    def insert_captured_graph(self, report_path: Any, operation_id: int, captured_graph: Any) -> None:
        self._writer(report_path).add_rows(
            "captured_graph", [{"operation_id": operation_id, "captured_graph": json.dumps(captured_graph)}]
        )

    def query_latest_operation(self, report_path: Any) -> Any:
        writer = self._writer(report_path)
        where, params = _of_rank(writer, "operations", self._rank)
        rows = writer.query(
            f"SELECT operation_id, name, duration FROM operations WHERE {where} ORDER BY operation_id DESC LIMIT 1", params
        )
        return self._db.Operation(*rows[0]) if rows else None

    def query_latest_tensor(self, report_path: Any) -> Any:
        writer = self._writer(report_path)
        where, params = _of_rank(writer, "tensors", self._rank)
        rows = writer.query(f"SELECT {_TENSOR_COLUMNS} FROM tensors WHERE {where} ORDER BY tensor_id DESC LIMIT 1", params)
        return self._db.Tensor(*rows[0]) if rows else None

    def query_tensor_by_id(self, report_path: Any, tensor_id: int) -> Any:
        writer = self._writer(report_path)
        where, params = _of_rank(writer, "tensors", self._rank)
        rows = writer.query(f"SELECT {_TENSOR_COLUMNS} FROM tensors WHERE tensor_id=? AND {where}", (tensor_id, *params))
        return self._db.Tensor(*rows[0]) if rows else None

    def query_output_tensor_by_tensor_id(self, report_path: Any, tensor_id: int) -> Any:
        writer = self._writer(report_path)
        where, params = _of_rank(writer, "output_tensors", self._rank)
        rows = writer.query(
            f"SELECT operation_id, output_index, tensor_id FROM output_tensors WHERE tensor_id=? AND {where}",
            (tensor_id, *params),
        )
        return self._db.OutputTensor(*rows[0]) if rows else None


def _buffer_chunks(pages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``buffer_chunks`` rows of legacy ``buffer_pages`` rows, grouped as ttnn-visualizer groups them: per operation,
    device, buffer address, bank, core and buffer type, from the lowest page address to the end of the highest page."""
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for page in pages:
        key = tuple(page[k] for k in ("operation_id", "device_id", "address", "bank_id", "core_x", "core_y", "buffer_type"))
        groups.setdefault(key, []).append(page)
    chunks = []
    for (operation_id, device_id, address, bank_id, core_x, core_y, buffer_type), group in groups.items():
        start = min(p["page_address"] for p in group)
        chunks.append({
            "operation_id": operation_id, "device_id": device_id, "address": address, "bank_id": bank_id,
            "core_x": core_x, "core_y": core_y, "chunk_address": start,
            "chunk_size": max(p["page_address"] + p["page_size"] for p in group) - start,
            "page_size": max(p["page_size"] for p in group), "num_pages": len(group), "buffer_type": buffer_type,
        })
    return chunks


def _of_rank(writer: Writer, table: str, rank: int) -> tuple[str, tuple[int, ...]]:
    """The WHERE condition selecting ``rank``'s rows of ``table``, and its parameters: none in a report whose table
    has no rank column (ttnn before multi-host runs), where every row is rank 0's."""
    return ("rank=?", (rank,)) if "rank" in writer.columns(table) else ("1", ())


# --- current ttnn: operation hooks ----------------------------------------------------------------


@contextlib.contextmanager
def capture(writer: Writer, *, inputs: bool = True, stack_traces: bool = False) -> Iterator[Writer]:
    """Record every ttnn operation run inside the block into ``writer``, through ttnn's operation hooks.

    Each operation gets the next operation id of the writer's rank, its arguments as text, its duration
    (between the pre- and post-operation hooks), its input and output tensor links, and its output
    tensors (and inputs, when ``inputs``) as the writer's store policy says. Hooks only run when ttnn's
    fast runtime mode is off (``TTNN_CONFIG_OVERRIDES='{"enable_fast_runtime_mode": false}'``).
    """
    import ttnn

    if getattr(ttnn.CONFIG, "enable_fast_runtime_mode", False):
        raise TtnnError(
            "ttnn runs in fast runtime mode, where operation hooks never run; set "
            "TTNN_CONFIG_OVERRIDES='{\"enable_fast_runtime_mode\": false}' before importing ttnn"
        )
    where, params = _of_rank(writer, "operations", writer.rank)
    latest = writer.query(f"SELECT MAX(operation_id) FROM operations WHERE {where}", params)[0][0]
    next_operation = itertools.count((latest or 0) + 1)
    started: list[float] = []

    def pre(operation: Any, args: Any, kwargs: Any) -> None:
        started.append(time.perf_counter())

    def post(operation: Any, args: Any, kwargs: Any, output: Any) -> None:
        duration = time.perf_counter() - started.pop() if started else None
        operation_id = next(next_operation)
        in_tensors = _tensors((args, kwargs))
        out_tensors = _tensors(output)
        for tensor in in_tensors if inputs else ():
            writer.put_tensor(_tensor_id(tensor), tensor, role="input")
        for tensor in out_tensors:
            writer.put_tensor(_tensor_id(tensor), tensor, role="output")
        arguments = [(str(i), _argument_text(a)) for i, a in enumerate(args)]
        arguments += [(str(k), _argument_text(v)) for k, v in kwargs.items()]
        writer.add_operation(
            operation_id,
            operation.python_fully_qualified_name,
            duration=duration,
            arguments=arguments,
            stack_trace="".join(traceback.format_stack()[:-1]) if stack_traces else None,
            inputs=[_tensor_id(t) for t in in_tensors],
            outputs=[_tensor_id(t) for t in out_tensors],
        )

    with ttnn.register_pre_operation_hook(pre), ttnn.register_post_operation_hook(post):
        yield writer


_own_ids = itertools.count(1 << 40)  # for tensors ttnn gave no id; far above ttnn's own counter


def _tensor_id(tensor: Any) -> int:
    tid = getattr(tensor, "tensor_id", None)
    if tid is None:
        tid = next(_own_ids)
        with contextlib.suppress(Exception):
            tensor.tensor_id = tid
    return int(tid)


def _tensors(value: Any) -> list[Any]:
    """Every ttnn tensor in a (nested) argument or output structure, in order, each once."""
    found: list[Any] = []
    seen: set[int] = set()

    def walk(v: Any) -> None:
        if is_ttnn_object(v) and hasattr(v, "storage_type"):
            if id(v) not in seen:
                seen.add(id(v))
                found.append(v)
        elif isinstance(v, (list, tuple)):
            for item in v:
                walk(item)
        elif isinstance(v, dict):
            for item in v.values():
                walk(item)

    walk(value)
    return found


def _argument_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return str(value)
    except Exception as exc:  # a pybind object whose __str__ fails must not stop the run
        return f"<{type(value).__name__}: {exc}>"

