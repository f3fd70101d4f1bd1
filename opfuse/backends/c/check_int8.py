"""``validate --backend c`` of a quantized model: the generated int8 C against the source's own
runtime, element by element in quantization steps (docs/architecture.md, "int8 in the IR").

* ``.tflite``: TFLite Micro's Python interpreter (the ``tflite-micro`` package) on the same file,
  fed the same buffers (the C takes and returns the source's layout and dtype). Bit-exact is
  the rule: any differing element fails.
* quantized ONNX: onnxruntime on the original model; within one quantization step passes.

Inputs are seeded random: every value of an int8/uint8 input's range, uniformly; standard normal
for a float input. Each of ``runs`` inputs is compared.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from opfuse.backends.c.emit import emit_c
from opfuse.backends.c.runner import CModel, build_shared, io_dtype
from opfuse.errors import OpfuseError
from opfuse.pipeline import CompileResult

Runner = Callable[[list[np.ndarray]], list[np.ndarray]]


@dataclass(frozen=True)
class Int8Check:
    name: str
    shape: tuple[int, ...]
    elements: int  # compared, over all runs
    differing: int
    max_steps: int  # largest |C - reference| in quantization steps (output units)
    allowed: int

    @property
    def ok(self) -> bool:
        return self.max_steps <= self.allowed


@dataclass(frozen=True)
class Int8Report:
    outputs: tuple[Int8Check, ...]
    runs: int
    seed: int
    reference: str

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outputs)

    def format(self) -> str:
        lines = [f"generated int8 C vs {self.reference}: {self.runs} random inputs "
                 f"(seed {self.seed})"]
        for o in self.outputs:
            verdict = "ok" if o.ok else "FAIL"
            rule = "bit-exact" if o.allowed == 0 else f"within {o.allowed} step"
            lines.append(f"  {o.name} {list(o.shape)}: {o.differing} of {o.elements} elements "
                         f"differ, largest difference {o.max_steps} quantization steps "
                         f"({rule}: {verdict})")
        return "\n".join(lines)


def tflm_runner(path: str | Path) -> Runner:
    """TFLite Micro's interpreter on ``path``: a function from input arrays to output arrays."""
    try:
        from tflite_micro.python.tflite_micro import runtime
    except ImportError:
        raise OpfuseError("validate: the int8 reference needs the tflite-micro package "
                          "(pip install 'opfuse[tflite]')") from None
    data = Path(path).read_bytes()
    interp = runtime.Interpreter.from_bytes(data)
    count = _output_count(data)

    def run(inputs: list[np.ndarray]) -> list[np.ndarray]:
        for i, x in enumerate(inputs):
            interp.set_input(x, i)
        interp.invoke()
        return [np.array(interp.get_output(i)).copy() for i in range(count)]

    return run


def _output_count(data: bytes) -> int:
    import tflite

    return tflite.Model.GetRootAsModel(data, 0).Subgraphs(0).OutputsLength()


def ort_runner(source) -> Runner:
    """onnxruntime (all optimizations, one thread) on the original quantized ONNX model."""
    import onnxruntime as ort

    from opfuse.runtime import one_thread_session

    sess = one_thread_session(source, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    names = [i.name for i in sess.get_inputs()]

    def run(inputs: list[np.ndarray]) -> list[np.ndarray]:
        return list(sess.run(None, dict(zip(names, inputs, strict=True))))

    return run


def random_feeds(info: dict, runs: int, seed: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    feeds = []
    for _ in range(runs):
        one = []
        for item in info["inputs"]:
            dt = io_dtype(item)
            if dt.kind == "f":
                one.append(rng.standard_normal(item["shape"]).astype(np.float32))
            else:
                lim = np.iinfo(dt)
                one.append(rng.integers(lim.min, lim.max + 1, item["shape"]).astype(dt))
        feeds.append(one)
    return feeds


def _steps(item: dict, ref: np.ndarray, got: np.ndarray) -> np.ndarray:
    """|got - ref| in quantization steps (a float output: in units of its scale, if known)."""
    if io_dtype(item).kind != "f":
        return np.abs(ref.astype(np.int64) - got.astype(np.int64))
    scale = item.get("scale")
    d = np.abs(ref.astype(np.float64) - got.astype(np.float64))
    return np.ceil(d / scale - 1e-6).astype(np.int64) if scale else (d > 0).astype(np.int64)


def validate_c_int8(result: CompileResult, reference: Runner | None = None, *, runs: int = 20,
                    seed: int = 0, fuse: bool = True, outdir: Path | str | None = None,
                    allowed: int | None = None) -> Int8Report:
    """Emit and build the int8 C of ``result``, run it and its reference on ``runs`` inputs."""
    source = result.source
    is_tflite = str(source).lower().endswith(".tflite")
    if reference is None:
        reference = tflm_runner(source) if is_tflite else ort_runner(result.proto or source)
    label = "TFLite Micro" if is_tflite else "onnxruntime"
    if allowed is None:
        allowed = 0 if is_tflite else 1
    with tempfile.TemporaryDirectory(prefix="opfuse-c8-") as tmp:
        folder = Path(outdir) if outdir is not None else Path(tmp) / "model"
        emit_c(result, folder, fuse=fuse)
        build_shared(folder)
        model = CModel(folder)
        info = model.info
        totals = {o["name"]: [0, 0, 0] for o in info["outputs"]}
        for feed in random_feeds(info, runs, seed):
            ref = reference(feed)
            got = model.run({i["name"]: x for i, x in zip(info["inputs"], feed, strict=True)})
            if len(ref) != len(info["outputs"]):
                raise OpfuseError(f"validate: the reference has {len(ref)} outputs, the C "
                                  f"{len(info['outputs'])}")
            for item, r in zip(info["outputs"], ref, strict=True):
                g = got[item["name"]].reshape(np.shape(r))
                steps = _steps(item, np.asarray(r), g)
                t = totals[item["name"]]
                t[0] += steps.size
                t[1] += int(np.count_nonzero(steps))
                t[2] = max(t[2], int(steps.max(initial=0)))
    checks = tuple(Int8Check(o["name"], tuple(o["shape"]), *totals[o["name"]], allowed)
                   for o in info["outputs"])
    return Int8Report(checks, runs, seed, label)
