"""Reading an operation's recorded arguments as ttnn wrote them into ``operation_arguments``.

ttnn writes every argument as text: ttnn 0.6x's ``database.py`` stores ``f"{value}"`` of each positional argument
under its index (``"0"``, ``"1"``...) and of each keyword under its name; ttnn 0.81's graph report stores ``str(value)``
the same way (keywords first), tensors summarised as ``ttnn.Tensor(shape=..., tensor_id=N, ...)``, and ``arg_N`` for
an operation C++ started with no Python record. This module turns those texts back into values, and refuses
(:class:`UnsupportedArguments`) any text it cannot read: a reference is never fed a guess.

The package imports nothing of reportdb beyond its error base class (and runs without it), so ``reportdb repro``
can copy it into a folder that needs only numpy and ml_dtypes.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable

try:
    from ...errors import UnsupportedArgumentsError as UnsupportedArguments
except ImportError:  # a ``reportdb repro`` folder's copy of this package runs without reportdb: the same class there

    def _init(self: ValueError, names: list[str], reason: str) -> None:
        ValueError.__init__(self, f"unsupported arguments {', '.join(names)}: {reason}")
        self.names = tuple(names)  # type: ignore[attr-defined]
        self.reason = reason  # type: ignore[attr-defined]

    UnsupportedArguments = type("UnsupportedArguments", (ValueError,), {"__init__": _init})  # type: ignore[misc,assignment]


_TENSOR_TEXT = re.compile(r"^\s*(?:ttnn\.Tensor|torch\.Tensor|Tensor)\(")
_TENSOR_ID = re.compile(r"\btensor_id=(\d+)")
_DTYPE = re.compile(r"^(?:DataType\.|ttnn\.)?([A-Za-z0-9_]+)$")
_NONE = {"None", "std::nullopt", "nullopt"}


def is_tensor_text(text: str) -> bool:
    """Whether an argument's text is a tensor as ttnn prints one (values or a summary)."""
    return bool(_TENSOR_TEXT.match(text))


def tensor_count(text: str) -> int:
    """How many tensors an argument's text holds: one for a tensor, several for a list of them (``concat``)."""
    if not (is_tensor_text(text) or text.lstrip()[:1] in "[("):
        return 0
    return len(re.findall(r"(?:ttnn\.Tensor|torch\.Tensor)\(", text))


def tensor_ids(text: str) -> list[int]:
    """The ``tensor_id=N`` values of ttnn 0.81's tensor summaries in an argument's text (none for 0.6x texts)."""
    return [int(m) for m in _TENSOR_ID.findall(text)]


def is_none(text: str) -> bool:
    """Whether the text says the argument was None."""
    return text.strip() in _NONE


def parse_bool(text: str) -> bool:
    """``True``/``False`` (Python's str of a bool), also ``1``/``0`` as C++ prints them."""
    value = text.strip()
    if value in ("True", "true", "1"):
        return True
    if value in ("False", "false", "0"):
        return False
    raise ValueError(f"not a bool: {text!r}")


#: Every integer ttnn records is a C++ one of at most 64 bits: a longer text is no argument ttnn recorded (numpy would
#: overflow on it as an axis or in int64 arithmetic).
INT_BITS = 64


def _int(text: str, digits: str) -> int:
    """``digits`` as an integer, refused outside the signed 64-bit range."""
    value = int(digits)
    if not -(1 << (INT_BITS - 1)) <= value < 1 << (INT_BITS - 1):
        raise ValueError(f"an integer outside 64 bits: {text[:40]!r}")
    return value


def parse_int(text: str) -> int:
    """An integer as Python prints one (of at most 64 bits)."""
    value = text.strip()
    if not re.fullmatch(r"[+-]?\d+", value):
        raise ValueError(f"not an integer: {text!r}")
    return _int(text, value)


def parse_float(text: str) -> float:
    """A number as Python prints one (``1e-05``, ``-inf``, ``2``)."""
    value = text.strip()
    if not re.fullmatch(r"[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|inf|nan)", value):
        raise ValueError(f"not a number: {text!r}")
    result = float(value)
    if math.isnan(result):
        raise ValueError("NaN is not a value a reference takes")
    return result


