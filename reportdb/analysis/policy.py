"""One tolerance policy decides every pass/fail verdict: in the CLI, the Python API, the page and the team store.

A policy is a list of rules matched in order by operation name (a glob) and dtype, each holding criteria; an output
is judged by the first rule that matches it, else by the built-in rule for operations that keep values (below), else
by its dtype's defaults. All of a rule's criteria must hold, and whatever the criteria, a shape change or a NaN/Inf
where the other side has none fails (``"shape"``, ``"nonfinite"``).

Criteria (each optional): ``pcc`` (the minimum Pearson correlation), ``rtol``/``atol`` with ``max_mismatch_fraction``
(at most that fraction of elements outside ``|a - b| <= atol + rtol * |b|``; 0 when only rtol/atol are given),
``max_abs_error``, ``max_ulp`` (in the coarser dtype's units in the last place), ``sqnr_db`` (the minimum of
10 log10 of the golden's energy over the error's) and ``tile_sqnr_db`` (the same of every 32x32 tile of the last two
dims, each tile's golden energy floored at its share of the tensor's, ``numeric/tiles.py``: one wrong tile fails
the output, and the verdict names it in ``worst_tile`` and says what it saw in ``notes``). The ``pcc`` criterion also
requires the fitted line ``b ~ k*a + c`` to be the identity (``"scale_or_offset"``), except for the systematic shrink
math fidelity's operand truncation causes (``numeric/fit.py``), which passes with a note. ``bitwise = true``: the
output holds the expected side's bits (``Comparison.bitwise_equal``: the same dtype and bytes), so a zero's sign and a
NaN's payload count; the note says by how much the values differ, or that only bits do.

Operations that only move or keep values (clone, copy, move, reshape/view, squeeze/unsqueeze, permute, transpose,
concat, stack, slice, split/chunk, pad with its fill, repeat, expand, to_layout/tilize/untilize, the sharded and
interleaved conversions, reshard, reallocate, to_memory_config, all_gather and mesh_partition, embedding, gather and
scatter, slice_write and the KV-cache updates' copied rows: the references declaring ``keeps_values``, listed by
``references.keeping_values()``) get a built-in rule, ``bitwise = true``, matched after the policy's own rules (one
relaxes it as any rule replaces the defaults). A correct device moves their bytes (NoC reads and writes, the packer's
copy of a tile), so one element one ulp off is a bug a float tolerance would pass (1 in 2,048 off by 1.0 keeps a
clone's tile SQNR near 30 dB). -0.0 against 0.0 and a NaN's payload fail too: a copy keeps them, so a change means the
values went through arithmetic (``x + 0.0`` turns -0.0 into 0.0) or were corrupted, and later operations see it (1/x
gives -inf or inf, signbit, a sort's total order). A float32 output is held by ``max_ulp = 8192`` (one TF32 ulp)
instead, since ttnn before tt-metal #39401 and #37333 moved float32 tiles through the unpacker's 19-bit TF32 format
(tilize, untilize, to_layout, transpose), truncating 13 mantissa bits (#23405, #33795); a sign flip or a value off
by a bfloat16 ulp still fails. The rule does not apply, and the dtype's defaults judge, where:

* the output is a block float (BFLOAT8_B, BFLOAT4_B): moving values regroups them into new 16-value blocks whose
  shared exponent re-encodes them, as a typecast does (typecast itself keeps no values and has no such rule);
* the two sides' stored dtypes differ: the expected side was not written in the output's dtype (a chain's float32
  values, a float32 golden), so it cannot hold the output's bits. A policy sees the output's dtype, not the input's:
  an operation asked to convert as it moves (``clone(x, dtype=...)`` of a float32 ``x``) has its reference written in
  the output's dtype by torch's rounding (to nearest even), and the rule holds the device's conversion to that;
* the comparison is ``accumulated`` (a global golden record, another run, a team history's global row): the expected
  side carries error made before the operation, which a copy carries on unchanged; replay's chain says so of every
  output it judges (after a typecast its values are in the cast's dtype, yet carry the chain's earlier error).

Dtype-aware defaults, derived from each dtype's precision (``p`` significand bits counting the leading one, so
``eps = 2**(1-p)``: float32 2^-23, bfloat16 2^-7, BFLOAT8_B 2^-6, BFLOAT4_B 2^-2 relative to its block's largest
value, since a block float's 16 values share one exponent and store sign + p bits each):

* ``rtol = max(2 eps, 1e-5)``, ``atol = eps``: two results that each round to the nearest value differ by up to
  one ``eps`` relative; a second one allows reassociation. float32 keeps numpy's 1e-5 (about 84 float32 ulps):
  device float32 runs at reduced-fidelity multiplies and other summation orders. These count ``allclose`` mismatches
  for every comparison but are only a criterion where a rule asks (with ``max_mismatch_fraction``), because an
  absolute ``atol`` depends on the tensor's scale: a bfloat16 matmul whose outputs are ~64 has errors of ~0.25 on
  its near-zero outputs, and the element-wise test would fail a correct result.
* ``pcc = 0.99``, ttnn's comparison-mode default, except BFLOAT4_B, whose 3 bits alone cost about 0.01 of PCC on a
  Gaussian tensor (its rounding SQNR is ~15 dB): 0.97.
* ``sqnr_db = min(6.02 p + 4.77 - 30, 30)`` (None when not positive): ``6.02 p + 4.77`` dB is the SQNR of rounding a
  value to ``p`` bits once (relative error uniform in +-eps/2); the default allows 1000x (30 dB) that error energy for
  the accumulation of a chain of operations, capped at 30 dB (PCC ~0.9995 for noise-like error) for float32, whose
  device results are not IEEE-exact. bfloat16: 22.9 dB; block floats lose ~8 dB to the shared exponent first
  (BFLOAT8_B: 9 dB; BFLOAT4_B: none, PCC alone judges). Scale-free like PCC, SQNR also sees a scale or offset
  error and an error confined to a few elements: a sign-flipped 64x64 block of a 256x256 tensor has PCC 0.875 but
  a 32x32 block of a 1024x1024 one 0.998 (SQNR 24 dB) -- a rule with ``max_mismatch_fraction`` catches that.
* ``tile_sqnr_db = min(6.02 p + 4.77 - 11, 26)`` (the block floats' shared exponent not counted; None when not
  positive): a tile may carry 12.6x (11 dB) the error energy of one rounding of its values at ``p`` bits, capped at
  26 dB. Calibrated on device-like results of every op family (math fidelity LoFi..HiFi4, float32 and bfloat16
  dest, BFLOAT8_B/4_B packing) and planted faults (benchmarks/NOTES.md, "Calibration"): the worst tile of a correct
  result was >= 30.2 dB in BFLOAT16 (a LoFi multiply; fidelity truncation is the largest error a correct result
  carries) and >= 34.3 dB in BFLOAT8_B, while a tile off by 10% reads <= 20 dB, or 23.2 dB on a LoFi result already
  shrunk 2.5%: the cap leaves 4.2 dB on the one side and 2.8 dB on the other (x1.1 fails in float32, bfloat16 and
  BFLOAT8_B). BFLOAT4_B gets 11.83 dB: its correct results' worst tiles were >= 17.6 dB, x1.5 of a tile <= 6.0 dB.
  A sign-flipped, zeroed, row-reversed, face-swapped tile or another tile's values are <= 6 dB and fail in every
  float dtype with a default (FLOAT8_E4M3FN 17.85, FLOAT8_E5M2 11.8 dB, uncalibrated). The bound is above bfloat16's
  whole-tensor 22.9 dB: an error spread evenly between the two (an accumulated chain's, say) fails the tile criterion
  alone.
* integers (and bool): exact: ``rtol = atol = 0`` and ``max_mismatch_fraction = 0``.

A policy is read only from a regular file (opened without blocking, so a FIFO or a device is refused, never waited
on or read without end) of at most :data:`MAX_POLICY_BYTES`, holding at most :data:`MAX_RULES` rules whose globs are
at most :data:`MAX_GLOB_CHARS` long; each glob is compiled once, by its rule, never into ``fnmatch``'s process-wide
cache (which keeps every distinct glob a server ever matched). Whatever is wrong with a policy, even TOML nested too
deeply or a number of thousands of digits, is a one-line PolicyError.
"""

