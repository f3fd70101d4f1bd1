"""opfuse's C against the runtimes a user would pick instead, on this host, one thread, one run.

    python benchmarks/host_runtimes.py [--runs N] [--batch N] [--march LIST] [--no-cascades]
        [MODEL ...]

Without MODEL: every ``.tflite`` of ``../shared/models/tflite`` and the shared float ONNX models
below (the corpus issue 28 measures). For each model the C that ``opfuse compile --emit c`` writes
(cascades where they apply; ``--no-cascades``: layer by layer) is built once per ``-march`` level
(default ``native,x86-64-v3,x86-64-v2``: the widest this CPU has, AVX2 without AVX-512, and the
portable fallback: the same generated project, the ISA's micro-kernels chosen by the compiler's
feature macros), and timed with onnxruntime ORT_ENABLE_ALL (one intra-op thread, on the model as
opfuse imports it: a ``.tflite`` runs as its ONNX proto) and, for a ``.tflite``, LiteRT's
interpreter with its default XNNPACK delegate and ``num_threads=1``, all in the same process,
round by round in alternating order, the first round dropped. Each round times a batch of
back-to-back calls of every runner, the same count for all (``--batch N``; by default chosen from
a short warm-up so that the fastest runner's round lasts ~200 us: a 2 us model timed one call per
sample is mostly the clock), and a sample is the round's time / the calls
(opfuse.measure.rounds). Every runner computes on the calling thread, so the figures are medians
of this thread's CPU time (``time.thread_time``: preemption on a loaded machine does not inflate
it). Printed per model: ``#calls`` (calls per round), the medians per call in ms to 4 significant
digits, and C / best of the runtimes for each ``-march``. The C is timed on
``opfuse_model_invoke()`` with the inputs written into the arena before each round, untimed (the
later calls of a round see the arena as the previous call left it; an int8 kernel's time does not
depend on the values); LiteRT's inputs are set once a round the same way.

The CPU and its vector flags are printed first (``lscpu``): the figures are this machine's.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort

from opfuse.backends.c import emit_c
from opfuse.measure.rounds import median_times, sig4
from opfuse.measure.run.host import CModel, build_shared
from opfuse.measure.sessions import one_thread_session
from opfuse.measure.validate.c_float import reference
from opfuse.pipeline import compile_model, read
from opfuse.safe_text import for_terminal

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "models"
FLOAT_ONNX = ("mobilenet_v2_128_0.5.onnx", "Ultraface_version-RFB-320.onnx", "light_resnet50.onnx")
FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni")


def cpu() -> str:
    """The model name and the vector flags the kernels care about, from lscpu."""
    text = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    name = re.search(r"Model name:\s*(.+)", text)
    found = re.search(r"Flags:\s*(.+)", text)
    flags = set(found.group(1).split()) if found else set()
    have = [f for f in FLAGS if f in flags]
    return f"{name.group(1).strip() if name else 'unknown CPU'}; flags: {' '.join(have) or 'none'}"


def default_models() -> list[Path]:
    models = sorted((SHARED / "tflite").glob("*.tflite"))
    models += [SHARED / "onnx" / n for n in FLOAT_ONNX if (SHARED / "onnx" / n).is_file()]
    return models


def _litert(path: Path, feeds: dict[str, np.ndarray]):  # noqa: ANN202
    """(write inputs, invoke) of LiteRT's interpreter (XNNPACK by default), one thread."""
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=str(path), num_threads=1)
    interp.allocate_tensors()
    details = interp.get_input_details()
    arrays = list(feeds.values())
    if len(arrays) != len(details):
        raise ValueError("inputs differ from the ONNX proto's")

    def write() -> None:
        for d, a in zip(details, arrays, strict=True):
            interp.set_tensor(d["index"], a.astype(d["dtype"]).reshape(d["shape"]))

    return write, interp.invoke


def runners(model: Path, tmp: Path, marches: list[str], cascades: bool):  # noqa: ANN201
    """name -> (before each run, the timed run)."""
    feeds, _, _ = reference(model)
    result = compile_model(str(model), "x86-host")
    emit_c(result, tmp / "c", cascades=cascades)
    out: dict[str, tuple[Callable[[], object], Callable[[], object]]] = {}
    for march in marches:
        lib = CModel(build_shared(tmp / "c", extra=(f"-march={march}",),
                                  name=f"libmodel_{march.replace('-', '_')}.so"))
        bound = lib.bind(feeds)
        out[f"C {march}"] = (lambda c=lib, b=bound: c.write(b), lib.invoke)
    # an ONNX file as it is; a .tflite as the proto opfuse imports (read)
    sess = one_thread_session(str(model) if model.suffix == ".onnx" else read(str(model)),
                              ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    out["ORT"] = (lambda: None, lambda: sess.run(None, feeds))
    if model.suffix == ".tflite":
        try:
            out["LiteRT"] = _litert(model, feeds)
        except (ValueError, RuntimeError) as exc:  # LiteRT refuses some files (person_detect)
            print(f"  LiteRT: {for_terminal(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)}")
    return out


def _short(march: str) -> str:
    return march.removeprefix("x86-64-")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--runs", type=int, default=31, help="timed rounds per runner")
    parser.add_argument("--batch", type=int, default=0, help="calls per round (default: "
                        "chosen so that the fastest runner's round lasts ~200 us)")
    parser.add_argument("--march", default="native,x86-64-v3,x86-64-v2")
    parser.add_argument("--no-cascades", action="store_true")
    args = parser.parse_args()
    marches = [m for m in args.march.split(",") if m]
    models = args.models or default_models()
    print(f"CPU: {cpu()}")
    head = f"{'model':<32}{'#calls':>7}" + "".join(f"{'C ' + m:>14}" for m in marches)
    head += f"{'ORT':>10}{'LiteRT':>10}" + "".join(f"{'C/best ' + _short(m):>14}" for m in marches)
    print(head)
    with tempfile.TemporaryDirectory(prefix="opfuse-runtimes-") as tmp_name:
        for i, model in enumerate(models):
            tmp = Path(tmp_name) / str(i)
            tmp.mkdir()
            med, calls = median_times(runners(model, tmp, marches, not args.no_cascades),
                                      args.runs, args.batch)
            t = {k: cpu_s for k, (cpu_s, _) in med.items()}
            best = min(t[k] for k in ("ORT", "LiteRT") if k in t)
            line = f"{for_terminal(model.name)[:31]:<32}{calls:>7}"
            line += "".join(f"{sig4(t[f'C {m}']):>14}" for m in marches)
            line += f"{sig4(t['ORT']):>10}"
            line += f"{sig4(t['LiteRT']):>10}" if "LiteRT" in t else f"{'-':>10}"
            line += "".join(f"{t[f'C {m}'] / best:>13.3f}x" for m in marches)
            print(line, flush=True)
    print(f"medians of {args.runs} rounds of this thread's CPU time per call (ms; a round: #calls "
          "back-to-back calls), one thread, alternating order; C/best: the C over the faster of "
          "ORT ORT_ENABLE_ALL and LiteRT (XNNPACK)")


if __name__ == "__main__":
    main()
