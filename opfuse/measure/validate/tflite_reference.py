"""Reference runners for .tflite models: TFLite Micro's Python interpreter for int8 models (its
integer kernels are what the int8 C must match), LiteRT on one thread for float models and for
uint8 ones (TFLite Micro has no uint8 kernels).

Inputs and outputs are in the source model's layout and dtype (NHWC, int8), named as the graph
inputs and outputs of the imported ONNX proto, which keeps them (docs/architecture.md,
"Layout of TFLite models").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from opfuse.errors import OpfuseError
from opfuse.measure.quiet import native_stderr_silenced


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    scale: float | None  # one quantization step of the value (int8: its scale)
    zero_point: int = 0


def _has_uint8(model) -> bool:
    return any(t.data is None and t.dtype == np.uint8 and t.quant is not None
               for t in model.tensors)


def _probe_in_child(path: Path, name: str, inputs: tuple[TensorSpec, ...]) -> None:
    """Load and run ``path`` once in a forked child first: TFLite Micro's interpreter does not
    verify the flatbuffer and on some files dies of a segmentation fault, and when it refuses a
    file it prints its reasons on the process's own stdout; either must be one line here. The
    child's output is discarded; its first error line comes back through a pipe."""
    import os

    if not hasattr(os, "fork"):
        return
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: exit 0 when TFLite Micro loads and runs the file, 1 when it refuses
        code = 1
        try:
            os.close(read_fd)
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.dup2(null, 2)
            from tflite_micro.python.tflite_micro import runtime

            interp = runtime.Interpreter.from_file(str(path))
            for i, spec in enumerate(inputs):
                interp.set_input(np.zeros(spec.shape, spec.dtype), i)
            interp.invoke()
            code = 0
        except Exception as exc:
            lines = str(exc).strip().splitlines()
            os.write(write_fd, (lines[0] if lines else type(exc).__name__).encode()[:500])
        finally:
            os._exit(code)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        reason = pipe.read().decode("utf-8", "replace")
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        raise OpfuseError(f"{path}: {name} crashed on it (signal {os.WTERMSIG(status)})")
    if os.WEXITSTATUS(status) != 0:
        raise OpfuseError(f"{path}: {name} cannot run it: {reason or 'it refused the model'}")


class TfliteReference:
    """Runs a .tflite file; ``kind`` is 'tflite-micro' or 'litert'."""

    def __init__(self, path: str | Path, kind: str | None = None):
        from opfuse.frontends.tflite import read_model
        from opfuse.frontends.tflite.convert import is_quantized

        self.path = Path(path)
        self.model = read_model(self.path)
        self.kind = kind or ("tflite-micro" if is_quantized(self.model) and not _has_uint8(self.model)
                             else "litert")
        self.inputs = tuple(self._spec(i) for i in self.model.inputs)
        self.outputs = tuple(self._spec(i) for i in self.model.outputs)
        self._interp = None

    @property
    def name(self) -> str:
        return {"tflite-micro": "TFLite Micro", "litert-ref": "LiteRT's reference kernels"}.get(
            self.kind, "LiteRT (1 thread)")

    def reference_kernels(self) -> TfliteReference | None:
        """The same file on LiteRT's reference kernels (no XNNPACK): a second float opinion
        (measure/validate/reference_spread.py); None for TFLite Micro."""
        return TfliteReference(self.path, "litert-ref") if self.kind == "litert" else None

    def _spec(self, index: int) -> TensorSpec:
        t = self.model.tensors[index]
        scale, zero = None, 0
        if t.quant is not None and t.dtype.kind in "iu":
            scale, zero = float(t.quant.scale[0]), int(t.quant.zero_point[0])
        elif t.dtype.kind == "f":
            scale = self._dequantized_step(index)
        return TensorSpec(t.name, t.shape, t.dtype, scale, zero)

    def _dequantized_step(self, index: int) -> float | None:
        """A float output made by DEQUANTIZE still moves in steps of its source's scale."""
        for op in self.model.operators:
            if op.opcode == "DEQUANTIZE" and op.outputs and op.outputs[0] == index:
                q = self.model.tensors[op.inputs[0]].quant
                return float(q.scale[0]) if q is not None else None
        return None

    def _load(self):
        if self._interp is not None:
            return self._interp
        try:
            if self.kind == "tflite-micro":
                from tflite_micro.python.tflite_micro import runtime

                _probe_in_child(self.path, self.name, self.inputs)
                self._interp = runtime.Interpreter.from_file(str(self.path))
            else:
                from ai_edge_litert.interpreter import Interpreter, OpResolverType

                options = ({"experimental_op_resolver_type": OpResolverType.BUILTIN_REF}
                           if self.kind == "litert-ref" else {})
                with native_stderr_silenced():  # its XNNPACK delegate's INFO line
                    interp = Interpreter(model_path=str(self.path), num_threads=1, **options)
                    interp.allocate_tensors()
                self._interp = interp
        except ImportError as exc:
            raise OpfuseError(
                f"{self.path}: the reference runner needs {exc.name}: pip install 'opfuse[tflite]'"
            ) from None
        except OpfuseError:
            raise
        except Exception as exc:
            raise OpfuseError(f"{self.path}: {self.name} cannot load it: {exc}") from None
        return self._interp

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Outputs by name for inputs by name (each in the source's layout and dtype)."""
        interp = self._load()
        arrays = []
        for spec in self.inputs:
            if spec.name not in feeds:
                raise OpfuseError(f"{self.path}: no value for input '{spec.name}'")
            arrays.append(np.ascontiguousarray(feeds[spec.name], dtype=spec.dtype))
        try:
            if self.kind == "tflite-micro":
                for i, a in enumerate(arrays):
                    interp.set_input(a, i)
                interp.invoke()
                outs = [np.array(interp.get_output(i)) for i in range(len(self.outputs))]
                interp.reset()
            else:
                for d, a in zip(interp.get_input_details(), arrays, strict=True):
                    interp.set_tensor(d["index"], a)
                interp.invoke()
                outs = [np.array(interp.get_tensor(d["index"]))
                        for d in interp.get_output_details()]
                interp.reset_all_variables()  # an LSTM's state: each run starts from zero
        except Exception as exc:
            raise OpfuseError(f"{self.path}: {self.name} failed to run it: {exc}") from None
        return {spec.name: out for spec, out in zip(self.outputs, outs, strict=True)}

    def random_inputs(self, seed: int) -> dict[str, np.ndarray]:
        """Seeded inputs over the whole range of each input's type (float: standard normal)."""
        rng = np.random.default_rng(seed)
        feeds = {}
        for spec in self.inputs:
            if spec.dtype.kind in "iu":
                info = np.iinfo(spec.dtype)
                feeds[spec.name] = rng.integers(info.min, info.max, size=spec.shape,
                                                endpoint=True).astype(spec.dtype)
            else:
                feeds[spec.name] = rng.standard_normal(spec.shape).astype(spec.dtype)
        return feeds