from __future__ import annotations

import fnmatch
import math
import os
import re
import stat
import sys
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from ..errors import ComparisonError, PolicyError, excerpt
from ..numeric.fit import fit_note
from ..numeric.tolerances import BLOCK_FLOATS, canonical_dtype, dtype_tolerances, significand_bits
from ..results import Result
from .references import lookup

if TYPE_CHECKING:
    from ..numeric.metrics import Comparison

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10
    import tomli as tomllib


_BLOCK_EXPONENT_LOSS_DB = 8.0

#: The most rules a policy holds. A policy is a few rules (a rule per operation family and dtype); one generated per
#: operation name and dtype (ttnn has a few hundred operations) stays under it. Every output is matched against the
#: rules in order, so this also bounds the work of judging one output.
MAX_RULES = 1000
#: The most characters of a rule's ``op`` glob: ttnn's longest operation names are under 100 characters, and a glob
#: of one with a few ``*`` and ``[...]`` stays well under this. It bounds the regular expression compiled from it.
MAX_GLOB_CHARS = 256
#: The most bytes of a policy file: MAX_RULES rules with every criterion and a comment line each take ~250 KB;
#: four times that leaves room for long comments and is parsed in well under a second.
MAX_POLICY_BYTES = 1 << 20
_CRITERIA = ("pcc", "rtol", "atol", "max_abs_error", "max_ulp", "max_mismatch_fraction", "sqnr_db", "tile_sqnr_db",
             "bitwise")
