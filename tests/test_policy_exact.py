"""Operations that only move or keep values (clone, reshape, permute...) are held bit-exact by the policy's built-in
rule (``bitwise``): one element one ulp off, a zero whose sign flipped or a NaN with another payload fails, with a note
saying what differs and why the rule applies; a typecast and a block-float output stay under the float policy; a rule
in the user's policy relaxes it; accumulated comparisons (global goldens, another run, a chain's float32 values) are
judged by the dtype's defaults, as replay, compare --golden and compare_runs show on one report."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import reportdb
from reportdb.analysis import references
from reportdb.analysis.policy import Policy, PolicyError, builtin_rule, judge_stored
from reportdb.numeric import fidelity
from reportdb.numeric.metrics import compare
from test_repro_criteria import _both, folder_test  # noqa: F401 - the fixture of a repro folder's test

BF16 = ml_dtypes.bfloat16
POLICY = Policy.default()


def judge(op: str, device: np.ndarray, expected: np.ndarray, dtype: str = "BFLOAT16", policy: Policy = POLICY,
          accumulated: bool = False):  # type: ignore[no-untyped-def]
    """The verdict on ``device`` against ``expected``, compared at the policy's tolerances as every caller does."""
    rtol, atol = policy.tolerances(op, dtype)
    m = compare(device, expected, rtol=rtol, atol=atol, pcc=policy.pcc_threshold(op, dtype))
    return policy.judge(m, op=op, dtype=dtype, accumulated=accumulated)


def values(seed: int = 0) -> np.ndarray:
    """A bfloat16 output of 2,048 values, as a device holds it."""
    return np.random.default_rng(seed).standard_normal((32, 64)).astype(BF16)


def bits_changed(x: np.ndarray, index: int, new_bits: int | None = None, delta: int = 0) -> np.ndarray:
    """``x`` with element ``index``'s bit pattern replaced by ``new_bits``, or moved by ``delta`` (one ulp: 1)."""
    out = x.copy()
    raw = out.view(np.uint16).reshape(-1)
    raw[index] = new_bits if new_bits is not None else raw[index] + delta
    return out


@pytest.mark.parametrize("op", ["ttnn.clone", "ttnn.reshape", "ttnn.permute"])
def test_one_element_one_ulp_off_fails_a_value_keeping_operation(op: str) -> None:
    x = values()
    assert judge(op, x.copy(), x).passed
    verdict = judge(op, bits_changed(x, 700, delta=1), x)
    assert not verdict.passed and verdict.failed == ("bitwise",) and verdict.criteria.bitwise
    (note,) = verdict.notes
    assert note.startswith("bitwise: values differ: max |error| 0.00") and "(1 ulp)" in note
    assert f"{op} only moves or keeps values" in note and "a rule in your policy can relax it" in note
    assert judge("ttnn.relu", bits_changed(x, 700, delta=1), x).passed  # the float policy: the same error passes


def test_a_zero_whose_sign_flipped_and_a_nan_payload_fail() -> None:
    """Bit-exact means the bits: -0.0 for 0.0 (1/x gives -inf, signbit and a sort's total order see it) and a NaN's
    payload, which no value comparison sees, fail; values differ nowhere, and the note says so."""
    x = bits_changed(values(), 5, new_bits=0x0000)  # +0.0
    flipped = judge("ttnn.reshape", bits_changed(x, 5, new_bits=0x8000), x)  # -0.0
    assert not flipped.passed and flipped.failed == ("bitwise",)
    assert "a zero's sign (-0.0 against 0.0) or a NaN's payload" in flipped.notes[0]
    nan = bits_changed(x, 9, new_bits=0x7FC0)
    payload = judge("ttnn.permute", bits_changed(nan, 9, new_bits=0x7FC1), nan)
    assert not payload.passed and payload.failed == ("bitwise",) and "NaN's payload" in payload.notes[0]
    assert judge("ttnn.permute", nan.copy(), nan).passed  # the same NaN moved: exact
    lost = judge("ttnn.clone", bits_changed(nan, 9, new_bits=0x3F80), nan)  # the NaN became 1.0
    assert set(lost.failed) == {"nonfinite", "bitwise"} and "1 NaN and 0 Inf positions differ" in lost.notes[0]


