"""The int8 half of ``roofline_vs_measured.py``: the cost model's per-kernel time for opfuse's
generated int8 C (the calibrated ``host`` target) against each kernel timed in that C.

For each int8 ``.tflite`` model: compile for the ``host`` target, emit the fused C
(``compile --emit c``), time every kernel as it runs in the full invoke (``opfuse.cost.ctime``:
profile marks, warm, median of repeats), and cost the very partition the C follows
(``opfuse.backends.c.emit.c_partition``, the C's planned arena) with ``opfuse.cost.cost_model``
at the model's own precision (int8). A kernel the C emits no code for (a view the memory plan
placed on its input: Reshape, Squeeze...) measures ~0 and is listed but left out of the errors
(a relative error of a zero-time kernel means nothing), and so is any kernel measured under
``FLOOR_S`` (below the timer's resolution).
"""

from __future__ import annotations

import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

from opfuse.targets import Target

FLOOR_S = 0.2e-6
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "models" / "tflite"
MODELS = ("kws_ref_model", "vww_96_int8", "person_detect", "mcunet_vww",
          "pretrainedResnet_quant", "ad01_int8", "hello_world_int8")


@dataclass(frozen=True)
class Row:
    model: str
    kernel: str
    ops: str
    klass: str
    predicted_s: float
    measured_s: float

    @property
    def counted(self) -> bool:
        return self.measured_s >= FLOOR_S

    @property
    def error(self) -> float:
        return (self.predicted_s - self.measured_s) / self.measured_s


def model_rows(path: Path, target: Target, budget_s: float) -> list[Row]:
    """Predicted and measured time of every kernel of ``path``'s int8 C on ``target``."""
    from opfuse.api import compile as compile_model
    from opfuse.backends.c.emit import c_partition, emit_c
    from opfuse.backends.c.perkernel import _random_feeds
    from opfuse.cost import cost_model
    from opfuse.cost.ctime import time_kernels

    result = compile_model(path, target)
    model, part = c_partition(result, True)
    with tempfile.TemporaryDirectory(prefix="opfuse-int8fid-") as tmp:
        emitted = emit_c(result, Path(tmp))
        from opfuse.backends.c.runner import manifest

        info = manifest(Path(tmp))
        times = time_kernels(tmp, _random_feeds(info), budget_s=budget_s)
    entries = sorted(info["kernel_outputs"], key=lambda k: k["index"])
    cost = cost_model(model, part, target, arena_bytes=emitted.arena_bytes)
    rows = []
    for entry, kc, kernel, t in zip(entries, cost.kernels, part.kernels, times.seconds,
                                    strict=True):
        assert tuple(entry["nodes"]) == tuple(kernel.nodes), (entry["nodes"], kernel.nodes)
        rows.append(Row(path.stem, entry["function"], "+".join(kc.ops), kc.kernel_class,
                        kc.latency_s, t))
    return rows


def print_rows(rows: list[Row], top: int) -> None:
    counted = [r for r in rows if r.counted]
    print(f"\n{rows[0].model} (int8 C): {len(rows)} kernels, {len(counted)} timed above "
          f"{FLOOR_S * 1e6:.1f} us; top {top} by measured time")
    print(f"  {'kernel':<30}{'ops':<24}{'class':<12}{'pred us':>10}{'meas us':>10}{'err':>8}")
    for r in sorted(rows, key=lambda r: -r.measured_s)[:top]:
        err = f"{r.error:>+8.0%}" if r.counted else f"{'(view)':>8}"
        print(f"  {r.kernel[:29]:<30}{r.ops[:23]:<24}{r.klass:<12}"
              f"{r.predicted_s * 1e6:>10.1f}{r.measured_s * 1e6:>10.1f}{err}")
    pred = sum(r.predicted_s for r in counted)
    meas = sum(r.measured_s for r in counted)
    if counted:
        print(f"  total: predicted {pred * 1e3:.3f} ms, measured {meas * 1e3:.3f} ms "
              f"({(pred - meas) / meas:+.0%}); median |relative error| per kernel "
              f"{statistics.median(abs(r.error) for r in counted):.0%}")


def available(names: list[str]) -> list[Path]:
    paths = [SHARED / f"{n}.tflite" for n in names]
    return [p for p in paths if p.exists()]
