"""Host runner: build the generated C with the system compiler, load it with ctypes, run it, and
compare it against onnxruntime on the original model."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from opfuse.backends.c.flags import BASE, WARN
from opfuse.backends.c.manifest import Manifest, TensorRecord
from opfuse.errors import OpfuseError

LIB = "libopfuse_model.so"


def compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if not cc:
        raise OpfuseError("C backend: no C compiler found (install gcc or set CC)")
    return cc


# a C compiler run may take this long (OPFUSE_CC_TIMEOUT overrides, seconds): the largest shared
# model's weights.c builds in well under a minute; a generator bug once kept gcc -O3 busy for 15
CC_TIMEOUT_S = 1200.0


def run_tool(cmd: Sequence[str], cwd: Path) -> None:
    limit = float(os.environ.get("OPFUSE_CC_TIMEOUT") or CC_TIMEOUT_S)
    try:
        proc = subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        raise OpfuseError(f"C backend: compiling {cwd} took over {limit:g} s ({' '.join(cmd[:3])} "
                          "...); set OPFUSE_CC_TIMEOUT to allow more") from None
    if proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        head = "\n".join(msg[:20])
        raise OpfuseError(f"C backend: compiling {cwd} failed ({' '.join(cmd[:3])} ...):\n{head}")


def build_shared(
    outdir: Path | str, extra: Sequence[str] = ("-march=native",), name: str = LIB
) -> Path:
    """``gcc -O3 -std=c99 -Wall -Wextra -Werror -shared -fPIC`` (+ ``extra``) -> the library path.

    ``-march=native`` by default: onnxruntime dispatches to the host's vector units at run time,
    so the C is built for them too when the two are compared."""
    outdir = Path(outdir)
    cc = compiler()
    run_tool([cc, *BASE, *WARN, *extra, "-fPIC", "-c", "weights.c", "-o", f"{name}.w.o"], outdir)
    run_tool([cc, *BASE, *WARN, *extra, "-fPIC", "-c", "model.c", "-o", f"{name}.m.o"], outdir)
    run_tool([cc, "-shared", "-o", name, f"{name}.m.o", f"{name}.w.o", "-lm"], outdir)
    return outdir / name


def build_executable(
    outdir: Path | str, flags: Sequence[str] = (), name: str = "opfuse_demo"
) -> Path:
    """Build the harness (main.c) with ``flags`` (e.g. sanitizers) -> the executable's path."""
    outdir = Path(outdir)
    cc = compiler()
    run_tool([cc, "-std=c99", *WARN, *flags, "-o", name, "main.c", "model.c", "weights.c", "-lm"],
         outdir)
    return outdir / name


def manifest(outdir: Path) -> Manifest:
    """The folder's ``model.json``, read into its records."""
    try:
        return Manifest.from_json(json.loads((Path(outdir) / "model.json").read_text()))
    except FileNotFoundError:
        raise OpfuseError(f"{outdir}: no model.json (not an opfuse C output folder)") from None


_NUMPY = {"float": np.dtype("<f4"), "int8_t": np.dtype("i1"), "uint8_t": np.dtype("u1"),
          "int32_t": np.dtype("<i4"), "int64_t": np.dtype("<i8")}
_CTYPES = {"float": ctypes.c_float, "int8_t": ctypes.c_int8, "uint8_t": ctypes.c_uint8,
           "int32_t": ctypes.c_int32, "int64_t": ctypes.c_int64}


def io_dtype(item: TensorRecord) -> np.dtype:
    """The numpy dtype of one graph input or output of the manifest (float32 unless int8/uint8)."""
    return _NUMPY[item.ctype]