def test_typecast_and_block_float_outputs_stay_under_the_float_policy() -> None:
    """A typecast changes values by design, and a BFLOAT8_B/4_B output re-encodes them into new shared-exponent
    blocks: device-like results (another rounding, the block float's packing) pass by the dtype's defaults."""
    wide = np.random.default_rng(1).standard_normal((64, 64)).astype(np.float32)
    truncated = (wide.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32).astype(BF16)  # not the reference's RNE
    rounded = wide.astype(BF16)
    assert not np.array_equal(truncated, rounded)
    cast = judge("ttnn.typecast", truncated, rounded)
    assert cast.passed and not cast.criteria.bitwise and cast.criteria.tile_sqnr_db is not None
    x = values(2).astype(np.float32)
    packed = fidelity.round_to(x, "BFLOAT8_B").astype(BF16)
    for op in ("ttnn.to_layout", "ttnn.tilize", "ttnn.reshape"):
        verdict = judge(op, packed, x.astype(BF16), dtype="BFLOAT8_B")
        assert verdict.passed and not verdict.criteria.bitwise, op
    assert builtin_rule("ttnn.to_layout", "BFLOAT4_B") is None and builtin_rule("ttnn.typecast", "BFLOAT16") is None


def test_a_users_rule_relaxes_or_asks_for_it() -> None:
    x = values()
    off = bits_changed(x, 700, delta=1)
    relaxed = Policy.parse('[[rules]]\nop = "ttnn.reshape"\nmax_ulp = 1\n')
    assert judge("ttnn.reshape", off, x, policy=relaxed).passed
    assert not judge("ttnn.permute", off, x, policy=relaxed).passed  # the built-in rule still holds the others
    strict = Policy.parse('[[rules]]\nop = "ttnn.add"\nbitwise = true\n')
    assert not judge("ttnn.add", off, x, policy=strict).passed and strict.to_dict()["rules"][0]["bitwise"] is True
    for text, said in (("bitwise = 1", "bitwise must be true or false"), ("bitwise = false", "has no criteria")):
        with pytest.raises(PolicyError, match=said):
            Policy.parse(f'[[rules]]\nop = "ttnn.reshape"\n{text}\n')


def test_accumulated_or_differently_typed_sides_are_judged_by_the_dtype() -> None:
    """A global golden or another run carries error made before the operation, which a copy carries on; a chain's
    float32 reference against a bfloat16 output cannot be bit-equal: the dtype's defaults judge both."""
    x = values()
    off = bits_changed(x, 700, delta=1)
    assert judge("ttnn.reshape", off, x, accumulated=True).passed
    assert POLICY.tolerances("ttnn.reshape", "BFLOAT16") == POLICY.tolerances("ttnn.add", "BFLOAT16")  # counts alike
    wider = judge("ttnn.reshape", off, x.astype(np.float32))
    assert wider.passed and not wider.criteria.bitwise


def test_the_references_declare_which_operations_keep_values() -> None:
    """One list: the references' ``keeps_values`` declarations, shown by ``replay --references``; every data movement
    and placement reference keeps values, no arithmetic one does."""
    keeping = set(references.keeping_values())
    assert {"ttnn.clone", "ttnn.reshape", "ttnn.permute", "ttnn.transpose", "ttnn.concat", "ttnn.slice", "ttnn.pad",
            "ttnn.to_layout", "ttnn.untilize", "ttnn.interleaved_to_sharded", "ttnn.reshard", "ttnn.all_gather",
            "ttnn.mesh_partition", "ttnn.embedding", "ttnn.update_cache", "ttnn.split"} <= keeping
    assert not keeping & {"ttnn.typecast", "ttnn.experimental.typecast", "ttnn.all_reduce", "ttnn.reduce_scatter",
                          "ttnn.add", "ttnn.matmul", "ttnn.tril"}
    families = {e["name"]: e["family"] for e in references.catalogue()}
    assert {families[n] for n in keeping} == {"data_movement", "shapes", "placement", "caches", "indexing",
                                              "collectives"}
    assert all(e["keeps_values"] == (e["name"] in keeping) for e in references.catalogue())
    assert all(families[n] != "data_movement" for n in set(families) - keeping)


def summary(tensor_id: int) -> str:
    """A tensor argument as ttnn 0.81's graph report records it."""
    return f"ttnn.Tensor(shape=Shape([32, 64]), dtype=DataType.BFLOAT16, layout=Layout.TILE, tensor_id={tensor_id})"


