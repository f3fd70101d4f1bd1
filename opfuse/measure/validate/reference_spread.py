"""How far a float reference disagrees with itself: LiteRT's default kernels (its XNNPACK
delegate) beside its reference kernels (``OpResolverType.BUILTIN_REF``), on the inputs a
comparison used. Two correct float32 implementations of the same ops round differently, and a
deep network grows those differences layer by layer; on MediaPipe's pose_landmark_full
(seeds 0..19) its segmentation logits, max|reference| ~1640, are 2.7 apart between LiteRT's own
two kernel sets, while ``rtol`` 1e-4 allows 0.16. A candidate whose error is of the size of that
spread is rounding, not a wrong op: the tolerance is the question, and the output says so.

``spread_notes`` is called for the float outputs a comparison failed; an output whose error is
more than ``SPREAD_FACTOR`` times the spread is named as more than rounding, where an op may compute
something else. The factor is a judgment, not a bound: the spread of two kernel sets is itself a
sample (on pose_landmark_full, seeds 0..19, onnxruntime's own kernels are up to 4x LiteRT's spread
from LiteRT on two small outputs while every op's translation, run alone on LiteRT's inputs, is
within 7.6e-6 of it: benchmarks/tflite_float_spread.py), so that note says "may".
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from opfuse.measure.validate.ort import SPREAD_FACTOR, OutputCheck


def spread_notes(reference, feeds_list: Sequence[dict[str, np.ndarray]],
                 wanted: Sequence[dict[str, np.ndarray]], failed: Sequence[OutputCheck],
                 label: str) -> tuple[list[str], bool]:
    """(notes, every failed output within the spread) for the float outputs in ``failed``;
    ``wanted`` are the reference's outputs for ``feeds_list``. No notes when the reference has
    no second kernel set (onnxruntime, TFLite Micro) or it cannot run."""
    second = getattr(reference, "reference_kernels", lambda: None)()
    if second is None or not failed:
        return [], False
    spread = {c.name: 0.0 for c in failed}
    try:
        for feeds, want in zip(feeds_list, wanted, strict=True):
            other = second.run(feeds)
            for name in spread:
                diff = np.abs(np.asarray(want[name], np.float64) - np.asarray(other[name]))
                spread[name] = max(spread[name], float(diff.max(initial=0.0)))
    except Exception:  # noqa: BLE001 (a second opinion only: without it the table stands)
        return [], False
    notes, within = [], True
    for check in failed:
        s = spread[check.name]
        if check.max_abs_err <= SPREAD_FACTOR * s:
            notes.append(
                f"{check.name}: {reference.name} and {second.name} differ by up to {s:.3e} on "
                f"these inputs, {label} by {check.max_abs_err:.3e}: float rounding grown over the "
                "layers, not a wrong op; the tolerance is the question (--rtol; --per-kernel "
                "checks each C kernel on the reference's inputs)")
        else:
            within = False
            notes.append(
                f"{check.name}: {check.max_abs_err:.3e} is over {SPREAD_FACTOR:g}x the {s:.3e} "
                f"that {reference.name} and {second.name} differ by: more than their rounding, "
                "an op may compute something else (--per-kernel checks each C kernel)")
    return notes, within
