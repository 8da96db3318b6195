"""Structured values from the text that TTNN reports store for memory configs, shapes, dtypes and layouts.

Reports keep these as free text whose format changed with every tt-metal release (four memory-config
formats between 2024 and 2026, plus the 0.81 ``NdShardSpec(...)`` and ``per_core_allocation`` additions).
These parsers turn every known variant into one structure, so nothing downstream depends on a release.
They never raise on odd input: a migration must not fail on a string nobody has seen yet.
"""

from __future__ import annotations

import re
from typing import Any, Callable, TypedDict

__all__ = ["parse_memory_config", "parse_shape", "parse_dtype", "parse_layout"]

_NULL = frozenset({"", "none", "null", "nullopt", "std::nullopt"})
_OPENERS = {"(": ")", "[": "]", "{": "}"}
_CLOSERS = frozenset(_OPENERS.values())

_STRUCT = re.compile(r"\s*([A-Za-z_][\w:.]*)?\s*([({])(.*)([)}])\s*", re.DOTALL)
_QUOTED_KEY = re.compile(r'\s*"([^"]*)"\s*:\s*(.*)', re.DOTALL)
_PLAIN_KEY = re.compile(r"\s*([A-Za-z_]\w*)\s*=(?!=)\s*(.*)", re.DOTALL)
_ENUM = re.compile(r"[A-Za-z_]\w*(?:(?:::|\.)[A-Za-z_]\w*)*")
_ENUM_REPR = re.compile(r"<\s*([\w:.]+)\s*:\s*-?\d+\s*>")  # pybind/Python enum repr: <DataType.BFLOAT16: 0>
_LEADING_NAME = re.compile(r"\s*[A-Za-z_][\w:.]*")
_INT_LIST = re.compile(r"[\s\[\](){},\d]*")
_GRID_WORDS = re.compile(r'"?\b(?:start|end|x|y)\b"?\s*[=:]')
_GRID_REST = re.compile(r"[\s\[\](){},\d-]*")
_SHAPE = re.compile(r"\s*(?:[A-Za-z_][\w.:]*\s*\(\s*\[(.*)\]\s*\)|\[(.*)\]|\((.*)\))\s*", re.DOTALL)
_DIM = re.compile(r"(\d+)(?:\[(\d+)\])?")

#: Field names of positional arguments in the abbreviated ``MemoryConfig(WIDTH_SHARDED,L1,...)`` form.
_POSITIONAL = ("memory_layout", "buffer_type", "shard_spec")


def parse_memory_config(text: str | None) -> dict[str, Any] | None:
    """Decompose a memory-config string of any report age into structured fields.

    Returns ``None`` for a missing config (``None``, ``''``, ``"None"``, ``std::nullopt``), else::

        {"memory_layout": "HEIGHT_SHARDED", "buffer_type": "L1",
         "shard_spec": {"grid": [[[x0, y0], [x1, y1]], ...], "shape": [h, w], "orientation": "ROW_MAJOR",
                        "mode": "PHYSICAL" | None, "physical_shard_shape": [h, w] | None,
                        "halo": bool | None} | None,
         "nd_shard_spec": {"shard_shape": [...], "grid": [...], "orientation": ...,
                           "shard_distribution_strategy": "ROUND_ROBIN_1D"} | None,
         "created_with_nd_shard_spec": bool | None,
         "extra": {key: raw text}}

    Enum prefixes (``TensorMemoryLayout::``, ``BufferType.``...) are stripped. Keys this parser does not
    know, and known keys whose value it cannot read, go to ``extra`` verbatim (nested ones as
    ``"shard_spec.<key>"``), so nothing is dropped. Text that is not a ``MemoryConfig(...)`` at all
    (for instance the bare ``DRAM`` some operation arguments hold) gives ``{"unparsed": text}``
    instead of an error, so a migration never fails on an odd string.
    """
    if text is None or text.strip().lower() in _NULL:
        return None
    struct = _struct(text)
    if struct is None or _last_component(struct[0]) != "MemoryConfig":
        return {"unparsed": text}
    extra: dict[str, str] = {}
    result: dict[str, Any] = {
        "memory_layout": None,
        "buffer_type": None,
        "shard_spec": None,
        "nd_shard_spec": None,
        "created_with_nd_shard_spec": None,
    }
    for index, (key, raw) in enumerate(struct[1]):
        if key is None and index < len(_POSITIONAL):
            key = _POSITIONAL[index]
        if key in _NESTED_FIELDS:
            result[key] = _substruct(raw, _NESTED_FIELDS[key], key, extra)
        elif key in _SCALAR_FIELDS:
            result[key] = _convert(_SCALAR_FIELDS[key], raw, key, extra)
        else:
            extra[key if key is not None else f"arg{index}"] = raw
    result["extra"] = extra
    return result