def _as_inputs(info: Manifest, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    arrays = []
    for item in info.inputs:
        if item.name not in inputs:
            raise OpfuseError(f"run_c: no value for input '{item.name}'")
        given = np.asarray(inputs[item.name])
        want = io_dtype(item)
        if want.kind != "f" and given.dtype != want:
            raise OpfuseError(
                f"run_c: input '{item.name}' is {given.dtype}, the model takes {want}"
            )
        arr = np.ascontiguousarray(given, dtype=want)
        if arr.size != item.size:
            raise OpfuseError(
                f"run_c: input '{item.name}' has {arr.size} values, the model takes "
                f"{item.size} ({item.shape})"
            )
        arrays.append(arr)
    return arrays


class CModel:
    """A built model loaded with ctypes, driven through the zero-copy API: the inputs are written
    into the arena (``opfuse_model_input``), ``opfuse_model_invoke`` runs the schedule, and the
    outputs are read from the arena (``opfuse_model_output``); ``outs`` are numpy views of it."""

    def __init__(self, lib_or_dir: Path | str) -> None:
        path = Path(lib_or_dir)
        if path.is_dir():
            lib = path / LIB
            if not lib.exists():
                lib = build_shared(path)
            folder = path
        else:
            lib, folder = path, path.parent
        self.info = manifest(folder)
        self.prefix = self.info.prefix  # compile --emit c --prefix
        self.lib = ctypes.CDLL(str(lib.resolve()))
        fp = ctypes.POINTER(ctypes.c_float)
        self.invoke = getattr(self.lib, f"{self.prefix}_model_invoke")
        self.invoke.restype = ctypes.c_int
        self.invoke.argtypes = []
        self.ins = [self._view("input", k, x) for k, x in enumerate(self.info.inputs)]
        self.outs = [self._view("output", k, x) for k, x in enumerate(self.info.outputs)]
        self._fp = fp

    def _view(self, kind: str, k: int, item: TensorRecord) -> np.ndarray:
        fn = getattr(self.lib, f"{self.prefix}_model_{kind}")
        fn.restype = ctypes.POINTER(_CTYPES[item.ctype])
        fn.argtypes = [ctypes.c_int]
        ptr = fn(k)
        if not ptr:
            raise OpfuseError(f"C backend: opfuse_model_{kind}({k}) returned NULL")
        size = max(int(item.size), 1)
        return np.ctypeslib.as_array(ptr, shape=(size,))[: item.size].reshape(item.shape)

    def bind(self, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """The checked input arrays, for ``write`` (kept alive by the caller)."""
        return _as_inputs(self.info, inputs)

    def write(self, bound: list[np.ndarray]) -> None:
        """Write the inputs into the arena (needed before every invoke: the planner may reuse
        an input's bytes in place)."""
        for view, arr in zip(self.ins, bound, strict=True):
            view.reshape(-1)[...] = arr.reshape(-1)

    def call(self, bound: list[np.ndarray]) -> None:
        self.write(bound)
        self.invoke()

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Outputs by name; a run whose invoke reports an error (``OPFUSE_ERROR_INDEX``, an
        index out of range) fails, as onnxruntime's does."""
        self.write(self.bind(inputs))
        status = self.invoke()
        if status != 0:
            raise OpfuseError(f"C backend: opfuse_model_invoke returned {status}: a run-time "
                              "index was out of range (OPFUSE_ERROR_INDEX)")
        return {o.name: arr.copy() for o, arr in zip(self.info.outputs, self.outs,
                                                        strict=True)}

    def run_copying(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The same through the copying wrapper ``opfuse_model_run_v``."""
        arrays = self.bind(inputs)
        fp = ctypes.c_void_p
        ins = (fp * max(len(arrays), 1))(*[a.ctypes.data for a in arrays])
        res = [np.zeros(o.shape, io_dtype(o)) for o in self.info.outputs]
        outs = (fp * max(len(res), 1))(*[a.ctypes.data for a in res])
        fn = getattr(self.lib, f"{self.prefix}_model_run_v")
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.POINTER(fp), ctypes.POINTER(fp)]
        fn(ins, outs)
        return {o.name: a for o, a in zip(self.info.outputs, res, strict=True)}


def run_c(outdir_or_lib: Path | str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run the generated model once (building it first if needed); outputs by name."""
    return CModel(outdir_or_lib).run(inputs)


def run_executable(exe: Path, info: Manifest, inputs: Mapping[str, np.ndarray],
                   prefix: Sequence[str] = (), env: Mapping[str, str] | None = None,
                   repeats: int = 1) -> tuple[dict[str, np.ndarray], subprocess.CompletedProcess]:
    """Run the harness (optionally under ``prefix``, e.g. valgrind) on files in a temp folder."""
    with tempfile.TemporaryDirectory(prefix="opfuse-run-") as tmp:
        tmpdir = Path(tmp)
        args = []
        for k, arr in enumerate(_as_inputs(info, inputs)):
            path = tmpdir / f"in{k}.bin"
            arr.tofile(path)
            args.append(str(path))
        outs = [tmpdir / f"out{k}.bin" for k in range(len(info.outputs))]
        cmd = [*prefix, str(exe), *args, *map(str, outs), str(repeats)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})
        if proc.returncode != 0:
            raise OpfuseError(
                f"C backend: {exe.name} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
            )
        result = {
            o.name: np.fromfile(path, dtype=io_dtype(o)).reshape(o.shape)
            for o, path in zip(info.outputs, outs, strict=True)
        }
    return result, proc