#: How many dB below one rounding's SQNR a tile's may fall by default, and the cap (module docstring).
_TILE_ALLOWANCE_DB = 11.0
_TILE_CAP_DB = 26.0


@dataclass(frozen=True)
class Criteria(Result):
    """What a verdict requires (each None: not a criterion; see the module docstring for each one's meaning)."""

    pcc: float | None = None
    rtol: float | None = None
    atol: float | None = None
    max_abs_error: float | None = None
    max_ulp: float | None = None
    max_mismatch_fraction: float | None = None
    sqnr_db: float | None = None
    tile_sqnr_db: float | None = None
    bitwise: bool | None = None

    @property
    def checks_allclose(self) -> bool:
        """Whether the element-wise ``|a - b| <= atol + rtol |b|`` test is a criterion here."""
        return self.rtol is not None or self.atol is not None or self.max_mismatch_fraction is not None

    @property
    def reads_ulps(self) -> bool:
        """Whether a verdict under these criteria reads the ULP distances: ``max_ulp`` bounds them, and a ``bitwise``
        failure's note says how far apart the values are in them."""
        return self.max_ulp is not None or bool(self.bitwise)


#: The built-in rule's criteria for an operation that only moves or keeps values (:func:`builtin_rule`).
_BITWISE = Criteria(bitwise=True)
#: The built-in value-keeping rule for float32 outputs: within one TF32 ulp (2^13 float32 ulps). Before tt-metal
#: #39401 (tilize) and #37333 (untilize) the unpacker read float32 tiles through srcA's 19-bit TF32 format in every
#: compute kernel that moves values (tilize, untilize, to_layout, transpose), dropping 13 mantissa bits: ttnn's own
#: reports of those versions hold float32 moves truncated so (tt-metal #23405, #33795).
_WITHIN_TF32 = Criteria(max_ulp=float(1 << 13))


@dataclass(frozen=True)
class Verdict(Result):
    """A comparison judged by a policy: whether it passed, the names of the criteria that failed (``"shape"`` and
    ``"nonfinite"`` besides the criteria's own names), the criteria applied, the worst tile the comparison saw
    (``(leading index, tile row, tile col)``, None when it judged no tiles) and one line per failed criterion, or per
    passed one with something to say (``"tile_sqnr_db: 32x32 tile (0, 3, 17): 2.1 dB < 26 dB"``)."""

    passed: bool
    failed: tuple[str, ...]
    criteria: Criteria
    worst_tile: tuple[int, ...] | None = None
    notes: tuple[str, ...] = ()


