"""Memory planning: live ranges, planners, lower bound and the independent allocation check."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from opfuse.errors import OpfuseError
from opfuse.frontends import import_proto
from opfuse.fusion import partition, trivial_partition
from opfuse.memory import (
    PLANNERS,
    AllocationError,
    MemoryPlan,
    TensorLife,
    fits,
    live_ranges,
    lower_bound,
    plan_memory,
    plan_tensors,
    verify_allocation,
)
from opfuse.memory.placement import ORDERINGS, buffers_of, place_greedy
from opfuse.targets import load_target

SHARED_ONNX = Path(__file__).resolve().parents[1].parent / "shared" / "models" / "onnx"


def _model(nodes: list, inputs: list, outputs: list, weights: dict[str, tuple[int, ...]]):
    inits = [
        numpy_helper.from_array(np.ones(shape, np.float32), name) for name, shape in weights.items()
    ]
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return import_proto(proto, "<test>")


def _vi(name: str, *shape: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def _mlp(add_residual: bool = False):
    """x[1,16] -MatMul-> a[1,64] -Relu-> b (-Add(a, b)-> c) -MatMul-> y[1,16]."""
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["a"], name="mm1"),
        helper.make_node("Relu", ["a"], ["b"], name="relu"),
    ]
    last = "b"
    if add_residual:
        nodes.append(helper.make_node("Add", ["a", "b"], ["c"], name="add"))
        last = "c"
    nodes.append(helper.make_node("MatMul", [last, "w2"], ["y"], name="mm2"))
    return _model(nodes, [_vi("x", 1, 16)], [_vi("y", 1, 16)], {"w1": (16, 64), "w2": (64, 16)})


def _plan(tensors, offsets, peak, aliases=None) -> MemoryPlan:
    return MemoryPlan("hand", tuple(tensors), offsets, peak, 0, aliases or {})


# --- live ranges -------------------------------------------------------------------------------


def test_live_ranges_skip_weights_and_span_producer_to_last_consumer():
    model = _mlp()
    lives = {t.name: t for t in live_ranges(model, trivial_partition(model))}
    assert set(lives) == {"x", "a", "b", "y"}  # w1, w2 live in flash
    assert lives["x"] == TensorLife("x", 64, 0, 0, "input")
    assert lives["a"] == TensorLife("a", 256, 0, 1, "intermediate")
    assert lives["b"] == TensorLife("b", 256, 1, 2, "intermediate")
    assert lives["y"] == TensorLife("y", 64, 2, 2, "output")
    int8 = {t.name: t.size_bytes for t in live_ranges(model, trivial_partition(model), 1)}
    assert int8 == {"x": 16, "a": 64, "b": 64, "y": 16}


def test_graph_input_lives_until_its_last_reader():
    model = _mlp(add_residual=True)
    lives = {t.name: t for t in live_ranges(model, trivial_partition(model))}
    assert (lives["a"].first, lives["a"].last) == (0, 2)  # read again by Add at step 2


# --- planners ----------------------------------------------------------------------------------


def _hand_example() -> tuple[TensorLife, ...]:
    return (
        TensorLife("a", 64, 0, 1, "input"),
        TensorLife("b", 32, 1, 2, "intermediate"),
        TensorLife("c", 48, 2, 3, "intermediate"),
        TensorLife("d", 16, 0, 3, "input"),
        TensorLife("e", 80, 3, 3, "output"),
    )


def test_greedy_rule_places_a_worked_example_exactly():
    # Largest first: e@0; a@0 (not live with e); c: e holds [0,80) at step 3 -> 80;
    # b: a [0,64) and c [80,128) are live with it, the gap [64,80) is too small -> 128;
    # d: live with all of them -> 160. Arena 176. The busiest step (3) needs c+d+e = 144.
    tensors = _hand_example()
    buffers = buffers_of(tensors)
    offsets, arena = place_greedy(buffers, ORDERINGS["size"])
    by_name = {buffers[i].members[0]: off for i, off in offsets.items()}
    assert by_name == {"e": 0, "a": 0, "c": 80, "b": 128, "d": 160}
    assert arena == 176
    assert lower_bound(buffers) == 144


def test_greedy_keeps_the_best_ordering_and_naive_reuses_nothing():
    tensors = _hand_example()
    greedy = plan_tensors(tensors, "greedy")
    verify_allocation(greedy)
    assert greedy.lower_bound_bytes == 144
    assert greedy.peak_bytes == 144  # another visiting order meets the bound (e.g. c@0, e@48)
    naive = plan_tensors(tensors, "naive")
    verify_allocation(naive)
    assert naive.peak_bytes == 64 + 32 + 48 + 16 + 80
    assert naive.offsets == {"a": 0, "d": 64, "b": 80, "c": 112, "e": 160}


def test_greedy_inplace_writes_relu_over_its_dying_input():
    model = _mlp()
    part = trivial_partition(model)
    greedy = plan_memory(model, part, "greedy")
    inplace = plan_memory(model, part, "greedy-inplace")
    assert greedy.peak_bytes == 512 and greedy.aliases == {}  # a and b together at the Relu
    assert inplace.aliases == {"b": "a"}
    assert inplace.offsets["b"] == inplace.offsets["a"]
    assert inplace.peak_bytes == 320 == inplace.lower_bound_bytes  # x+a, then a/b, then b+y
    verify_allocation(inplace)


def test_inplace_never_overwrites_a_value_read_later():
    model = _mlp(add_residual=True)
    plan = plan_memory(model, trivial_partition(model), "greedy-inplace")
    # Relu may not overwrite a (Add reads it later); Add may overwrite a, which dies there.
    assert plan.aliases == {"c": "a"}
    verify_allocation(plan)


def test_graph_inputs_are_overwritten_only_when_allowed():
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("MatMul", ["r", "w"], ["y"], name="mm"),
    ]
    model = _model(nodes, [_vi("x", 1, 16)], [_vi("y", 1, 4)], {"w": (16, 4)})
    part = trivial_partition(model)
    assert plan_memory(model, part, "greedy-inplace").aliases == {"r": "x"}
    kept = plan_memory(model, part, "greedy-inplace", overwrite_inputs=False)
    assert kept.aliases == {}


def test_unknown_planner_names_the_planners():
    model = _mlp()
    with pytest.raises(OpfuseError, match="naive, greedy, greedy-inplace"):
        plan_memory(model, trivial_partition(model), "best-fit")


def test_fits():
    plan = plan_tensors(_hand_example(), "greedy")
    assert fits(plan, plan.peak_bytes) and plan.fits(10_000)
    assert not fits(plan, plan.peak_bytes - 1)


# --- verify_allocation -------------------------------------------------------------------------


P = TensorLife("p", 64, 0, 1, "intermediate")
Q = TensorLife("q", 64, 1, 2, "intermediate")


def test_overlapping_live_tensors_raise_and_name_both():
    with pytest.raises(AllocationError, match=r"\bp\b.*\bq\b.*step 1"):
        verify_allocation(_plan([P, Q], {"p": 0, "q": 32}, 96))


def test_allocation_error_is_an_assertion():
    with pytest.raises(AssertionError):
        verify_allocation(_plan([P, Q], {"p": 0, "q": 0}, 64))


def test_a_sound_plan_passes():
    verify_allocation(_plan([P, Q], {"p": 0, "q": 64}, 128))
    r = TensorLife("r", 64, 2, 3, "intermediate")  # not live with p: may reuse its bytes
    verify_allocation(_plan([P, Q, r], {"p": 0, "q": 64, "r": 0}, 128))


def test_overlap_hidden_behind_a_larger_tensor_is_found():
    big = TensorLife("big", 256, 0, 0, "intermediate")
    small = TensorLife("small", 16, 0, 0, "intermediate")
    late = TensorLife("late", 16, 0, 0, "intermediate")
    # big [0,256) and small [16,32) overlap; late [32,48) also lies inside big
    with pytest.raises(AllocationError, match="big"):
        verify_allocation(_plan([big, small, late], {"big": 0, "small": 16, "late": 32}, 256))


def test_unaligned_offsets_and_arena_overflow_raise():
    with pytest.raises(AllocationError, match="aligned"):
        verify_allocation(_plan([P, Q], {"p": 0, "q": 72}, 144))
    with pytest.raises(AllocationError, match="exceeds"):
        verify_allocation(_plan([P, Q], {"p": 0, "q": 64}, 100))


def test_declared_inplace_alias_may_share_bytes_but_only_at_the_handoff():
    a = TensorLife("a", 64, 0, 1, "intermediate")
    b = TensorLife("b", 64, 1, 2, "intermediate")
    verify_allocation(_plan([a, b], {"a": 0, "b": 0}, 64, {"b": "a"}))
    with pytest.raises(AllocationError):
        verify_allocation(_plan([a, b], {"a": 0, "b": 0}, 64))  # undeclared
    still_read = TensorLife("a", 64, 0, 2, "intermediate")
    with pytest.raises(AllocationError, match="still read"):
        verify_allocation(_plan([still_read, b], {"a": 0, "b": 0}, 64, {"b": "a"}))
    with pytest.raises(AllocationError, match="offset"):
        verify_allocation(_plan([a, b], {"a": 0, "b": 16}, 80, {"b": "a"}))


# --- every built-in and shared model, before and after fusion ----------------------------------


def _sources() -> list[str]:
    from opfuse import models

    return list(models.MODELS) + [str(p) for p in sorted(SHARED_ONNX.glob("*.onnx"))]


@pytest.mark.parametrize("source", _sources(), ids=lambda s: Path(s).stem)
def test_planners_on_real_models(source: str):
    from opfuse.pipeline import compile_model

    result = compile_model(source, "x86-host")
    schedules = [(result.original, result.before), (result.optimized, result.partition)]
    for target in ("cortex-m7", "mobile-gpu"):  # fewer / other fused kernels: more in-place
        schedules.append((result.optimized, partition(result.optimized, load_target(target))))
    for model, part in schedules:
        for bpe in (None, 1):
            plans = {p: plan_memory(model, part, p, bpe) for p in PLANNERS}
            for plan in plans.values():
                verify_allocation(plan)
                assert plan.lower_bound_bytes <= plan.peak_bytes
            assert plans["greedy"].peak_bytes <= plans["naive"].peak_bytes
            assert plans["greedy-inplace"].peak_bytes <= plans["greedy"].peak_bytes
            assert plans["greedy-inplace"].lower_bound_bytes <= plans["greedy"].lower_bound_bytes
    assert len(result.partition.kernels) <= len(result.before.kernels)
