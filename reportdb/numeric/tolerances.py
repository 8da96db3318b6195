"""The element-wise tolerances each dtype is compared at by default, derived from its precision.

``p`` significand bits (counting the leading one) give ``eps = 2**(1-p)``; ``rtol = max(2 eps, 1e-5)`` and ``atol =
eps`` (two results each rounded to nearest differ by up to one eps relative, a second allows reassociation; float32
keeps numpy's 1e-5, about 84 ulps, for device math at reduced fidelity and other summation orders). Integers: exact.
``reportdb.compare`` uses these when no rtol/atol is given, and so does the tolerance policy
(``reportdb.analysis.policy``), so a plain call on bfloat16 tensors is not held to float32's tolerances.
"""

from __future__ import annotations

#: Significand bits (counting the leading one) of each float dtype, by canonical (ttnn-style, upper-case) name.
SIGNIFICAND_BITS = {
    "FLOAT64": 53, "FLOAT32": 24, "FLOAT16": 11, "BFLOAT16": 8, "BFLOAT8_B": 7, "BFLOAT4_B": 3,
    "FLOAT8_E4M3FN": 4, "FLOAT8_E5M2": 3,
}
#: Block floats: 16 values share one exponent, so precision is relative to the block's largest value.
BLOCK_FLOATS = frozenset({"BFLOAT8_B", "BFLOAT4_B"})
INTEGERS = frozenset({"BOOL", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64", "INTEGER"})


def canonical_dtype(dtype: str | None) -> str:
    """A dtype name as tolerances and policies match it: ttnn's and reportdb's spellings alike (``DataType.BFLOAT16``,
    ``bfloat16``, ``BFLOAT16``) become the upper-case ttnn name; None or "" becomes ``"UNKNOWN"``."""
    if not dtype:
        return "UNKNOWN"
    return str(dtype).strip().rsplit(".", 1)[-1].upper()


def significand_bits(dtype: str | None) -> int | None:
    """The significand bits of a float dtype (an unknown one counts as float32), None for integers and bool."""
    name = canonical_dtype(dtype)
    return None if name in INTEGERS else SIGNIFICAND_BITS.get(name, 24)


def dtype_tolerances(dtype: str | None) -> tuple[float, float]:
    """The default (rtol, atol) of a dtype (see the module docstring)."""
    bits = significand_bits(dtype)
    if bits is None:
        return 0.0, 0.0
    eps = 2.0 ** (1 - bits)
    return max(2 * eps, 1e-5), eps