def _report(path: Path) -> Path:
    """A reshape exact (op 1), a permute one ulp off in one element (op 2), a clone that turned +0.0 into -0.0 (op 3),
    each with a local golden record (the op on the device's input) and a global one whose golden carries an earlier
    error of one ulp everywhere."""
    x = bits_changed(values(), 5, new_bits=0x0000)
    t = np.ascontiguousarray(x.T)
    upstream = bits_changed(x, 0, delta=0)
    upstream.view(np.uint16)[...] += 1  # the golden chain's value: one ulp from the device's input everywhere
    with reportdb.Writer(path) as w:
        w.put_tensor(1, x, ttnn_dtype="BFLOAT16", layout="TILE")
        for tensor_id, array in ((2, x.reshape(64, 32)), (3, bits_changed(t, 100, delta=1)),
                                 (4, bits_changed(x, 5, new_bits=0x8000))):
            w.put_tensor(tensor_id, array, ttnn_dtype="BFLOAT16", layout="TILE")
        for tensor_id, array in ((12, x.reshape(64, 32)), (13, t), (14, x)):
            w.put_tensor(tensor_id, array)
        moved = (upstream.reshape(64, 32), np.ascontiguousarray(upstream.T), upstream)
        for tensor_id, array in zip((22, 23, 24), moved):
            w.put_tensor(tensor_id, array)
        w.add_operation(1, "ttnn.reshape", inputs=[1], outputs=[2], arguments={"0": summary(1), "1": "Shape([64, 32])"})
        w.add_operation(2, "ttnn.permute", inputs=[1], outputs=[3], arguments={"0": summary(1), "1": "[1, 0]"})
        w.add_operation(3, "ttnn.clone", inputs=[1], outputs=[4], arguments={"0": summary(1)})
        record = lambda k, g: {"tensor_id": k, "golden_tensor_id": g, "desired_pcc": 0.99}
        w.add_rows("local_tensor_comparison_records", [record(k, 10 + k) for k in (2, 3, 4)])
        w.add_rows("global_tensor_comparison_records", [record(k, 20 + k) for k in (2, 3, 4)])
    return path


def test_replay_golden_and_runs_agree(tmp_path: Path) -> None:
    path = _report(tmp_path / "moves.sqlite")
    replayed = {r.operation_id: r for r in reportdb.replay(path).rows}
    assert [(i, replayed[i].passed, replayed[i].failed) for i in (1, 2, 3)] == [
        (1, True, ()), (2, False, ("bitwise",)), (3, False, ("bitwise",))]
    assert "values differ: max |error|" in replayed[2].detail and "zero's sign" in replayed[3].detail
    golden = reportdb.compare_golden(path, store=False)
    verdicts = {(r.kind, r.tensor_id): (r.verdict, r.failed) for r in golden.records}
    assert [verdicts[("local", k)] for k in (2, 3, 4)] == [("pass", ()), ("fail", ("bitwise",)), ("fail", ("bitwise",))]
    assert [verdicts[("global", k)][0] for k in (2, 3, 4)] == ["pass"] * 3  # the error came from before: defaults
    other = tmp_path / "other.sqlite"  # another run, whose input was one ulp off everywhere: each move carries it on
    with reportdb.open(path) as report:
        upstream = report.tensor(22).reshape(32, 64)
    with reportdb.Writer(other) as w:
        for tensor_id, array in ((1, upstream), (2, upstream.reshape(64, 32)), (3, np.ascontiguousarray(upstream.T)),
                                 (4, upstream)):
            w.put_tensor(tensor_id, array, ttnn_dtype="BFLOAT16", layout="TILE")
        for op_id, name in ((1, "ttnn.reshape"), (2, "ttnn.permute"), (3, "ttnn.clone")):
            w.add_operation(op_id, name, inputs=[1], outputs=[op_id + 1])
    runs = reportdb.compare_runs(path, other)
    assert [r.verdict for r in runs.rows] == ["within_tolerance"] * 3 and runs.first_divergence is None


def test_a_stored_metric_vector_is_judged_the_same_way() -> None:
    """The team store's history judges stored metrics (``judge_stored``): a local record's exactly, a global one's by
    the dtype's defaults, as compare --golden does."""
    x = values()
    rtol, atol = POLICY.tolerances("ttnn.reshape", "BFLOAT16")
    stored = compare(bits_changed(x, 700, delta=1), x, rtol=rtol, atol=atol).to_dict()
    local = judge_stored(None, stored, "ttnn.reshape")
    assert local is not None and local.failed == ("bitwise",)
    accumulated = judge_stored(None, stored, "ttnn.reshape", accumulated=True)
    assert accumulated is not None and accumulated.passed


def test_a_repro_folder_fails_the_same_bits(folder_test) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    """A repro folder's own copy of the criteria (numpy only) fails the bits the policy fails: one ulp, a zero's sign,
    a NaN's payload; the exact output passes both."""
    x = bits_changed(bits_changed(values(), 5, new_bits=0x0000), 9, new_bits=0x7FC0)
    wrong = (bits_changed(x, 700, delta=1), bits_changed(x, 5, new_bits=0x8000), bits_changed(x, 9, new_bits=0x7FC1))
    for device in wrong:
        assert _both(folder_test, device, x, "ttnn.reshape", "BFLOAT16") == (["bitwise"], ["bitwise"])
    assert _both(folder_test, x.copy(), x, "ttnn.reshape", "BFLOAT16") == ([], [])


