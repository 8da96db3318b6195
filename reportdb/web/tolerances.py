"""The tolerances and the verdict of a comparison request, decided by the tolerance policy
(:class:`reportdb.analysis.policy.Policy`, the dtype-aware defaults unless the host gives another): the request's
``rtol``, ``atol`` and ``pcc`` where it gives them, else the policy's for the output's operation and dtype (the PCC
threshold: a matching rule's, else the comparison record's own ``desired_pcc`` where it has one, as ttnn judged it,
else the dtype's default: the order ``compare_golden`` follows)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Mapping

from ..analysis.policy import Criteria, Policy, Rule, Verdict
from ..numeric.metrics import Comparison
from . import params

@dataclass(frozen=True)
class Plan:
    """What a comparison request is made and judged at, and where the tolerances came from (``request`` or
    ``policy``)."""

    rtol: float
    atol: float
    pcc: float
    criteria: Criteria
    source: str

    def judge(self, comparison: Comparison, dtype: str) -> Verdict:
        """The verdict of ``comparison`` under these criteria."""
        return Policy((Rule("*", None, self.criteria),)).judge(comparison, op=None, dtype=dtype)

    def to_json(self) -> dict[str, object]:
        """The tolerances as the answers give them."""
        return {"rtol": self.rtol, "atol": self.atol, "pcc": self.pcc, "source": self.source}


def policy_dtype(ttnn_dtype: str | None, dtype: str) -> str:
    """The dtype a policy matches an output by: ttnn's (BFLOAT8_B is no numpy dtype), else the stored one."""
    return ttnn_dtype or dtype


def plan(args: Mapping[str, str], policy: Policy, op: str | None, dtype: str, desired_pcc: float | None) -> Plan:
    """The tolerances and criteria of a request on an output of operation ``op`` stored as ``dtype``."""
    rtol, atol = policy.tolerances(op, dtype)
    criteria = policy.criteria_for(op, dtype)
    given_rtol = params.optional_number(args, "rtol", low=0.0, high=1e300)
    given_atol = params.optional_number(args, "atol", low=0.0, high=1e300)
    given_pcc = params.optional_number(args, "pcc", low=-1.0, high=1.0)
    source = "policy" if given_rtol is None and given_atol is None and given_pcc is None else "request"
    rtol = rtol if given_rtol is None else given_rtol
    atol = atol if given_atol is None else given_atol
    rule = policy.rule_for(op, dtype)
    ruled = rule is not None and rule.criteria.pcc is not None  # a rule's PCC wins over the record's, as in the engine
    recorded = desired_pcc if desired_pcc is not None and -1 <= desired_pcc <= 1 and not ruled else None
    pcc = given_pcc if given_pcc is not None else recorded if recorded is not None else policy.pcc_threshold(op, dtype)
    criteria = dataclasses.replace(criteria, pcc=pcc)
    if criteria.checks_allclose:
        criteria = dataclasses.replace(criteria, rtol=rtol, atol=atol)
    return Plan(rtol, atol, pcc, criteria, source)