def dtype_defaults(dtype: str | None) -> tuple[Criteria, tuple[float, float]]:
    """The default criteria of a dtype and the (rtol, atol) its allclose counts use (see the module docstring)."""
    bits = significand_bits(dtype)
    if bits is None:
        return Criteria(rtol=0.0, atol=0.0, max_mismatch_fraction=0.0), (0.0, 0.0)
    name = canonical_dtype(dtype)
    rounding = 6.02 * bits + 4.77
    sqnr = min(rounding - (_BLOCK_EXPONENT_LOSS_DB if name in BLOCK_FLOATS else 0.0) - 30.0, 30.0)
    tile = min(rounding - _TILE_ALLOWANCE_DB, _TILE_CAP_DB)
    criteria = Criteria(pcc=0.97 if name == "BFLOAT4_B" else 0.99, sqnr_db=round(sqnr, 2) if sqnr > 0 else None,
                        tile_sqnr_db=round(tile, 2) if tile > 0 else None)
    return criteria, dtype_tolerances(dtype)


@dataclass(frozen=True)
class Rule:
    """One ``[[rules]]`` table: an operation-name glob, an optional dtype, the criteria, and where it was written."""

    op: str
    dtype: str | None
    criteria: Criteria
    source: str = ""
    #: ``op`` compiled, once for the rule's life (not into fnmatch's process-wide cache).
    _pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Compile the glob; PolicyError naming the rule's source when it is longer than :data:`MAX_GLOB_CHARS`."""
        if len(self.op) > MAX_GLOB_CHARS:
            raise PolicyError(f"{self.source or 'a rule'}: 'op' is a glob of {len(self.op):,} characters, more than "
                              f"{MAX_GLOB_CHARS}; match operation names with a shorter glob, like \"ttnn.mat*\"")
        object.__setattr__(self, "_pattern", re.compile(fnmatch.translate(self.op)))

    def matches(self, op: str | None, dtype: str) -> bool:
        """Whether this rule applies to an output of operation ``op`` (None: unknown, matched by ``*`` only)."""
        if self.dtype is not None and canonical_dtype(self.dtype) != canonical_dtype(dtype):
            return False
        return self._pattern.match(op) is not None if op is not None else self.op == "*"


