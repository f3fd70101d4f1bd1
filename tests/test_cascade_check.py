"""No cascade is kept unless the arena plan with it peaks below the plan without
(opfuse/fusion/cascade_check.py): the cut's proxy is checked against the planner."""

from __future__ import annotations

import opfuse
from opfuse.fusion.cascade_check import keep_if_lower
from tests.helpers.shared import shared_models


def test_cascades_that_do_not_lower_the_planned_peak_are_split_with_their_reason() -> None:
    result = opfuse.compile("mobilenet_v2", target="cortex-m7")
    part = result.partition
    assert part.cascades  # the built-in MobileNetV2 streams 11 cascades on cortex-m7
    assert keep_if_lower(result.optimized, part, 100, 101) is part
    split = keep_if_lower(result.optimized, part, 1_317_888, 1_310_720)
    assert not split.cascades and split.kernels == part.without_cascades().kernels
    inside = sum(len(k.members) - 1 for k in part.cascades)
    said = [d for d in split.cascade_decisions if "1,317,888" in d.message]
    assert len(said) == inside and all(d.reason == "cascade_no_gain" and "1,310,720" in d.message
                                       for d in said)
    # a target whose bands are free keeps them at an equal peak, not above it
    assert keep_if_lower(result.optimized, part, 7, 7, same_arena=True) is part
    assert not keep_if_lower(result.optimized, part, 8, 7, same_arena=True).cascades


def test_every_kept_cascade_lowers_the_planned_peak() -> None:
    """What compile keeps, on the built-ins and the shared int8 models, on every Cortex-M."""
    models = ["mobilenet_v2", "seed_block", *(str(p) for p in shared_models("tflite")
                                              if p.name in ("vww_96_int8.tflite", "mcunet_vww.tflite"))]
    kept = 0
    for model in models:
        for target in ("cortex-m4", "cortex-m7", "cortex-m55"):
            result = opfuse.compile(model, target=target)
            if result.partition.cascades:
                kept += 1
                with_, without = (result.schedule(cascades=c).plan.peak_bytes for c in (True, False))
                assert with_ < without, (model, target, with_, without)
    assert kept