class ParsedShape(TypedDict):
    """What :func:`parse_shape` returns: the logical dims, and the padded ones when any dim carries padding."""

    shape: list[int]
    padded_shape: list[int] | None


def parse_shape(text: str | None) -> ParsedShape | None:
    """Read ``Shape([1, 1, 32, 32])``, ``ttnn.Shape([1, 1, 1[32], 2048])``, ``torch.Size([...])`` or ``[1, 2]``.

    Returns ``{"shape": [...], "padded_shape": [...] | None}``; a dim written ``1[32]`` is logical 1,
    padded 32, and ``padded_shape`` is None when no dim carries padding. None when unreadable.
    """
    if text is None:
        return None
    match = _SHAPE.fullmatch(text)
    if match is None:
        return None
    body = next(group for group in match.groups() if group is not None)
    items = body.split(",")
    if items and not items[-1].strip():  # (3,) and [] have an empty last item
        items.pop()
    shape: list[int] = []
    padded: list[int] = []
    has_padding = False
    for item in items:
        dim = _DIM.fullmatch(re.sub(r"\s+", "", item))
        if dim is None:
            return None
        shape.append(int(dim.group(1)))
        padded.append(int(dim.group(2) or dim.group(1)))
        has_padding = has_padding or dim.group(2) is not None
    return {"shape": shape, "padded_shape": padded if has_padding else None}


def parse_dtype(text: str | None) -> str | None:
    """The dtype name without its enum prefix: ``DataType.BFLOAT16`` → ``BFLOAT16``, ``torch.bfloat16`` → ``bfloat16``.

    None for a missing or unreadable value.
    """
    return _enum_or_none(text)


def parse_layout(text: str | None) -> str | None:
    """The layout name without its enum prefix: ``Layout::TILE`` → ``TILE``, ``torch.strided`` → ``strided``.

    None for a missing or unreadable value.
    """
    return _enum_or_none(text)


# --- memory-config pieces -------------------------------------------------------------------------


def _enum(raw: str) -> str | None:
    """``TensorMemoryLayout::HEIGHT_SHARDED``, ``"BufferType.L1"`` or ``L1`` → the last name; ValueError otherwise."""
    value = raw.strip().strip('"').strip()
    if value.lower() in _NULL:
        return None
    repr_match = _ENUM_REPR.fullmatch(value)
    if repr_match is not None:
        value = repr_match.group(1)
    if _ENUM.fullmatch(value) is None:
        raise ValueError(raw)
    return _last_component(value)


def _bool(raw: str) -> bool | None:
    value = raw.strip().strip('"').lower()
    if value in _NULL:
        return None
    if value in ("0", "false"):
        return False
    if value in ("1", "true"):
        return True
    raise ValueError(raw)


def _ints(raw: str) -> list[int] | None:
    """``{32, 64}``, ``[224, 224]``, ``Shape([32, 64])`` → ``[h, w]``; ValueError for anything else."""
    if raw.strip().lower() in _NULL:
        return None
    name = _LEADING_NAME.match(raw)
    rest = raw[name.end():] if name is not None else raw
    if _INT_LIST.fullmatch(rest) is None:
        raise ValueError(raw)
    return [int(v) for v in re.findall(r"\d+", rest)]


def _grid(raw: str) -> list[list[list[int]]] | None:
    """Core ranges as ``[[[x0, y0], [x1, y1]], ...]`` from any of the grid spellings.

    ``{[(x=0,y=0) - (x=7,y=7)]}`` (2024-2025), ``[{"start":{"x":0,"y":0},"end":{"x":5,"y":7}}]``
    (2026 graph capture) and ``[{0,0}-{7,3}]`` (abbreviated) all list four numbers per range.
    """
    if raw.strip().lower() in _NULL:
        return None
    rest = _GRID_WORDS.sub("", raw)
    numbers = [int(v) for v in re.findall(r"\d+", rest)]
    if _GRID_REST.fullmatch(rest) is None or len(numbers) % 4:
        raise ValueError(raw)
    return [[[numbers[i], numbers[i + 1]], [numbers[i + 2], numbers[i + 3]]] for i in range(0, len(numbers), 4)]