class Policy:
    """Rules matched in order, then the dtype-aware defaults; see the module docstring."""

    def __init__(
        self, rules: tuple[Rule, ...] = (), *, source: str | None = None, overrides: Criteria | None = None
    ) -> None:
        self.rules = tuple(rules)
        self.source = source
        self.overrides = overrides

    def __repr__(self) -> str:
        extra = f", overridden by {self.overrides}" if self.overrides else ""
        return f"Policy({len(self.rules)} rules from {self.source or 'defaults'}{extra})"

    def with_overrides(self, *, rtol: float | None = None, atol: float | None = None, pcc: float | None = None) -> Policy:
        """This policy with the criteria given here replacing every rule's and default's (a command line's
        ``--rtol/--atol/--pcc``); None leaves a criterion as the policy has it."""
        given = {k: float(v) for k, v in (("rtol", rtol), ("atol", atol), ("pcc", pcc)) if v is not None}
        if not given:
            return self
        table = _rule({"op": "*", **given}, "the tolerances given")  # the same checks as a file's values
        merged = {**({} if self.overrides is None else self.overrides.to_dict()), **table.criteria.to_dict()}
        return Policy(self.rules, source=self.source, overrides=Criteria(**{k: v for k, v in merged.items() if v is not None}))

    @classmethod
    def default(cls) -> Policy:
        """The dtype-aware defaults alone, the same in the API, the CLI and the page."""
        return cls()

    @classmethod
    def load(cls, path: str | Path) -> Policy:
        """Read a TOML policy file (a regular file of at most :data:`MAX_POLICY_BYTES`); PolicyError naming the file
        (and the line) when it cannot be used."""
        return cls.parse(_read_policy_file(Path(path)), source=str(path))

    @classmethod
    def parse(cls, text: str, *, source: str = "policy") -> Policy:
        """A policy from its TOML text (at most :data:`MAX_POLICY_BYTES` characters); PolicyError naming ``source``
        (and the line) when it cannot be used."""
        if len(text) > MAX_POLICY_BYTES:
            raise PolicyError(f"{source}: the policy holds {len(text):,} characters, more than {MAX_POLICY_BYTES:,}; a "
                              f"policy holds at most {MAX_RULES:,} rules")
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise PolicyError(f"{source}: not valid TOML: {exc}") from None
        except RecursionError:
            raise PolicyError(f"{source}: arrays or tables nested too deeply; a policy holds [[rules]] tables of "
                              "plain values") from None
        except ValueError as exc:  # an integer of more digits than Python converts (sys.get_int_max_str_digits())
            raise PolicyError(f"{source}: a value cannot be read ({str(exc).split(':')[0]}); a criterion is a plain "
                              "number, like 0.99 or 1e-3") from None
        return cls.from_dict(data, source=source, lines=_rule_lines(text))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "policy", lines: list[int] | None = None) -> Policy:
        """A policy from parsed TOML (``{"rules": [{"op": ..., "dtype": ..., criteria...}, ...]}``)."""
        unknown = set(data) - {"rules"}
        if unknown:
            first = excerpt(sorted(unknown)[0])
            raise PolicyError(f"{source}: unknown top-level key {first}; a policy holds [[rules]] tables")
        raw = data.get("rules", [])
        if not isinstance(raw, list):
            raise PolicyError(f"{source}: 'rules' must be an array of tables ([[rules]])")
        if len(raw) > MAX_RULES:
            raise PolicyError(f"{source}: {len(raw):,} rules, more than {MAX_RULES:,}; match operations by glob "
                              "(\"ttnn.mat*\") and dtype rather than one rule each")
        rules = []
        for i, table in enumerate(raw):
            where = f"{source}, line {lines[i]}" if lines is not None and i < len(lines) else f"{source}, rule {i + 1}"
            rules.append(_rule(table, where))
        return cls(tuple(rules), source=source)

    def to_dict(self) -> dict[str, Any]:
        """The rules as JSON-ready data (the form ``from_dict`` reads)."""
        return {"rules": [
            {"op": r.op, **({"dtype": r.dtype} if r.dtype else {}),
             **{k: v for k, v in r.criteria.to_dict().items() if v is not None}}
            for r in self.rules
        ]}

    def rule_for(self, op: str | None, dtype: str) -> Rule | None:
        """The first rule matching ``op`` and ``dtype``, None when the defaults apply."""
        return next((r for r in self.rules if r.matches(op, dtype)), None)

    def criteria_for(self, op: str | None, dtype: str, *, accumulated: bool = False) -> Criteria:
        """The criteria of the first matching rule, else the built-in value-keeping rule's (:func:`builtin_rule`;
        not when ``accumulated``, see :meth:`judge`), else the dtype's defaults."""
        rule = self.rule_for(op, dtype) or (None if accumulated else builtin_rule(op, dtype))
        criteria = rule.criteria if rule is not None else dtype_defaults(dtype)[0]
        if self.overrides is None:
            return criteria
        return replace(criteria, **{k: v for k, v in self.overrides.to_dict().items() if v is not None})

    def tolerances(self, op: str | None, dtype: str) -> tuple[float, float]:
        """The (rtol, atol) a comparison is made at for this policy: the rule's, each missing one the dtype's (the
        built-in ``bitwise`` rule sets neither: whether it applies is known only once both sides' dtypes are, so the
        counts are the same whichever criteria judge)."""
        criteria = self.criteria_for(op, dtype)
        rtol, atol = dtype_defaults(dtype)[1]
        return (rtol if criteria.rtol is None else criteria.rtol, atol if criteria.atol is None else criteria.atol)

    def pcc_threshold(self, op: str | None, dtype: str) -> float:
        """The PCC threshold a comparison's own ``passed`` uses: the criteria's, else 0.99."""
        pcc = self.criteria_for(op, dtype).pcc
        return 0.99 if pcc is None else pcc

    def judge(self, comparison: "Comparison", *, op: str | None, dtype: str, accumulated: bool = False) -> Verdict:
        """Judge a comparison (made at :meth:`tolerances`, as every reportdb comparison under a policy is).

        ``accumulated``: the expected side carries error made before this operation (a global golden, another run):
        the built-in value-keeping rule does not apply, as it does not where the two sides' stored dtypes differ (a
        chain's float32 values against a bfloat16 output: see the module docstring).

        ComparisonError when an element-wise criterion applies but the comparison counted its mismatches at other
        tolerances: its count would not answer the policy's question.
        """
        same = comparison.dtype_a == comparison.dtype_b
        criteria = self.criteria_for(op, dtype, accumulated=accumulated or not same)
        if comparison.shape_mismatch:
            return Verdict(False, ("shape",), criteria)
        failed: list[str] = []
        if comparison.nonfinite_mismatch:
            failed.append("nonfinite")
        if criteria.checks_allclose:
            rtol, atol = self.tolerances(op, dtype)
            if not (math.isclose(comparison.rtol, rtol) and math.isclose(comparison.atol, atol, abs_tol=1e-300)):
                raise ComparisonError(
                    f"the comparison counted mismatches at rtol={comparison.rtol}, atol={comparison.atol}; the policy "
                    f"asks for rtol={rtol}, atol={atol}: compare at policy.tolerances(op, dtype)"
                )
        notes: list[str] = []
        failed.extend(_failed_criteria(comparison, criteria, notes))
        if "bitwise" in failed and self.rule_for(op, dtype) is None:  # the built-in rule's: say why it applies
            notes = [f"{n}; {op} only moves or keeps values, so the built-in rule holds it to the expected bits (a rule "
                     "in your policy can relax it)" if n.startswith("bitwise:") else n for n in notes]
        if "max_ulp" in failed and self.rule_for(op, dtype) is None and criteria == _WITHIN_TF32:
            notes.append(f"max_ulp: {comparison.ulp_max} float32 ulps > {_WITHIN_TF32.max_ulp:.0f}; {op} only moves or "
                         "keeps values, so the built-in rule holds a float32 output to the expected value within the "
                         "TF32 rounding of the device's unpacker (a rule in your policy can relax it)")
        worst = getattr(comparison, "worst_tile", None)
        return Verdict(not failed, tuple(failed), criteria, None if worst is None else tuple(worst), tuple(notes))


