"""How much of what real models call the replay references cover, from the table of ttnn operations tt-metal's models
call (tests/data/ttnn-model-ops.csv: how many of 100 model units call each operation), so the figure cannot fall
silently: model-weighted coverage is the sum of ``models`` over the operations with a reference over the sum over all
of them (2,062)."""

from __future__ import annotations

import csv

from conftest import FIXTURES
from reportdb.analysis import references

#: The model-weighted coverage reached (rounded down to 0.1%): raise it as references are added, never lower it.
FLOOR = 0.966
#: The operations used by 3 or more models without a reference, each with its reason; one that gets a reference fails
#: the test until it is struck from here.
STILL_MISSING: frozenset[str] = frozenset()


def model_ops() -> dict[str, int]:
    """Each operation of the table with how many models call it."""
    with open(FIXTURES / "ttnn-model-ops.csv", newline="") as f:
        return {row["op"]: int(row["models"]) for row in csv.DictReader(f)}


def test_the_table_is_the_one_the_figures_are_defined_on() -> None:
    ops = model_ops()
    assert len(ops) == 244 and sum(ops.values()) == 2062


def test_model_weighted_coverage_does_not_fall() -> None:
    ops, covered = model_ops(), set(references.names())
    coverage = sum(n for op, n in ops.items() if op in covered) / sum(ops.values())
    assert coverage >= FLOOR, f"model-weighted coverage {coverage:.1%} fell below {FLOOR:.1%}"


def test_operations_of_three_or_more_models_have_references() -> None:
    covered = set(references.names())
    missing = {op for op, n in model_ops().items() if n >= 3 and op not in covered}
    assert missing <= STILL_MISSING, f"used by 3 or more models, without a reference: {sorted(missing - STILL_MISSING)}"
    assert not STILL_MISSING - missing, f"these have references now: strike them: {sorted(STILL_MISSING - missing)}"