def parse_ints(text: str) -> tuple[int, ...]:
    """A sequence of integers: ``[0, 2, 1, 3]``, ``(1, 2)``, ``Shape([1, 32])``, ``ttnn.Shape([...])``, one int, or
    ``0, 2, 1, 3`` (ttnn 0.6x's ``database.py`` joins a list's elements with ", ", brackets dropped)."""
    value = text.strip()
    shape = re.fullmatch(r"(?:ttnn\.)?Shape\((.*)\)", value)
    if shape:
        value = shape.group(1).strip()
    if re.fullmatch(r"[+-]?\d+(?:\s*,\s*[+-]?\d+)*", value):  # one int, or ttnn 0.6x's list joined by ", "
        return tuple(_int(text, p) for p in value.split(","))
    inner = re.fullmatch(r"[\[(]\s*([+-]?\d+(?:\s*,\s*[+-]?\d+)*)?\s*,?\s*[\])]", value)
    if not inner:
        raise ValueError(f"not a sequence of integers: {text!r}")
    return tuple(_int(text, p) for p in inner.group(1).split(",")) if inner.group(1) else ()


def parse_dtype(text: str) -> str:
    """A ttnn dtype (``DataType.BFLOAT16``, ``ttnn.bfloat16``) as its lower-case name, ``bfloat16``."""
    match = _DTYPE.fullmatch(text.strip())
    if not match:
        raise ValueError(f"not a dtype: {text!r}")
    return match.group(1).lower()


def parse_activation(text: str) -> str:
    """A fused activation as ttnn prints it (``relu``, ``UnaryOpType.RELU``, ``UnaryWithParam(op_type=UnaryOpType::RELU)``)
    as its lower-case name; an activation with parameters is refused (the reference does not model it)."""
    value = text.strip()
    if "params=" in value:
        raise ValueError(f"an activation with parameters: {text!r}")
    match = re.fullmatch(r"(?:UnaryWithParam\(op_type=)?(?:ttnn\.)?(?:UnaryOpType(?:::|\.))?([A-Za-z_0-9]+)\)?", value)
    if not match:
        raise ValueError(f"not an activation: {text!r}")
    return match.group(1).lower()


def parse_gelu_variant(text: str) -> str:
    """``GeluVariant.Tanh`` (ttnn 0.81's gelu variant) as ``tanh``, ``accurate`` or ``fastlut``."""
    match = re.fullmatch(r"(?:ttnn\.)?(?:GeluVariant(?:::|\.))?(Tanh|Accurate|FastLut)", text.strip())
    if not match:
        raise ValueError(f"not a gelu variant: {text!r}")
    return match.group(1).lower()


def parse_no_fused_activation(text: str) -> None:
    """A program config is accepted only when it fuses no activation (the output's values then do not depend on it)."""
    match = re.search(r"fused_activation=([^,)]*)", text)
    if match and match.group(1).strip() not in _NONE:
        raise ValueError(f"a program config with a fused activation ({match.group(1).strip()})")
    return None


def parse_empty(text: str) -> None:
    """An argument accepted only empty (``[]``): a list of fused activations the reference does not model otherwise."""
    if text.strip() not in ("[]", "()"):
        raise ValueError(f"not empty: {text!r}")
    return None


def parse_word(text: str) -> str:
    """A plain word such as a rounding mode (``floor``), quotes stripped."""
    value = text.strip().strip("'\"")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z_0-9]*", value):
        raise ValueError(f"not a word: {text!r}")
    return value


PARSERS: dict[str, Callable[[str], Any]] = {
    "bool": parse_bool, "int": parse_int, "float": parse_float, "ints": parse_ints, "dtype": parse_dtype,
    "activation": parse_activation, "gelu_variant": parse_gelu_variant, "program_config": parse_no_fused_activation,
    "empty": parse_empty, "word": parse_word,
}

# Parsers of the placement, shape and creation references (``placement``, ``shapes``, ``creation``).

#: The ttnn dtypes a text may name where a placement's positional argument is either a dtype or a placement setting.
_DTYPE_NAMES = frozenset({"bfloat16", "float32", "bfloat8_b", "bfloat4_b", "uint8", "uint16", "uint32", "int32"})
_PAIR = re.compile(r"[\[(]\s*([+-]?\d+)\s*,\s*([+-]?\d+)\s*[\])]")


def parse_dtype_or_placement(text: str) -> str | None:
    """A positional argument that is an output dtype in one overload and a placement setting (grid, shard shape,
    scheme, orientation, memory config) in another: the dtype's lower-case name, or None for any other text."""
    match = re.fullmatch(r"(?:DataType\.|ttnn\.)([A-Za-z0-9_]+)", text.strip())
    name = match.group(1).lower() if match else ""
    return name if name in _DTYPE_NAMES else None