def _failed_criteria(m: "Comparison", c: Criteria, notes: list[str]) -> list[str]:
    """The names of the criteria ``m`` fails (shape and non-finite checks aside); appends to ``notes`` what the
    scale/offset and tile checks saw."""
    failed = []
    count = m.count or 0
    if c.pcc is not None:
        ok = m.pcc >= c.pcc if m.pcc is not None else not m.allclose_mismatches  # constant input: judged by values
        fitted = fit_note(m.notes)
        if not ok:
            failed.append("pcc")
        elif m.scale_or_offset_error:  # PCC is blind to b = k*a + c: the fitted line must be the identity too
            failed.append("scale_or_offset")
            notes.append(f"scale_or_offset: {fitted or f'b ~ {m.fit_scale}*a + {m.fit_offset}'}")
        elif fitted:  # a shrink math fidelity explains: passed, and said
            notes.append(f"scale_or_offset: {fitted}")
    if c.checks_allclose:
        allowed = (c.max_mismatch_fraction or 0.0) * count
        if (m.allclose_mismatches or 0) > allowed:
            failed.append("max_mismatch_fraction" if c.max_mismatch_fraction else "rtol/atol")
    if c.max_abs_error is not None and (m.max_abs_error or 0.0) > c.max_abs_error:
        failed.append("max_abs_error")
    if c.max_ulp is not None and (m.ulp_max or 0) > c.max_ulp:
        failed.append("max_ulp")
    if c.sqnr_db is not None and count:
        sqnr = getattr(m, "sqnr_db", None)
        if sqnr is None:  # undefined: no error at all (passes), or a zero golden with errors (fails)
            ok = not m.max_abs_error
        else:
            ok = sqnr >= c.sqnr_db
        if not ok:
            failed.append("sqnr_db")
    if c.tile_sqnr_db is not None and count and getattr(m, "tile_shape", None) is not None:
        failed.extend(_tile_failure(m, c.tile_sqnr_db, notes))
    if c.bitwise and not m.bitwise_equal:
        failed.append("bitwise")
        notes.append(f"bitwise: {_bit_difference(m)}")
    return failed


