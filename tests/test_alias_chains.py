"""In-place alias chains followed with path compression (opfuse/memory/inplace.py) group exactly the
tensors a plain walk of the chains groups, and a long in-place chain plans into one buffer that
verify_allocation accepts (docs/architecture.md, "Outputs and limits")."""

from __future__ import annotations

import random

import onnx
from onnx import TensorProto, helper

from opfuse.memory import plan_memory
from opfuse.memory.inplace import merged_buffers
from opfuse.memory.lifetimes import INTERMEDIATE, TensorLife, align
from opfuse.memory.verify import verify_allocation


def _walked_groups(names: list[str], aliases: dict[str, str]) -> set[frozenset[str]]:
    """The reference: follow every chain to its end, one step at a time."""
    groups: dict[str, set[str]] = {}
    for name in names:
        end = name
        while end in aliases:
            end = aliases[end]
        groups.setdefault(end, set()).add(name)
    return {frozenset(g) for g in groups.values()}


def _random_chains(seed: int, n: int) -> tuple[list[TensorLife], dict[str, str]]:
    """Tensors t0..tn-1; each output overwrites at most one older input, each input is taken
    once (as inplace_aliases allows), in a random order of declaration."""
    rng = random.Random(seed)
    tensors = [TensorLife(f"t{i}", rng.choice((64, 128)), i, i + 1, INTERMEDIATE) for i in range(n)]
    aliases: dict[str, str] = {}
    free = []
    for i in range(n):
        if free and rng.random() < 0.8:
            aliases[f"t{i}"] = free.pop(rng.randrange(len(free)))
        free.append(f"t{i}")
    keys = list(aliases)
    rng.shuffle(keys)
    return tensors, {k: aliases[k] for k in keys}


def test_compressed_chains_group_as_a_plain_walk_does() -> None:
    for seed in range(20):
        tensors, aliases = _random_chains(seed, 300)
        buffers = merged_buffers(tensors, aliases)
        assert {frozenset(b.members) for b in buffers} == _walked_groups(
            [t.name for t in tensors], aliases), seed
        life = {t.name: t for t in tensors}
        for b in buffers:
            assert b.size == max(life[m].aligned_bytes for m in b.members)
            assert b.first == min(life[m].first for m in b.members)


def test_a_long_in_place_chain_is_one_buffer(tmp_path) -> None:
    import opfuse

    n = 3000
    nodes, x = [], "x"
    for i in range(n):
        nodes.append(helper.make_node(("Relu", "Neg")[i % 2], [x], [f"t{i}"], name=f"n{i}"))
        x = f"t{i}"
    graph = helper.make_graph(nodes, "chain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 8, 8])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 8, 8, 8])])
    path = tmp_path / "chain.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), path)
    result = opfuse.compile(path, target="x86-host")
    plan = plan_memory(result.original, result.before, "greedy-inplace")
    verify_allocation(plan)
    # every op overwrites its input: the whole chain, graph input to output, shares one buffer
    assert len(plan.aliases) == n
    assert plan.peak_bytes == align(8 * 8 * 8 * 4)
