"""What the x86 int8 matrix core's input staging costs on the host: the bound on what keeping int8
activations NHWC inside the C (issue 28, "int8 NHWC inside") could save on x86.

    python benchmarks/x86_stage_share.py [--runs N] [--march ARCH] [--no-cascades] [MODEL ...]

The x86 int8 conv and Gemm (opfuse/backends/c/isa/x86/conv.py) first stage their input into
``xs``, ``[ICp/4][IHp][IWp][4]`` unsigned bytes (x86/stage.py: each pixel's channel quads
gathered from the NCHW planes, flipped to uint8 for the VNNI dot, padded), then run the register
tiles over it. Activations kept NHWC would make that a copy of contiguous channel runs (still
flipped and padded: the dot reads unsigned bytes, and the tiles read a padded window). This builds
each shared int8 model's x86-host C twice in one process: as generated, and with every staging
compiled away (written under ``if (0)``: the tiles read a stale ``xs``, so that build's outputs
are wrong by construction; only its time is read). Both are timed in alternating rounds (one
thread, thread CPU time, medians); 1 - away / as generated is the staging's share of the
inference, an upper bound of the saving. The C is cascaded where cascades apply, as
host_runtimes.py builds it (``--no-cascades``: layer by layer). Cortex-M's counterpart is benchmarks/mcu_fill_share.py.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from opfuse.backends.c import emit_c
from opfuse.backends.c.isa.x86 import conv as x86conv
from opfuse.measure.rounds import median_times, sig4
from opfuse.measure.run.host import CModel, build_shared
from opfuse.measure.validate.c_float import reference
from opfuse.pipeline import compile_model

SHARED = Path(__file__).resolve().parents[2] / "shared" / "models" / "tflite"
MODELS = ("kws_ref_model", "vww_96_int8", "person_detect", "mcunet_vww", "pretrainedResnet_quant",
          "ad01_int8")
STAGES = ("emit_stage_nchw", "emit_stage_sampled", "emit_stage_nhwc", "emit_stage_rows")
# the stale xs is read uninitialized: gcc's warning about it is expected in that build
QUIET = ("-Wno-error", "-Wno-uninitialized", "-Wno-maybe-uninitialized")


@contextmanager
def staging_compiled_away():
    """Every x86 staging writes its C under ``if (0)``: the same variables, no instructions."""
    real = {name: getattr(x86conv, name) for name in STAGES}

    def dead(fn):  # noqa: ANN001, ANN202
        def emit(w, *args, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
            w.open("if (0)")
            fn(w, *args, **kw)
            w.close()
        return emit

    for name, fn in real.items():
        setattr(x86conv, name, dead(fn))
    try:
        yield
    finally:
        for name, fn in real.items():
            setattr(x86conv, name, fn)


def _built(model: Path, out: Path, march: str, cascades: bool, away: bool) -> CModel:
    out.mkdir()
    if away:
        with staging_compiled_away():
            emit_c(compile_model(str(model), "x86-host"), out, cascades=cascades)
        build_shared(out, [f"-march={march}", *QUIET])
    else:
        emit_c(compile_model(str(model), "x86-host"), out, cascades=cascades)
        build_shared(out, [f"-march={march}"])
    return CModel(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="int8 .tflite paths (default: the shared ones)")
    parser.add_argument("--runs", type=int, default=21, help="timed rounds per build")
    parser.add_argument("--march", default="native", help="gcc -march= for both builds")
    parser.add_argument("--no-cascades", action="store_true", help="layer by layer")
    args = parser.parse_args()
    models = [Path(m) for m in args.models] or [SHARED / f"{m}.tflite" for m in MODELS]
    print(f"x86-host int8 C, -march={args.march}: as generated vs with the input staging compiled "
          f"away ({'layer by layer' if args.no_cascades else 'cascaded where they apply'}); "
          f"medians of {args.runs} alternating rounds, thread CPU ms per call")
    print(f"{'model':24} {'as generated':>13} {'away':>10} {'share':>7}")
    with tempfile.TemporaryDirectory(prefix="opfuse-stage-") as tmp_name:
        tmp = Path(tmp_name)
        for i, model in enumerate(models):
            if not model.exists():
                print(f"  {model.name}: not present (../shared/models), skipped", file=sys.stderr)
                continue
            feeds, _, _ = reference(str(model))
            runners = {}
            for key in ("gen", "away"):
                lib = _built(model, tmp / f"{i}{key}", args.march, not args.no_cascades,
                             key == "away")
                bound = lib.bind(feeds)
                runners[key] = (lambda c=lib, b=bound: c.write(b), lib.invoke)
            med, _ = median_times(runners, args.runs)
            gen, away = med["gen"][0], med["away"][0]
            print(f"{model.stem:24} {sig4(gen):>13} {sig4(away):>10} {1 - away / gen:>6.1%}",
                  flush=True)


if __name__ == "__main__":
    main()
