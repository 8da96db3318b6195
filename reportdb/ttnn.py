"""The optional ttnn adapter: ttnn tensors into reportdb, and ttnn's report hooks into a Writer.

``import ttnn`` happens only inside these functions, so reportdb never needs ttnn (which installs only
on Linux x86-64 with CPython 3.10/3.12). Three entry points:

- ``convert(tensor)`` / ``to_loaded(tensor)``: a ``ttnn.Tensor`` (host, multi-device host, or device,
  read back with ``ttnn.from_device``) as per-device shards of logical values plus the spec ttnn gave
  it: the original dtype (BFLOAT8_B stays BFLOAT8_B; its values are stored exactly as bfloat16),
  layout, tile, padded shape, memory config and the distribution over the mesh.
- ``patch_database()``: legacy ttnn (the versions whose ``ttnn/database.py`` wrote ``tensors/*.bin``
  and ``*.pt`` files) writes its whole report through a ``Writer`` instead: rows go into the report
  database with bound parameters (the legacy module formatted values into SQL text, so an argument
  with a quote broke it) and detailed tensors go into the same database instead of files.
- ``capture(writer)``: current ttnn (no tensor values in its reports) records every operation, its
  arguments, duration and input/output tensors through ``ttnn.register_pre/post_operation_hook``.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

import ml_dtypes
import numpy as np

from .errors import ReportDBError
from .spec import Distribution, LoadedTensor, Placement, TensorSpec

if TYPE_CHECKING:  # the writer loads with the first Writer made here, not with this module
    from .writer import Role, Writer

#: ttnn dtypes whose values numpy holds natively; every other float type goes through float32.
_NUMPY_NATIVE = {"FLOAT32", "UINT32", "INT32", "UINT16", "UINT8"}
#: Buffer types by name, as the report's ``buffer_type`` column numbers them (C++ ``BufferType``).
_BUFFER_TYPES = {"DRAM": 0, "L1": 1, "SYSTEM_MEMORY": 2, "L1_SMALL": 3, "TRACE": 4}


@dataclass
class Converted:
    """A ttnn tensor as the writer stores it: shards (None when only described), spec and report row."""

    shards: list[tuple[tuple[int, ...], np.ndarray]] | None
    metadata: dict[str, Any]  # TensorSpec fields and ``source``
    row: dict[str, Any]  # the legacy ``tensors`` row: shape, dtype, layout, memory_config, device fields


def _enum_name(value: Any) -> str:
    """``DataType.BFLOAT16`` / ``Layout::TILE`` / ``<DataType.FLOAT32: 1>`` -> the bare member name."""
    text = str(getattr(value, "name", None) or value)
    return text.replace("::", ".").split(".")[-1].split(":")[0].strip("<> ")


def convert(tensor: Any, *, values: bool = True) -> Converted:
    """Describe a ``ttnn.Tensor`` and, when ``values``, read its shards as canonical numpy arrays."""
    import ttnn

    row: dict[str, Any] = {}
    storage = _enum_name(tensor.storage_type())
    memory_text = _memory_config_text(tensor)
    if storage == "DEVICE":
        row.update(_device_fields(tensor, memory_text))
        if values:
            tensor = ttnn.from_device(tensor)
    dtype = _enum_name(tensor.dtype)
    layout = _enum_name(tensor.layout)
    tile = _tile(tensor) if layout == "TILE" else None
    metadata: dict[str, Any] = {
        "ttnn_dtype": dtype,
        "layout": layout,
        "tile_shape": tile,
        "padded_shape": _padded_shape(tensor),
        "storage_type": storage,
        "memory_config": _parsed_memory_config(memory_text),
        "source": {"format": "ttnn", "version": _ttnn_version()},
    }
    row.update(shape=str(tensor.shape), dtype=f"DataType.{dtype}", layout=f"Layout.{layout}", memory_config=memory_text)
    shards = None
    if values:
        parts = _device_tensors(tensor)
        distribution = _distribution(tensor, len(parts))
        coords = (
            list(distribution.device_coords)
            if distribution is not None and distribution.device_coords and len(distribution.device_coords) == len(parts)
            else [(i,) for i in range(len(parts))] if len(parts) > 1 else [()]
        )
        shards = [(tuple(c), _values(part, dtype)) for c, part in zip(coords, parts)]
        if distribution is not None:
            metadata["distribution"] = distribution
    return Converted(shards, metadata, row)


def to_loaded(tensor: Any) -> LoadedTensor:
    """A ``ttnn.Tensor`` as a LoadedTensor (the same shape every legacy file reader returns)."""
    converted = convert(tensor)
    meta = dict(converted.metadata)
    source = meta.pop("source")
    assert converted.shards is not None
    return LoadedTensor(shards=converted.shards, spec=TensorSpec(**meta), source=source)


@functools.lru_cache(maxsize=1)
def _ttnn_version() -> str | None:
    """The installed ttnn's version, read once: importlib.metadata parses the package metadata on every call."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ttnn")
    except PackageNotFoundError:
        return None


