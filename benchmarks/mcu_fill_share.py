"""What the int8 matrix core's im2col fill costs on Cortex-M: the bound on what keeping int8
activations NHWC inside the C (issue 28, "int8 NHWC inside") could save there.

    python benchmarks/mcu_fill_share.py [--targets cortex-m7] [--cascades] [MODEL ...]

The Cortex-M int8 conv (opfuse/backends/c/int8/conv_mcu.py) gathers each output pixel's window
from the NCHW activations into an int16 scratch column (``im2col.emit_fill``; a graph input's
NHWC rows are read in place), then runs the ISA's matrix tile over it. CMSIS-NN, in NHWC, fills
the same kind of scratch with contiguous channel runs. For each shared int8 model this builds the
generated C twice in one run, as ``benchmarks/mcu_int8.py`` runs it (QEMU ``-icount``): as it
is, and with every fill compiled away (written under ``if (0)``, so the tiles read a stale
scratch: the second build's outputs are wrong by construction, only its count is read). The
difference is the instructions the fill runs; an NHWC fill would still run some of them, so the
share is an upper bound of the saving. Per kernel family as in mcu_int8.py.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mcu_int8  # noqa: E402  (benchmarks/ is not a package)

from opfuse.backends.c.int8 import conv_mcu, im2col  # noqa: E402


@contextmanager
def fill_compiled_away():
    """``emit_fill`` writes its C under ``if (0)``: the same variables, no instructions."""
    real = im2col.emit_fill

    def dead(w, g, mode, **kw):  # noqa: ANN001, ANN003, ANN202
        w.open("if (0)")
        real(w, g, mode, **kw)
        w.close()

    conv_mcu.emit_fill = dead
    try:
        yield
    finally:
        conv_mcu.emit_fill = real


def main(models: list[str], targets: list[str], cascades: bool) -> None:
    print("instructions per inference (QEMU -icount): as generated, and with the im2col fill "
          f"compiled away ({'cascaded' if cascades else 'layer by layer'})")
    print(f"{'model':24} {'target':11} {'total':>11} {'fill':>10} {'share':>6}  "
          "fill per family (share of the family)")
    for target in targets:
        for name in models or mcu_int8.MODELS:
            if not (mcu_int8.SHARED / f"{name}.tflite").exists():
                print(f"  {name}: ../shared/models not present, skipped", file=sys.stderr)
                continue
            base = mcu_int8.run(name, target, cascades)
            with fill_compiled_away():
                bare = mcu_int8.run(name, target, cascades)
            fill = base["total"] - bare["total"]
            fams = ", ".join(
                f"{fam} {base['families'][fam] - bare['families'][fam]:,} "
                f"({(base['families'][fam] - bare['families'][fam]) / base['families'][fam]:.1%})"
                for fam in base["families"]
                if base["families"][fam] - bare["families"][fam] > 1000)
            exact = "" if base["exact"] else "  (the build as generated did NOT match!)"
            print(f"{name:24} {target:11} {base['total']:>11,} {fill:>10,} "
                  f"{fill / base['total']:>6.1%}  {fams}{exact}", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*")
    ap.add_argument("--targets", default="cortex-m7")
    ap.add_argument("--cascades", action="store_true")
    a = ap.parse_args()
    main(a.models, a.targets.split(","), a.cascades)
