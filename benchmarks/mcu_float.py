"""Float models on the emulated Armv8-M and Armv7E-M boards: instructions per inference (QEMU
``-icount``, deterministic) of the generated C, layer by layer and with its cascades, each run
compared with onnxruntime (LiteRT for a .tflite) within validate's tolerance.

    python benchmarks/mcu_float.py [--builds NAME,...] [MODEL ...]

Per model, side by side: cortex-m55 with the mve module's MVE-F kernels, the same C on the same
board built without Helium (``-DOPFUSE_NO_MVE -mcpu=cortex-m55+nomve``: the scalar FPU path, the
kernels' ``#else``), cortex-m4, cortex-m7 and cortex-m33; ``--builds`` keeps the builds named
(their labels, comma-separated: ``--builds cortex-m4,cortex-m7,cortex-m33``). Defaults: the
shared mobilenet_v2_128_0.5.onnx and vww_96_float.tflite.
"""

from __future__ import annotations

import sys
from pathlib import Path

from opfuse.errors import OpfuseError
from opfuse.measure.run.qemu import emulate_c
from opfuse.pipeline import compile_model

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "models"
MODELS = (SHARED / "onnx" / "mobilenet_v2_128_0.5.onnx", SHARED / "tflite" / "vww_96_float.tflite")
NO_HELIUM = ("-DOPFUSE_NO_MVE", "-mcpu=cortex-m55+nomve")
BUILDS = (("cortex-m55 MVE-F", "cortex-m55", ()), ("cortex-m55 scalar FPU", "cortex-m55", NO_HELIUM),
          ("cortex-m4", "cortex-m4", ()), ("cortex-m7", "cortex-m7", ()),
          ("cortex-m33", "cortex-m33", ()))


def count(model: Path, target: str, extra: tuple[str, ...], cascades: bool) -> str:
    try:
        emu = emulate_c(compile_model(str(model), target), extra_cflags=extra, cascades=cascades,
                        timeout_s=1200)
    except OpfuseError as exc:
        return f"skipped: {str(exc).splitlines()[0][:60]}"
    return f"{emu.instructions:,}" + ("" if emu.report.ok else " MISMATCH")


def main(args: list[str]) -> None:
    builds = BUILDS
    if args[:1] == ["--builds"] and len(args) > 1:
        names = args[1].split(",")
        builds = tuple(b for b in BUILDS if b[0] in names)
        if len(builds) != len(names):
            sys.exit(f"--builds: known builds are {', '.join(b[0] for b in BUILDS)}")
        args = args[2:]
    print(f"{'model':<24} {'build':<22} {'layer by layer':>16} {'cascaded':>16}")
    for model in [Path(m) for m in args] or list(MODELS):
        for label, target, extra in builds:
            lbl, casc = (count(model, target, extra, c) for c in (False, True))
            print(f"{model.stem:<24} {label:<22} {lbl:>16} {casc:>16}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