def _memory_config_text(tensor: Any) -> str | None:
    try:
        return str(tensor.memory_config())
    except Exception:  # old host tensors have none
        return None


@functools.lru_cache(maxsize=256)
def _parsed_memory_config(text: str | None) -> dict[str, Any] | None:
    """``parse_memory_config``, once per distinct text (a run has a handful; parsing one costs ~100 µs).
    The result is shared between tensors and must not be changed."""
    from .memconfig import parse_memory_config

    return parse_memory_config(text)


def _device_fields(tensor: Any, memory_text: str | None) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    with contextlib.suppress(Exception):
        fields["address"] = int(tensor.buffer_address())
    with contextlib.suppress(Exception):
        fields["device_id"] = int(tensor.device().id())
    if memory_text:
        parsed = _parsed_memory_config(memory_text) or {}
        if parsed.get("buffer_type") in _BUFFER_TYPES:
            fields["buffer_type"] = _BUFFER_TYPES[parsed["buffer_type"]]
    return fields


def _tile(tensor: Any) -> tuple[int, int] | None:
    tile = getattr(tensor, "tile", None)
    shape = getattr(tile, "tile_shape", None)
    return (int(shape[0]), int(shape[1])) if shape is not None else (32, 32)


def _padded_shape(tensor: Any) -> tuple[int, ...] | None:
    padded = getattr(tensor, "padded_shape", None)
    if padded is None and hasattr(tensor.shape, "with_tile_padding"):
        padded = tensor.shape.with_tile_padding()
    return None if padded is None else tuple(int(d) for d in padded)


def _device_tensors(tensor: Any) -> list[Any]:
    import ttnn

    try:
        parts = list(ttnn.get_device_tensors(tensor))
    except Exception:  # a single-device tensor on wheels where the call insists on multi-device storage
        return [tensor]
    return parts or [tensor]


def _distribution(tensor: Any, n_shards: int) -> Distribution | None:
    """The tensor topology (newer wheels; a single-device tensor has one too) as a Distribution.

    None where the wheel has no topology: then one shard is the tensor and several cannot be assembled.
    """
    get = getattr(tensor, "tensor_topology", None)
    if get is None:
        return None if n_shards <= 1 else Distribution((n_shards,), None, "unknown", {}, None)
    topology = get()
    shape = tuple(int(d) for d in topology.distribution_shape())
    rank = len(tensor.shape)
    placements = []
    for p in topology.placements():
        text = str(p)
        if "Shard" in text:
            dim = getattr(p, "dim", None)
            if dim is None:
                dim = text.split("(")[1].rstrip(")")
            placements.append(Placement("shard", int(dim) % rank))
        else:
            placements.append(Placement("replicate"))
    coords = tuple(tuple(int(v) for v in _coord_values(c)) for c in topology.mesh_coords())
    params: dict[str, Any] = {}
    with contextlib.suppress(Exception):  # the device mesh the host buffer spans, as .tensorbin files record it
        params["mesh_shape"] = [int(d) for d in tensor.host_buffer().shape()]
    return Distribution(shape, tuple(placements), None, params, coords or None)


def _coord_values(coord: Any) -> list[int]:
    if hasattr(coord, "coords"):
        return list(coord.coords())
    text = str(coord)  # MeshCoordinate([0, 1])
    return [int(v) for v in text[text.index("[") + 1 : text.rindex("]")].split(",") if v.strip()]


def _values(tensor: Any, dtype: str) -> np.ndarray:
    """One host shard's logical values; block floats and bfloat16 through float32, which is exact."""
    import ttnn

    source = tensor if dtype in _NUMPY_NATIVE else ttnn.to_dtype(tensor, ttnn.float32)
    try:
        array = np.asarray(source.to_numpy())
    except Exception:  # wheels whose to_numpy does not take this dtype or layout
        return _values_through_file(tensor)
    if dtype not in _NUMPY_NATIVE:
        return array.astype(ml_dtypes.bfloat16) if dtype in ("BFLOAT16", "BFLOAT8_B", "BFLOAT4_B") else array
    return array if array.flags.owndata else array.copy()  # never keep a view of ttnn's buffer