def _bit_difference(m: "Comparison") -> str:
    """What keeps ``m``'s two sides from holding the same bits, in a phrase: their dtypes, by how much their values
    differ, the NaN/Inf positions that differ, or (every value equal) a zero's sign or a NaN's payload."""
    if m.dtype_a != m.dtype_b:
        return f"the output is {m.dtype_a} and the expected side {m.dtype_b}: their bits cannot be equal"
    if m.bitwise_equal is None:
        return "the comparison did not record whether the bits are equal"
    differ = []
    if m.max_abs_error or m.allclose_mismatches:
        parts = [f"{m.ulp_max} ulp" if m.ulp_max is not None else "",
                 f"{m.allclose_mismatches:,} of {m.count or 0:,} outside rtol/atol" if m.allclose_mismatches else ""]
        detail = ", ".join(p for p in parts if p)
        differ.append(f"values differ: max |error| {m.max_abs_error or 0:g}" + (f" ({detail})" if detail else ""))
    if m.nan_mismatches or m.inf_mismatches:
        differ.append(f"{m.nan_mismatches or 0:,} NaN and {m.inf_mismatches or 0:,} Inf positions differ")
    if differ:
        return "; ".join(differ)
    return "every value equals the expected one but not every bit: a zero's sign (-0.0 against 0.0) or a NaN's payload"


def builtin_rule(op: str | None, dtype: str) -> Rule | None:
    """The built-in rule for an output of ``op`` in ``dtype``, matched after a policy's own rules: ``bitwise`` for an
    operation that only moves or keeps values (its reference declares ``keeps_values``: ``references.keeping_values()``
    lists them) in any dtype but a block float, whose repacking into new shared-exponent blocks changes values, and
    ``max_ulp`` within TF32 for a float32 one (module docstring); None for every other operation, which the dtype's
    defaults judge."""
    if op is None or canonical_dtype(dtype) in BLOCK_FLOATS:
        return None
    known = lookup(op)
    if known is None or not known.keeps_values:
        return None
    if canonical_dtype(dtype) == "FLOAT32":
        return Rule(op, None, _WITHIN_TF32, "built-in: a float32 operation that only moves or keeps values, through "
                    "the unpacker's TF32")
    return Rule(op, None, _BITWISE, "built-in: an operation that only moves or keeps values")


def _tile_failure(m: "Comparison", bound: float, notes: list[str]) -> list[str]:
    """``["tile_sqnr_db"]`` when the worst tile of ``m`` falls below ``bound`` dB (or has errors against an all-zero
    golden), with a note naming it; else nothing."""
    worst = None if m.worst_tile is None else tuple(m.worst_tile)
    if m.tile_sqnr_db is None:  # no tile with error, or (as the whole tensor's SQNR says) an all-zero golden
        if not m.max_abs_error or m.sqnr_db is not None:
            return []
        notes.append(f"tile_sqnr_db: tile {worst}: errors where the golden is zero everywhere")
        return ["tile_sqnr_db"]
    if m.tile_sqnr_db >= bound:
        return []
    shape = "x".join(map(str, m.tile_shape or ()))
    notes.append(f"tile_sqnr_db: {shape} tile {worst}: {m.tile_sqnr_db:.1f} dB < {bound:g} dB")
    return ["tile_sqnr_db"]


_RULE_HEADER = re.compile(r"^\s*\[\[\s*rules\s*\]\]")


def _rule_lines(text: str) -> list[int]:
    """The 1-based line of each ``[[rules]]`` header, in order, so errors can name the line of a bad rule."""
    return [i for i, line in enumerate(text.splitlines(), 1) if _RULE_HEADER.match(line)]