def parse_pairs_or_ints(text: str) -> tuple[Any, ...]:
    """ttnn.pad's ``padding``: a sequence of integers (an output shape; ttnn 0.6x's text of one pair, ``(0, 28)``, too)
    as a tuple of ints, else a list of (before, after) pairs (``[(0, 0), (0, 28)]``, or ttnn 0.6x's
    ``(0, 0), (0, 28)``) as a tuple of pairs."""
    try:
        return parse_ints(text)
    except ValueError:
        pass
    value = text.strip()
    pairs = _PAIR.findall(value)
    if not pairs or not re.fullmatch(r"[\[(]?[\s,]*[\])]?", _PAIR.sub("", value)):
        raise ValueError(f"not a list of pairs: {text!r}")
    return tuple((_int(text, a), _int(text, b)) for a, b in pairs)


def parse_float_or_ints(text: str) -> float | tuple[int, ...]:
    """A number, or else a sequence of integers (ttnn.pad's third positional argument: a value or a start)."""
    try:
        return parse_float(text)
    except ValueError:
        return parse_ints(text)


def parse_bool_or_int(text: str) -> int:
    """A count given as a bool or an integer (ttnn.var's ``correction``: ``True`` is 1)."""
    try:
        return int(parse_bool(text))
    except ValueError:
        return parse_int(text)


def parse_enum(text: str) -> str:
    """An enum value as Python or C++ prints it (``BcastOpMath.ADD``, ``ttnn.BcastOpDim.HW``, ``BcastOpDim::W``) as
    its lower-case member name."""
    match = re.fullmatch(r"(?:ttnn\.)?(?:[A-Za-z_][A-Za-z_0-9]*(?:::|\.))?([A-Za-z_][A-Za-z_0-9]*)", text.strip())
    if not match:
        raise ValueError(f"not an enum value: {text!r}")
    return match.group(1).lower()


PARSERS.update({
    "dtype_or_placement": parse_dtype_or_placement, "pairs_or_ints": parse_pairs_or_ints,
    "float_or_ints": parse_float_or_ints, "bool_or_int": parse_bool_or_int, "enum": parse_enum,
})


# conv, pooling and attention references (h-refsB)
def parse_conv_config(text: str) -> str | None:
    """A ``Conv2dConfig(...)`` as the name of the activation it fuses (None: none); a padding mode other than zeros
    is refused (the reference pads with zeros)."""
    value = text.strip()
    if not value.startswith("Conv2dConfig("):
        raise ValueError(f"not a Conv2dConfig: {text[:60]!r}")
    mode = re.search(r"padding_mode=([A-Za-z_:.]+)", value)
    if mode and not mode.group(1).endswith("Zeros"):
        raise ValueError(f"a padding mode {mode.group(1)}")
    activation = re.search(r"\bactivation=(UnaryWithParam\([^)]*\)|[^,)]*)", value)
    if activation is None or activation.group(1).strip() in _NONE | {""}:
        return None
    return parse_activation(activation.group(1))


def parse_floats(text: str) -> tuple[float, ...]:
    """One number or a sequence of them: ``2``, ``1.5``, ``[2, 2]``, ``(1.5, 2.0)``, or ``2, 3`` (ttnn 0.6x's
    ``database.py`` joins a list's elements with ", ", brackets dropped)."""
    value = text.strip()
    inner = re.fullmatch(r"[\[(]\s*(.*?)\s*,?\s*[\])]", value)
    parts = (inner.group(1) if inner else value).split(",")
    return tuple(parse_float(p) for p in parts)


def parse_absent(text: str) -> None:
    """An argument a reference accepts only as None (ttnn's default): any recorded value is refused."""
    raise ValueError(f"a value the reference does not model: {text[:60]!r}")


PARSERS.update({"conv_config": parse_conv_config, "floats": parse_floats, "none": parse_absent})


@dataclass(frozen=True)
class Param:
    """One parameter of a reference, as the ttnn operation's Python signature has it.

    ``kind`` is ``tensor``, ``tensors`` (a list of tensors), ``number`` (a tensor or a scalar), ``ignored`` (no effect
    on the values: a memory config, a compute kernel config, a core grid) or a key of :data:`PARSERS`. ``position``
    is the index the parameter takes when passed positionally (None: keyword only).
    """

    name: str
    kind: str
    position: int | None = None
    default: Any = None
    required: bool = False


@dataclass(frozen=True)
class Argument:
    """One recorded argument: its name as stored (an index for a positional one) and its text."""

    name: str
    text: str

    @property
    def position(self) -> int | None:
        """The positional index when the argument was passed positionally (``"1"``; ``"arg_1"`` is C++'s and not
        Python's order, so it is no position)."""
        return int(self.name) if self.name.isdigit() else None