def _values_through_file(tensor: Any) -> np.ndarray:
    """Fallback: ``ttnn.dump_tensor`` to a temporary file and read it with reportdb's own readers."""
    import ttnn

    from .formats import load_tensor_file

    with tempfile.TemporaryDirectory() as tmp:
        for ext in ("tensorbin", "bin"):
            path = Path(tmp) / f"t.{ext}"
            try:
                ttnn.dump_tensor(str(path), tensor)
            except Exception:
                continue
            return load_tensor_file(path).array
    raise ReportDBError(f"cannot read the values of a ttnn tensor of dtype {tensor.dtype}, layout {tensor.layout}")


# --- legacy ttnn.database -------------------------------------------------------------------------


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
        raise ReportDBError(
            f"ttnn {_ttnn_version()} has no ttnn.database.store_tensor: it stores no tensor values; "
            "use reportdb.ttnn.capture(writer) with this ttnn instead"
        )
    writers: dict[Path, Writer] = {}

    def writer_for(report_path: Any) -> Writer:
        key = Path(report_path).resolve()
        if key not in writers:
            key.mkdir(parents=True, exist_ok=True)
            config_path = key / getattr(db, "CONFIG_PATH", "config.json")
            if not config_path.exists() and hasattr(ttnn, "save_config_to_json_file"):
                ttnn.save_config_to_json_file(config_path)
            from .writer import Writer

            writers[key] = Writer(key, rank=rank, **writer_options)
        return writers[key]

    def detailed() -> bool:
        return bool(ttnn.CONFIG.enable_detailed_tensor_report)

    def insert_devices(report_path: Any, devices: Any) -> None:
        writer = writer_for(report_path)
        for device in devices:
            info = ttnn._ttnn.reports.get_device_info(device)
            fields = {name: getattr(info, name) for name in _DEVICE_FIELDS if hasattr(info, name)}
            where, params = _of_rank(writer, "devices", rank)
            if not writer.query(f"SELECT 1 FROM devices WHERE device_id=? AND {where}", (device.id(), *params)):
                writer.add_device(device.id(), **fields)

    def insert_operation(report_path: Any, operation_id: int, operation: Any, duration: Any) -> None:
        writer_for(report_path).add_operation(operation_id, operation.python_fully_qualified_name, duration=duration)

    def insert_stack_trace(report_path: Any, operation_id: int, stack_trace: list[str]) -> None:
        text = "\n".join(stack_trace[:-2][::-1])  # as the legacy module formatted it
        writer_for(report_path).add_rows("stack_traces", [{"operation_id": operation_id, "stack_trace": text}])

    def insert_tensor(report_path: Any, tensor: Any) -> None:
        writer_for(report_path).put_tensor(int(tensor.tensor_id), tensor, store_values=False)

    def store_tensor(report_path: Any, tensor: Any) -> None:
        writer_for(report_path).put_tensor(int(tensor.tensor_id), tensor)

    def insert_tensors(report_path: Any, operation_id: int, tensors: Any, table: str, index: str) -> None:
        writer = writer_for(report_path)
        role: Role = "output" if table == "output_tensors" else "input"
        for position, tensor in enumerate(tensors):
            writer.put_tensor(int(tensor.tensor_id), tensor, role=role, store_values=detailed())
        writer.add_rows(
            table, [{"operation_id": operation_id, index: i, "tensor_id": int(t.tensor_id)} for i, t in enumerate(tensors)]
        )

    def insert_input_tensors(report_path: Any, operation_id: int, input_tensors: Any) -> None:
        insert_tensors(report_path, operation_id, input_tensors, "input_tensors", "input_index")

    def insert_output_tensors(report_path: Any, operation_id: int, output_tensors: Any) -> None:
        insert_tensors(report_path, operation_id, output_tensors, "output_tensors", "output_index")

    def store_tensors(report_path: Any, tensors: Any) -> None:
        writer = writer_for(report_path)
        for tensor in tensors:
            writer.put_tensor(int(tensor.tensor_id), tensor, store_values=detailed())

    def insert_operation_arguments(report_path: Any, operation_id: int, function_args: Any, function_kwargs: Any) -> None:
        args, kwargs = db.convert_arguments_to_strings(function_args, function_kwargs)
        rows = [{"operation_id": operation_id, "name": str(i), "value": str(v)} for i, v in enumerate(args)]
        rows += [{"operation_id": operation_id, "name": str(k), "value": str(v)} for k, v in kwargs.items()]
        writer_for(report_path).add_rows("operation_arguments", rows)

    def insert_tensor_comparison_records(report_path: Any, table_name: str, records: Any) -> None:
        writer_for(report_path).add_rows(
            table_name,
            [
                {"tensor_id": r.tensor_id, "golden_tensor_id": r.golden_tensor_id, "matches": int(bool(r.matches)),
                 "desired_pcc": r.desired_pcc, "actual_pcc": r.actual_pcc}
                for r in records
            ],
        )

    def insert_buffers(report_path: Any, operation_id: int, devices: Any) -> None:
        writer_for(report_path).add_rows(
            "buffers",
            [
                {"operation_id": operation_id, "device_id": b.device_id, "address": b.address,
                 "max_size_per_bank": b.max_size_per_bank, "buffer_type": b.buffer_type.value}
                for b in ttnn._ttnn.reports.get_buffers(list(devices))
            ],
        )

    def insert_buffer_pages(report_path: Any, operation_id: int, devices: Any) -> None:
        pages = [
            {"operation_id": operation_id, "device_id": p.device_id, "address": p.address, "core_y": p.core_y,
             "core_x": p.core_x, "bank_id": p.bank_id, "page_index": p.page_index,
             "page_address": p.page_address, "page_size": p.page_size, "buffer_type": p.buffer_type.value}
            for p in ttnn._ttnn.reports.get_buffer_pages(list(devices))
        ]
        writer = writer_for(report_path)
        writer.add_rows("buffer_pages", pages)
        # The visualizer reads buffer_chunks whenever the table exists, as it does in a new report: the chunks
        # it would have made of these pages go there too.
        writer.add_rows("buffer_chunks", _buffer_chunks(pages))

    def insert_captured_graph(report_path: Any, operation_id: int, captured_graph: Any) -> None:
        writer_for(report_path).add_rows(
            "captured_graph", [{"operation_id": operation_id, "captured_graph": json.dumps(captured_graph)}]
        )

    def query_latest_operation(report_path: Any) -> Any:
        writer = writer_for(report_path)
        where, params = _of_rank(writer, "operations", rank)
        rows = writer.query(
            f"SELECT operation_id, name, duration FROM operations WHERE {where} ORDER BY operation_id DESC LIMIT 1", params
        )
        return db.Operation(*rows[0]) if rows else None

    def query_latest_tensor(report_path: Any) -> Any:
        writer = writer_for(report_path)
        where, params = _of_rank(writer, "tensors", rank)
        rows = writer.query(f"SELECT {_TENSOR_COLUMNS} FROM tensors WHERE {where} ORDER BY tensor_id DESC LIMIT 1", params)
        return db.Tensor(*rows[0]) if rows else None

    def query_tensor_by_id(report_path: Any, tensor_id: int) -> Any:
        writer = writer_for(report_path)
        where, params = _of_rank(writer, "tensors", rank)
        rows = writer.query(f"SELECT {_TENSOR_COLUMNS} FROM tensors WHERE tensor_id=? AND {where}", (tensor_id, *params))
        return db.Tensor(*rows[0]) if rows else None

    def query_output_tensor_by_tensor_id(report_path: Any, tensor_id: int) -> Any:
        writer = writer_for(report_path)
        where, params = _of_rank(writer, "output_tensors", rank)
        rows = writer.query(
            f"SELECT operation_id, output_index, tensor_id FROM output_tensors WHERE tensor_id=? AND {where}",
            (tensor_id, *params),
        )
        return db.OutputTensor(*rows[0]) if rows else None

    replacements = {
        name: function
        for name, function in locals().items()
        if name.startswith(("insert_", "store_", "query_")) and callable(function) and hasattr(db, name)
    }
    originals = {name: getattr(db, name) for name in replacements}
    for name, function in replacements.items():
        setattr(db, name, function)
    return Patch(db, originals, writers)


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