def test_locate_judges_each_device_as_compare_does(tmp_path: Path) -> None:
    """locate's per-device verdicts: an all_gather output a bfloat16 ulp off on device 1 fails there against its local
    golden (the float32 value-keeping rule) and passes against a global one (the error came from before), as compare --golden judges them."""
    from reportdb.analysis.locate import locate
    from reportdb.spec import Distribution, Placement

    x = values().astype(np.float32)
    off = x.copy()
    off.view(np.uint32)[3, 40] += 1 << 16  # a bfloat16 ulp: beyond the TF32 truncation a float32 move may carry
    path = tmp_path / "mesh.sqlite"
    with reportdb.Writer(path) as w:
        w.put_tensor(1, x)
        w.add_operation(1, "ttnn.all_gather", inputs=[1], outputs=[2])
        w.put_tensor(10, x)
        w.put_tensor(20, x)
        record = {"tensor_id": 2, "golden_tensor_id": 10, "desired_pcc": 0.99}
        w.add_rows("local_tensor_comparison_records", [record])
        w.add_rows("global_tensor_comparison_records", [dict(record, golden_tensor_id=20)])
    with reportdb.open(path, "a") as report:
        report.put_tensor(2, shards=[((0, d), off[:, 32 * d : 32 * (d + 1)]) for d in range(2)], ttnn_dtype="FLOAT32",
                          distribution=Distribution((1, 2), (Placement("replicate"), Placement("shard", 1))))
    local = locate(path, 2, golden="local").devices
    assert [(d.coordinate, d.passed, d.failed) for d in local] == [((0, 0), True, ()), ((0, 1), False, ("max_ulp",))]
    assert [d.passed for d in locate(path, 2, golden="global").devices] == [True, True]


def test_a_chained_move_after_a_typecast_is_judged_by_the_dtype(tmp_path: Path) -> None:
    """A matmul slightly off (passes), a typecast to bfloat16, a reshape: chained, the reshape's expected side is the
    typecast's bfloat16 values of the chain's matmul, which the device's matmul error changed; the reshape itself
    moved its input exactly, so it passes in isolation and should pass chained, as the typecast does."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((32, 64)).astype(BF16)
    w = (rng.standard_normal((64, 64)) / 8).astype(BF16)
    y = ((x.astype(np.float32) @ w.astype(np.float32)) * np.float32(1.001)).astype(BF16)
    path = tmp_path / "chain.sqlite"
    with reportdb.Writer(path) as writer:
        for tensor_id, array in ((1, x), (2, w), (3, y), (4, y), (5, y.reshape(64, 32))):
            writer.put_tensor(tensor_id, array, ttnn_dtype="BFLOAT16", layout="TILE")
        writer.add_operation(1, "ttnn.matmul", inputs=[1, 2], outputs=[3], arguments={"0": summary(1), "1": summary(2)})
        writer.add_operation(2, "ttnn.typecast", inputs=[3], outputs=[4],
                             arguments={"0": summary(3), "1": "DataType.BFLOAT16"})
        writer.add_operation(3, "ttnn.reshape", inputs=[4], outputs=[5],
                             arguments={"0": summary(4), "1": "Shape([64, 32])"})
    assert [r.passed for r in reportdb.replay(path).rows] == [True, True, True]
    assert [r.passed for r in reportdb.replay(path, chain=True).rows] == [True, True, True]


def test_a_float32_move_may_carry_the_unpackers_tf32_truncation_and_no_more() -> None:
    """ttnn before tt-metal #39401/#37333 moved float32 tiles through srcA's TF32 (13 mantissa bits dropped): a
    float32 to_layout or transpose so truncated passes; one value off by a bfloat16 ulp, or its sign flipped, fails
    ``max_ulp`` with a note saying why the rule applies."""
    x = np.random.default_rng(3).standard_normal((32, 64)).astype(np.float32)
    truncated = (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
    for op in ("ttnn.to_layout", "ttnn.transpose", "ttnn.untilize"):
        assert judge(op, truncated, x, dtype="FLOAT32").passed, op
    off = x.copy()
    off.view(np.uint32)[3, 7] += np.uint32(1 << 16)  # a bfloat16 ulp
    verdict = judge("ttnn.to_layout", off, x, dtype="FLOAT32")
    assert not verdict.passed and verdict.failed == ("max_ulp",)
    assert "65536 float32 ulps > 8192" in verdict.notes[-1] and "TF32 rounding" in verdict.notes[-1]
    flipped = x.copy()
    flipped[5, 5] = -flipped[5, 5]
    assert "max_ulp" in judge("ttnn.clone", flipped, x, dtype="FLOAT32").failed
    assert judge("ttnn.relu", off, x, dtype="FLOAT32").passed  # the float policy passes the same error