_SHARD_SPEC_FIELDS: dict[str, Callable[[str], Any]] = {
    "grid": _grid,
    "shape": _ints,
    "orientation": _enum,
    "mode": _enum,
    "physical_shard_shape": _ints,
    "halo": _bool,
}

_ND_SHARD_SPEC_FIELDS: dict[str, Callable[[str], Any]] = {
    "shard_shape": _ints,
    "grid": _grid,
    "orientation": _enum,
    "shard_distribution_strategy": _enum,
}


_SCALAR_FIELDS: dict[str, Callable[[str], Any]] = {
    "memory_layout": _enum,
    "buffer_type": _enum,
    "created_with_nd_shard_spec": _bool,
}

_NESTED_FIELDS = {"shard_spec": _SHARD_SPEC_FIELDS, "nd_shard_spec": _ND_SHARD_SPEC_FIELDS}


def _substruct(
    raw: str, fields: dict[str, Callable[[str], Any]], path: str, extra: dict[str, str]
) -> dict[str, Any] | None:
    """A nested spec (``ShardSpec(...)``, ``ShardSpec{...}``, ``NdShardSpec(...)`` or a JSON object) as a dict.

    Every field in ``fields`` is present (None when absent); the rest goes to ``extra`` as ``path.key``.
    """
    if raw.strip().lower() in _NULL:
        return None
    struct = _struct(raw)
    if struct is None:
        extra[path] = raw
        return None
    result: dict[str, Any] = dict.fromkeys(fields)
    for index, (key, value) in enumerate(struct[1]):
        if key in fields:
            result[key] = _convert(fields[key], value, f"{path}.{key}", extra)
        else:
            extra[f"{path}.{key if key is not None else f'arg{index}'}"] = value
    return result


def _convert(convert: Callable[[str], Any], raw: str, path: str, extra: dict[str, str]) -> Any:
    """``convert(raw)``, or None with ``raw`` kept in ``extra[path]`` when the value is unreadable."""
    try:
        return convert(raw)
    except ValueError:
        extra[path] = raw
        return None


# --- tokenizer ------------------------------------------------------------------------------------


def _struct(text: str) -> tuple[str, list[tuple[str | None, str]]] | None:
    """Split ``Name(k=v,...)``, ``Name{k=v, ...}`` or ``{"k":v,...}`` into its name and (key, raw value) items.

    Keys are None for positional items. None when the text is not one bracketed struct.
    """
    match = _STRUCT.fullmatch(text)
    if match is None or _OPENERS[match.group(2)] != match.group(4):
        return None
    items: list[tuple[str | None, str]] = []
    for part in _split_top_level(match.group(3)):
        keyed = _QUOTED_KEY.fullmatch(part) or _PLAIN_KEY.fullmatch(part)
        items.append((keyed.group(1), keyed.group(2).strip()) if keyed else (None, part))
    return match.group(1) or "", items


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside brackets and double quotes.

    A closing bracket closes everything opened since its partner, and one without a partner is
    ignored, so a dropped brace (seen in a 2026 graph-capture grid) cannot swallow the next field.
    """
    parts: list[str] = []
    expected: list[str] = []  # closers of the open brackets, innermost last
    start = 0
    in_quotes = False
    for i, ch in enumerate(text):
        if ch == '"':
            in_quotes = not in_quotes
        elif in_quotes:
            continue
        elif ch in _OPENERS:
            expected.append(_OPENERS[ch])
        elif ch in _CLOSERS:
            if ch in expected:
                while expected.pop() != ch:
                    pass
        elif ch == "," and not expected:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [part.strip() for part in parts if part.strip()]


def _last_component(name: str) -> str:
    return re.split(r"::|\.", name)[-1]


def _enum_or_none(text: str | None) -> str | None:
    if text is None:
        return None
    try:
        return _enum(text)
    except ValueError:
        return None
