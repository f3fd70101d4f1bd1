"""The driver's contract: counts for every pass, a fixed point, valid names, linear time."""

from __future__ import annotations

from opfuse.passes import PASS_NAMES, canonicalize
from tests.helpers.passes import canonicalized, conv_bn_chain, import_model, op_counts


def test_counts_have_every_pass_and_a_second_run_fires_nothing() -> None:
    _, after, counts = canonicalized(conv_bn_chain(4))
    assert tuple(counts) == PASS_NAMES
    assert counts["fuse_bn_into_conv"] == 4
    assert op_counts(after) == {"Conv": 4, "Relu": 4}
    again = canonicalize(after)
    assert not any(again.values())


def test_node_names_unique_and_outputs_kept() -> None:
    _, after, _ = canonicalized(conv_bn_chain(3))
    names = [n.name for n in after.graph]
    assert all(names) and len(set(names)) == len(names)
    assert [v.name for v in after.graph.outputs] == ["y"]


def test_long_chain_folds_every_batchnorm() -> None:
    # 1.8k nodes. How the time grows with graph size is measured by benchmarks/compile_scaling.py,
    # not asserted here: timed assertions fail on a loaded machine and prove nothing on a quiet one.
    model = import_model(conv_bn_chain(600))
    counts = canonicalize(model)
    assert counts["fuse_bn_into_conv"] == 600
    assert not any(n.op_type == "BatchNormalization" for n in model.graph)