_DEVICE_FIELDS = (
    "num_y_cores", "num_x_cores", "num_y_compute_cores", "num_x_compute_cores", "worker_l1_size", "l1_num_banks",
    "l1_bank_size", "address_at_first_l1_bank", "address_at_first_l1_cb_buffer", "num_banks_per_storage_core",
    "num_compute_cores", "num_storage_cores", "total_l1_memory", "total_l1_for_tensors",
    "total_l1_for_interleaved_buffers", "total_l1_for_sharded_buffers", "cb_limit",
)
_TENSOR_COLUMNS = "tensor_id, shape, dtype, layout, memory_config, device_id, address, buffer_type"


def _of_rank(writer: Writer, table: str, rank: int) -> tuple[str, tuple[int, ...]]:
    """The WHERE condition selecting ``rank``'s rows of ``table``, and its parameters: none in a report whose table
    has no rank column (ttnn before multi-host runs), where every row is rank 0's."""
    return ("rank=?", (rank,)) if "rank" in writer.columns(table) else ("1", ())


def _is_ttnn(value: Any) -> bool:
    return (type(value).__module__ or "").startswith("ttnn")


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
        raise ReportDBError(
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
        if _is_ttnn(v) and hasattr(v, "storage_type"):
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


__all__ = ["Converted", "convert", "to_loaded", "patch_database", "Patch", "capture"]
