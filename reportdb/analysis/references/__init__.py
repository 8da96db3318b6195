"""Numpy references of ttnn operations, keyed by operation name: the output an operation should have given for the
inputs the device actually had, computed in float32 (float64 where ttnn's own golden function computes in it).

One small module per family (``matmul``, ``binary``, ``unary``, ``reduction``, ``normalization``, ``data_movement``,
``ternary``); each reference is a numpy function registered with :func:`reference` and its parameters as the ttnn
operation's Python signature has them, so recorded arguments (:mod:`.args`) bind to it by position or by name.
Every reference is checked against ttnn 0.81.1's golden function in the slow tests. Adding an operation is one
function here and one test in ``tests/test_references.py``.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from .args import PARSERS, Argument, Param, UnsupportedArguments, is_none, tensor_count, tensor_ids

__all__ = [
    "Argument", "Oversized", "Param", "Reference", "UnsupportedArguments", "catalogue", "compute", "compute_outputs",
    "completed", "defined_part", "justified_elements", "keeping_values", "lookup", "names", "reference",
]

_FAMILIES = (
    "matmul", "binary", "unary", "reduction", "normalization", "data_movement", "typecast", "ternary", "transformer",
    "placement", "shapes", "creation", "comparison", "indexing", "sampling",
    "conv", "pooling", "attention", "caches", "reduce_nc",
    "collectives",
)

#: Arguments that place or schedule an operation and never change its output's values: accepted by every reference.
PLACEMENT = frozenset({
    "memory_config", "compute_kernel_config", "core_grid", "queue_id", "cq_id", "sub_core_grids", "use_multicore",
    "output_memory_config",
})


#: How many times its largest stored array (input or output) an operation's reference may build: SDPA's score matrix
#: is its query's sequence / head_dim times (64 at 4096 tokens of 64-wide heads); a broadcast, outer product,
#: embedding or split the stored arrays do not justify is 10^3-10^5 times (issue 30's reports).
JUSTIFIED_FACTOR = 64
#: What any reference may build whatever its stored arrays (2^24 elements: 128 MiB in float64): small operations
#: (SDPA's scores over a few short heads) are never refused.
JUSTIFIED_FLOOR = 1 << 24


def justified_elements(stored: Iterable[int]) -> int:
    """The most elements a reference may build for an operation whose stored arrays (inputs, outputs) hold ``stored``
    elements each (see :data:`JUSTIFIED_FACTOR`): replay and a repro folder pass it to :func:`compute_outputs`."""
    return max(JUSTIFIED_FLOOR, JUSTIFIED_FACTOR * max(stored, default=0))


class Oversized(UnsupportedArguments):
    """The arrays a reference would build for these arguments exceed what the operation's stored arrays justify
    (:func:`justified_elements`): refused before anything is computed."""


@dataclass(frozen=True)
class Reference:
    """A registered reference: the operation names it answers to, its parameters and its numpy function, and whether
    the function also takes ``input_dtypes`` (the inputs' ttnn dtypes, where its result depends on them)."""

    names: tuple[str, ...]
    params: tuple[Param, ...]
    function: Callable[..., Any]  # an array, or a tuple of arrays for an operation with several outputs
    input_dtypes: bool = False
    #: The most elements any array the function builds (output or intermediate) has, from its bound arguments, for
    #: a reference whose arrays can outgrow its inputs (broadcasting, outer products, repeats); None: at most its
    #: largest input's.
    size: Callable[[Mapping[str, Any]], int] | None = None
    #: A collective across devices: its tensors are bound as per-device shards (:class:`.collectives.MeshTensor`)
    #: and its function gives each device's reference output (:class:`.collectives.MeshResult`).
    per_device: bool = False
    #: Which elements of each output the operation defines, as a numpy index applied to the reference and to the
    #: device's output alike before they are compared (``np.s_[..., ::32]``: column 0 of each 32-wide block); None:
    #: every element. The others are whatever the device's memory held, which no reference can give.
    defined: "tuple[Any, ...] | None" = None
    #: The operation only moves or keeps values (a copy, a reshape, a gather that does not sum, a cache's copied
    #: rows): each output element is an input element's bits, or a fill value, unchanged where its dtype is the
    #: input's. The tolerance policy holds such an output to its reference bit for bit (``analysis/policy.py``).
    keeps_values: bool = False

    @property
    def family(self) -> str:
        """The family the reference belongs to: the name of the module holding it (``conv``, ``caches``...)."""
        return self.function.__module__.rsplit(".", 1)[-1]

    def param(self, argument: Argument) -> Param | None:
        """The parameter a recorded argument binds to: by position, else by name."""
        position = argument.position
        for p in self.params:
            if (position is not None and p.position == position) or (position is None and p.name == argument.name):
                return p
        return None


_REGISTRY: dict[str, Reference] = {}
_LOADED = False


def reference(
    *op_names: str, params: Sequence[Param], input_dtypes: bool = False,
    size: Callable[[Mapping[str, Any]], int] | None = None, per_device: bool = False,
    defined: "tuple[Any, ...] | None" = None, keeps_values: bool = False,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a numpy function as the reference of ``op_names`` (``ttnn.add``...), taking ``params`` by name (and,
    with ``input_dtypes``, the inputs' ttnn dtypes as ``input_dtypes``); ``size`` says how large its arrays can grow
    (:attr:`Reference.size`); ``per_device`` marks a collective (:attr:`Reference.per_device`); ``defined`` selects
    the elements of its outputs the operation defines (:attr:`Reference.defined`); ``keeps_values`` marks an operation
    that only moves or keeps values (:attr:`Reference.keeps_values`)."""

    def register(function: Callable[..., Any]) -> Callable[..., Any]:
        entry = Reference(tuple(op_names), tuple(params), function, input_dtypes, size, per_device, defined,
                          keeps_values)
        for name in op_names:
            _REGISTRY[name] = entry
        return function

    return register


def _load() -> None:
    """Import every family module once (each registers its references)."""
    global _LOADED
    if not _LOADED:
        for family in _FAMILIES:
            importlib.import_module(f"{__name__}.{family}")
        _LOADED = True


def canonical_name(name: str) -> str:
    """An operation name as the registry keys it: ``ttnn.add`` for ``ttnn.add``, ``ttnn::add`` or ``add``."""
    name = name.strip().replace("::", ".")
    return name if name.startswith("ttnn.") else f"ttnn.{name}"


def lookup(name: str) -> Reference | None:
    """The reference of an operation, or None when there is none."""
    _load()
    return _REGISTRY.get(canonical_name(name))


def defined_part(name: str, output: np.ndarray) -> np.ndarray:
    """The elements of an output of operation ``name`` that the operation defines (:attr:`Reference.defined`): the
    whole output for most operations. Replay applies it to the reference and to the device's output before comparing
    them, so the metrics, the tiles and the verdict see only defined values."""
    ref = lookup(name)
    return output if ref is None or ref.defined is None else np.asarray(output)[ref.defined]


def completed(name: str, reference: np.ndarray, device: np.ndarray) -> np.ndarray:
    """A reference output of operation ``name`` as a chain carries it on: where the operation leaves its output
    undefined (:attr:`Reference.defined`), the device's own values, which any value may be there, so an operation
    that moves them (an all_gather of statistics) is judged on what was defined; the reference itself elsewhere."""
    ref = lookup(name)
    if ref is None or ref.defined is None or np.shape(device) != np.shape(reference):
        return reference
    whole = np.asarray(reference)
    out = np.array(device, dtype=whole.dtype)
    out[ref.defined] = whole[ref.defined]
    return out


def names() -> list[str]:
    """Every operation name that has a reference, sorted."""
    _load()
    return sorted(_REGISTRY)


def keeping_values() -> list[str]:
    """Every operation name whose reference only moves or keeps values (:attr:`Reference.keeps_values`), sorted: the
    operations the tolerance policy holds to bit-exact results by default."""
    _load()
    return sorted(name for name, ref in _REGISTRY.items() if ref.keeps_values)


def catalogue() -> list[dict[str, Any]]:
    """Every supported operation name, sorted, with its family (the module holding its reference) and what its
    arguments may be: each parameter's name, kind, position, default and whether it is required, and the arguments
    accepted but ignored because they only place or schedule the operation, and the elements of its outputs it
    defines where it leaves others undefined (``"[..., ::32]"``: :attr:`Reference.defined`; None: all), and whether
    it only moves or keeps values (:attr:`Reference.keeps_values`) (``reportdb replay --references``)."""
    _load()
    entries = []
    for name in sorted(_REGISTRY):
        ref = _REGISTRY[name]
        params = [{"name": p.name, "kind": p.kind, "position": p.position, "required": p.required,
                   "default": p.default if p.default is None or isinstance(p.default, (bool, int, float, str))
                   else repr(p.default)} for p in ref.params if p.kind != "ignored"]
        ignored = sorted(PLACEMENT | {p.name for p in ref.params if p.kind == "ignored"})
        entries.append({"name": name, "family": ref.family, "parameters": params,
                        "ignored": ignored, "per_device": ref.per_device, "keeps_values": ref.keeps_values,
                        "defined": None if ref.defined is None else _index_text(ref.defined)})
    return entries


def _index_text(index: tuple[Any, ...]) -> str:
    """A numpy index as Python writes it: ``[..., ::32]``."""
    def part(item: Any) -> str:
        if item is Ellipsis:
            return "..."
        if isinstance(item, slice):
            text = f"{'' if item.start is None else item.start}:{'' if item.stop is None else item.stop}"
            return text + ("" if item.step is None else f":{item.step}")
        return repr(item)

    return "[" + ", ".join(map(part, index)) + "]"


def compute(
    name: str, inputs: Sequence[tuple[int, np.ndarray]], arguments: Sequence[Argument],
    input_dtypes: Mapping[int, str | None] | None = None,
) -> np.ndarray:
    """The reference output of operation ``name`` for its ``inputs`` (``(tensor_id, array)`` in ``input_tensors``
    order) and recorded ``arguments``; ``input_dtypes`` gives the inputs' ttnn dtypes by tensor id where known
    (``BFLOAT8_B`` is stored as bfloat16 values; a reference whose result depends on it asks). Raises
    :class:`UnsupportedArguments` naming what cannot be read, and KeyError when the operation has no reference.
    An operation with several outputs (``ttnn.split``...) gives them all through :func:`compute_outputs`; here it
    is a ValueError."""
    outputs = compute_outputs(name, inputs, arguments, input_dtypes)
    if len(outputs) != 1:
        raise ValueError(f"{name} has {len(outputs)} outputs: use compute_outputs")
    return outputs[0]


def compute_outputs(
    name: str, inputs: Sequence[tuple[int, np.ndarray]], arguments: Sequence[Argument],
    input_dtypes: Mapping[int, str | None] | None = None, max_elements: int | None = None,
) -> tuple[np.ndarray, ...]:
    """Every reference output of operation ``name`` in output-index order (one for most operations; a reference that
    returns a tuple or list gives one per output), with the arguments of :func:`compute`. With ``max_elements``
    (:func:`justified_elements`), arguments for which the reference would build a larger array (its declared
    :attr:`Reference.size`, else its largest input) raise :class:`Oversized` before anything is computed."""
    ref = lookup(name)
    if ref is None:
        raise KeyError(name)
    values = bind(ref, inputs, arguments)
    if max_elements is not None:
        needed = ref.size(values) if ref.size is not None else max((np.size(a) for _, a in inputs), default=0)
        if needed > max_elements:
            tensors = [p.name for p in ref.params if isinstance(values.get(p.name), (np.ndarray, list))]
            raise Oversized(tensors, f"the reference would build {needed:,} elements, more than the stored outputs "
                                     f"justify ({max_elements:,})")
    if ref.input_dtypes:
        known = input_dtypes or {}
        values["input_dtypes"] = {id(array): known.get(tensor_id) for tensor_id, array in inputs}
    result = ref.function(**values)
    if isinstance(result, (tuple, list)):
        return tuple(np.asarray(r) for r in result)
    return (np.asarray(result),)


def bind(ref: Reference, inputs: Sequence[tuple[int, Any]], arguments: Sequence[Argument]) -> dict[str, Any]:
    """The keyword arguments of ``ref``'s function: recorded values parsed, tensors taken from ``inputs`` (arrays, or
    for a collective each input's per-device shards).

    Tensor-valued arguments take the inputs whose ids their text names (ttnn 0.81), else the inputs in call order
    (positional ones by index, then keywords as recorded: the order ttnn 0.6x listed them in ``input_tensors``).
    With no tensor-valued argument recorded, the required tensor parameters take the inputs in order. An input no
    argument accounts for, or an argument that cannot be read, raises :class:`UnsupportedArguments`.
    """
    cxx = [a.name for a in arguments if a.name.startswith("arg_")]
    if cxx:
        raise UnsupportedArguments(cxx, "recorded in C++'s argument order, which no reference reads")
    values: dict[str, Any] = {p.name: p.default for p in ref.params if p.kind not in ("ignored", "output")}
    slots: list[tuple[int, int, Param, str]] = []  # (order key, row index, param, text) of tensor-valued arguments
    bad: list[str] = []
    for row, argument in enumerate(arguments):
        param = ref.param(argument)
        if param is None:
            if argument.name not in PLACEMENT:
                bad.append(argument.name)
            continue
        text = argument.text
        if param.kind in ("tensor", "tensors", "number", "output") and tensor_count(text):
            key = param.position if argument.position is not None and param.position is not None else 1000 + row
            slots.append((key, row, param, text))
        elif param.kind == "ignored" or is_none(text):
            continue
        elif param.kind == "number":
            values[param.name] = _parse(argument, PARSERS["float"], bad)
        elif param.kind in PARSERS:
            values[param.name] = _parse(argument, PARSERS[param.kind], bad)
        else:  # a tensor parameter whose text is no tensor
            bad.append(argument.name)
    if bad:
        raise UnsupportedArguments(bad, "not arguments its reference can read")
    _bind_tensors(ref, sorted(slots, key=lambda s: (s[0], s[1])), list(inputs), values)
    missing = [p.name for p in ref.params if p.required and values.get(p.name) is None]
    if missing:
        raise UnsupportedArguments(missing, "required but not recorded")
    return values


def _parse(argument: Argument, parser: Callable[[str], Any], bad: list[str]) -> Any:
    """One argument's value, or its name added to ``bad`` when its text cannot be read."""
    try:
        return parser(argument.text)
    except ValueError:
        bad.append(argument.name)
        return None


def _bind_tensors(ref: Reference, slots: list[tuple[int, int, Param, str]], inputs: list[tuple[int, Any]],
                  values: dict[str, Any]) -> None:
    """Give each tensor-valued slot its inputs (see :func:`bind`); refuse inputs nothing accounts for."""
    if not slots:  # nothing recorded says where the tensors went: the required ones, in input order
        slots = [(0, 0, p, "") for p in sorted(ref.params, key=lambda p: p.position or 0)
                 if p.kind in ("tensor", "tensors", "number") and p.required and values.get(p.name) is None]
        singles = sum(1 for s in slots if s[2].kind != "tensors")
        counts = [len(inputs) - singles if s[2].kind == "tensors" else 1 for s in slots]
    else:
        counts = [tensor_count(text) for _, _, _, text in slots]
    by_id = {tensor_id: array for tensor_id, array in inputs}
    ids = [tensor_ids(text) for _, _, _, text in slots]
    use_ids = all(len(i) == c and all(t in by_id for t in i) for i, c in zip(ids, counts)) and any(ids)
    cursor = 0
    for (_, _, param, _), count, wanted in zip(slots, counts, ids):
        if use_ids:
            arrays = [by_id[t] for t in wanted]
        else:
            arrays = [array for _, array in inputs[cursor : cursor + count]]
            cursor += count
        if len(arrays) != count or count < 1:
            raise UnsupportedArguments([param.name], "its tensor is not among the operation's stored inputs")
        if param.kind != "output":
            values[param.name] = arrays if param.kind == "tensors" else arrays[0]
    if not use_ids and cursor < len(inputs):  # named as one range: an operation can list 10^6 inputs
        extra = f"input {cursor}" if cursor == len(inputs) - 1 else f"inputs {cursor}-{len(inputs) - 1}"
        raise UnsupportedArguments([extra], "no recorded argument says which parameter these inputs are")


def floats(name: str, array: Any) -> np.ndarray:
    """An input as float32 for a reference that computes in float32: float inputs of any width (bfloat16, float8,
    float16, float32) are widened or kept exactly; an integer or bool input is refused (its arithmetic wraps on the
    device, which float32 does not model). A float32 input is not copied: it comes back as a read-only view, so a
    reference cannot change a value the report or a chain shares (an in-place write raises instead)."""
    arr = np.asarray(array)
    if arr.dtype == np.float32:
        view = arr.view()
        view.flags.writeable = False
        return view
    if arr.dtype.name == "bfloat16":  # its bits are a float32's top half: a shift widens it exactly, twice ml_dtypes' speed
        wide = np.empty(arr.shape, np.uint32)
        np.left_shift(arr.view(np.uint16), 16, out=wide, dtype=np.uint32)
        return wide.view(np.float32)
    if arr.dtype.kind == "f" or arr.dtype.name.startswith("float8"):
        return arr.astype(np.float32)
    raise UnsupportedArguments([name], f"an input of dtype {arr.dtype.name}, which this reference computes only in float")


def float64s(name: str, array: Any) -> np.ndarray:
    """As :func:`floats`, in float64 (for references whose golden computes in float64)."""
    return floats(name, array).astype(np.float64)


def shape(value: Any) -> tuple[int, ...]:
    """The shape of a bound value: an array's, ``()`` for a scalar or None (for :attr:`Reference.size` functions)."""
    return tuple(int(d) for d in value.shape) if isinstance(value, np.ndarray) else ()


def elements(dims: Sequence[int]) -> int:
    """How many elements an array of shape ``dims`` holds (Python integers: a hostile shape cannot overflow)."""
    return math.prod(dims)


def broadcast(*shapes: Sequence[int]) -> int:
    """How many elements the broadcast of arrays of ``shapes`` holds: the largest one's when they do not broadcast
    (the reference then refuses them itself)."""
    try:
        return elements(np.broadcast_shapes(*(tuple(s) for s in shapes)))
    except ValueError:
        return max((elements(s) for s in shapes), default=0)
