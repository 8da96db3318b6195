"""Request parameters of the web API, parsed and checked: slices, indices, mesh coordinates, numbers, choices.

Every bad value is an :class:`ApiError` (400) that names the parameter, says what was wrong and what it takes, so
a request can never reach the store with a value the store would have to refuse.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

from werkzeug.exceptions import HTTPException

#: The numbers a URL parameter may hold at most (a slice bound, an index, a pixel count): larger is a typo or an attack.
_MAX_TEXT = 4096


class ApiError(HTTPException):
    """An HTTP answer other than 200, given as JSON ``{"error", "hint"}`` with ``status`` (400, 404, 413, 421, 422,
    503) and any ``headers`` (Retry-After). It never leaves the web API (the blueprint answers it), so it is an HTTP
    exception, not one of reportdb's errors."""

    def __init__(self, status: int, error: str, hint: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(description=error)
        self.code = status
        self.status = status
        self.error = error
        self.hint = hint
        self.extra_headers = dict(headers or {})


def bad(name: str, value: str, takes: str) -> ApiError:
    """The 400 answer for parameter ``name`` holding ``value``."""
    shown = value if len(value) <= 80 else value[:77] + "..."
    return ApiError(400, f"parameter {name}={shown!r} is not valid: {takes}", f"give {name} as {takes}")


def _text(args: Mapping[str, str], name: str) -> str | None:
    value = args.get(name)
    if value is None or value == "":
        return None
    if len(value) > _MAX_TEXT:
        raise bad(name, value, f"at most {_MAX_TEXT} characters")
    return value


def integer(args: Mapping[str, str], name: str, default: int, *, low: int = 0, high: int = 2**62) -> int:
    """A whole number in ``low..high`` (default when absent)."""
    text = _text(args, name)
    if text is None:
        return default
    try:
        value = int(text.strip(), 10)
    except ValueError:
        raise bad(name, text, f"a whole number from {low} to {high}") from None
    if not low <= value <= high:
        raise bad(name, text, f"a whole number from {low} to {high}")
    return value


def number(args: Mapping[str, str], name: str, default: float, *, low: float, high: float) -> float:
    """A finite number in ``low..high`` (default when absent)."""
    found = optional_number(args, name, low=low, high=high)
    return default if found is None else found


def optional_number(args: Mapping[str, str], name: str, *, low: float, high: float) -> float | None:
    """A finite number in ``low..high``, or None when absent."""
    text = _text(args, name)
    if text is None:
        return None
    try:
        value = float(text.strip())
    except ValueError:
        raise bad(name, text, f"a number from {low:g} to {high:g}") from None
    if not (math.isfinite(value) and low <= value <= high):
        raise bad(name, text, f"a number from {low:g} to {high:g}")
    return value


def choice(args: Mapping[str, str], name: str, choices: Sequence[str]) -> str:
    """One of ``choices`` (the first when absent)."""
    text = _text(args, name)
    if text is None:
        return choices[0]
    if text not in choices:
        raise bad(name, text, "one of " + ", ".join(choices))
    return text


def _ints(text: str, name: str, takes: str) -> tuple[int, ...]:
    try:
        return tuple(int(part.strip(), 10) for part in text.split(","))
    except ValueError:
        raise bad(name, text, takes) from None


def device(args: Mapping[str, str]) -> tuple[int, ...] | None:
    """A mesh coordinate ``r,c`` (any number of non-negative whole numbers, comma-separated), or None."""
    text = _text(args, "device")
    if text is None:
        return None
    coordinate = _ints(text, "device", "a mesh coordinate such as 0,1")
    if any(c < 0 for c in coordinate):
        raise bad("device", text, "a mesh coordinate of non-negative numbers such as 0,1")
    return coordinate


def index(args: Mapping[str, str], name: str) -> tuple[int, ...] | None:
    """Comma-separated whole numbers (negative ones count from the end, as in numpy), or None when absent."""
    text = _text(args, name)
    return None if text is None else _ints(text, name, "whole numbers separated by commas, such as 0,0,5,7")


def axis_slice(text: str, name: str) -> int | slice:
    """One axis of a numpy basic index: ``i``, ``a:b``, ``a:b:s`` (each part optional) or ``:``."""
    parts = text.strip().split(":")
    if len(parts) > 3:
        raise bad(name, text, "i, a:b or a:b:s per axis")
    try:
        values = [None if p.strip() == "" else int(p.strip(), 10) for p in parts]
    except ValueError:
        raise bad(name, text, "whole numbers in i, a:b or a:b:s per axis") from None
    if len(values) == 1:
        if values[0] is None:
            raise bad(name, text, "an index or a slice per axis, not an empty part")
        return values[0]
    step = values[2] if len(values) == 3 else None
    if step is not None and step <= 0:
        raise bad(name, text, "a slice with a positive step")
    return slice(values[0], values[1], step)


def window(args: Mapping[str, str], name: str = "slice") -> tuple[int | slice, ...]:
    """numpy basic indexing per axis, comma-separated (``0,0,0:32,0:64``); absent means the whole tensor."""
    text = _text(args, name)
    if text is None:
        return ()
    return tuple(axis_slice(part, name) for part in text.split(","))