def _rule(table: Any, where: str) -> Rule:
    """One rule from its TOML table; PolicyError naming ``where`` when a key or value is wrong."""
    if not isinstance(table, dict):
        raise PolicyError(f"{where}: a rule must be a table")
    unknown = set(table) - {"op", "dtype", *_CRITERIA}
    if unknown:
        raise PolicyError(
            f"{where}: unknown key {excerpt(sorted(unknown)[0])}; a rule has op, dtype and criteria "
            f"{', '.join(_CRITERIA)}"
        )
    op = table.get("op", "*")
    dtype = table.get("dtype")
    if not isinstance(op, str) or not op:
        raise PolicyError(f"{where}: 'op' must be a non-empty glob string, like \"ttnn.matmul\" or \"*\"")
    if dtype is not None and not isinstance(dtype, str):
        raise PolicyError(f"{where}: 'dtype' must be a string, like \"BFLOAT16\"")
    values: dict[str, Any] = {}
    for key in _CRITERIA:
        if key not in table:
            continue
        if key == "bitwise":
            if not isinstance(table[key], bool):
                raise PolicyError(f"{where}: bitwise must be true or false, not {excerpt(table[key])}")
            values[key] = table[key]
            continue
        value = _number(table[key])
        if value is None:
            raise PolicyError(f"{where}: {key} must be a finite number, not {excerpt(table[key])}")
        if key == "pcc" and not -1.0 <= value <= 1.0:
            raise PolicyError(f"{where}: pcc must lie in [-1, 1], not {excerpt(table[key])}")
        if key not in ("pcc", "sqnr_db", "tile_sqnr_db") and value < 0:
            raise PolicyError(f"{where}: {key} must be >= 0, not {excerpt(table[key])}")
        if key == "max_mismatch_fraction" and value > 1:
            raise PolicyError(f"{where}: max_mismatch_fraction is a fraction in [0, 1], not {excerpt(table[key])}")
        values[key] = value
    if not any(v is not False for v in values.values()):  # bitwise = false alone asks nothing
        raise PolicyError(f"{where}: the rule has no criteria; give any of {', '.join(_CRITERIA)}")
    return Rule(op, dtype, Criteria(**values), where)


def _number(value: Any) -> float | None:
    """``value`` as a finite float, None when it is not a number (a bool, a string) or not finite; an integer too
    large for a float (TOML allows thousands of digits) is not one either."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _read_policy_file(path: Path) -> str:
    """The text of the policy file ``path``: opened without blocking and refused unless a regular file (a FIFO would
    block forever, a device such as /dev/zero never end), read up to :data:`MAX_POLICY_BYTES` and no further."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read the policy file ({exc.strerror or exc})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise PolicyError(f"{path}: cannot read the policy file: not a regular file; give a TOML file")
        data = b""
        while len(data) <= MAX_POLICY_BYTES:
            chunk = os.read(fd, MAX_POLICY_BYTES + 1 - len(data))
            if not chunk:
                break
            data += chunk
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read the policy file ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if len(data) > MAX_POLICY_BYTES:
        raise PolicyError(f"{path}: the policy file is larger than {MAX_POLICY_BYTES:,} bytes; a policy holds at most "
                          f"{MAX_RULES:,} rules")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyError(f"{path}: cannot read the policy file: not UTF-8 text ({exc.reason} at byte "
                          f"{exc.start})") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")  # universal newlines, as a text-mode read had them


def as_policy(policy: "Policy | str | Path | None") -> Policy:
    """A policy object from what the API accepts: a Policy, a TOML file's path, or None for the defaults."""
    if policy is None:
        return Policy.default()
    if isinstance(policy, Policy):
        return policy
    if isinstance(policy, (str, Path)):
        return Policy.load(policy)
    raise PolicyError(f"a policy is a reportdb Policy or a TOML file's path, not {type(policy).__name__}")


def judge_stored(
    policy: "Policy | str | Path | None", metrics: Mapping[str, Any], op: str | None, *, accumulated: bool = False
) -> Verdict | None:
    """Judge a stored metric vector (a ``Comparison.to_dict()``, as ``rdb_comparison`` and the team store keep) by its
    actual dtype (``accumulated``: a global record's, see :meth:`Policy.judge`); None when it cannot be (counted at
    other tolerances than the policy asks, or not a metric vector)."""
    from ..numeric.metrics import Comparison

    names = {f.name for f in fields(Comparison)}
    try:
        values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in metrics.items() if k in names}
        comparison = Comparison(**values)
        return as_policy(policy).judge(comparison, op=op, dtype=str(metrics.get("dtype_a", "")), accumulated=accumulated)
    except (TypeError, ComparisonError):
        return None


__all__ = ["Criteria", "Policy", "PolicyError", "Rule", "Verdict", "as_policy", "builtin_rule", "canonical_dtype",
           "dtype_defaults", "judge_stored"]
