"""Every kernel of the generated C survives the Cortex-M cross-compiler as a function the invoke
calls (opfuse/backends/c/emit.py, OPFUSE_KERNEL).

arm-none-eabi-gcc 12.2 -O2 deleted the input Transpose of a one-layer depthwise model when the
kernels were only noinline: IPA-CP cloned it with the arena's constant addresses, ivopts wrote the
clone's load as MEM[0B + index], local-pure-const took that for a NULL dereference, declared the
clone const, and DCE removed its call, so the depthwise layer read a stale arena (max error 120 vs
TFLite Micro on the board). This checks the object file: no constprop clone of a kernel, and one
call to each kernel in opfuse_model_invoke. No QEMU and no TFLite Micro needed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from opfuse.backends.c.board import cflags
from opfuse.backends.c.emit import generate
from opfuse.output import write_tree
from opfuse.pipeline import compile_model
from tests.helpers import qgraphs as q
from tests.helpers import tflite_builder as tb

TOOLS = ("arm-none-eabi-gcc", "arm-none-eabi-objdump")


def one_depthwise(path: Path, c: int = 5, h: int = 19, w: int = 23) -> Path:
    """x (zero point -128) -> depthwise 3x3 stride 1 SAME relu6, int8: Transpose, the depthwise
    kernel and Transpose in the C."""
    rng = np.random.default_rng(3)
    m = tb.TfliteBuilder()
    x = q.tensor(m, (1, h, w, c), np.int8, 0.05, -128)
    ws = rng.uniform(0.002, 0.02, c).astype(np.float32)
    wt = rng.integers(-127, 128, (1, 3, 3, c)).astype(np.int8)
    wi = q.tensor(m, wt.shape, np.int8, ws, 0, 3, wt)
    bi = q.tensor(m, (c,), np.int32, 0.05 * ws, 0, 0,
                  rng.integers(-3000, 3000, c).astype(np.int32))
    y = q.tensor(m, (1, h, w, c), np.int8, 0.05, -128)
    q.add_op(m, "DEPTHWISE_CONV_2D", [x, wi, bi], [y],
             q.dw_options((1, 1), "SAME", 1, "relu6", (1, 1)))
    m.inputs, m.outputs = [x], [y]
    path.write_bytes(m.build())
    return path


def calls_by_function(disassembly: str) -> dict[str, list[str]]:
    """objdump -dr of an object: each function's call relocations' targets."""
    calls: dict[str, list[str]] = {}
    current = None
    for line in disassembly.splitlines():
        head = re.match(r"^[0-9a-f]+ <([^>]+)>:$", line)
        if head:
            current = head.group(1)
            calls[current] = []
        elif current is not None and ("R_ARM_THM_CALL" in line or "R_ARM_THM_JUMP24" in line):
            calls[current].append(line.split()[-1])
    return calls


@pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS),
                    reason="needs gcc-arm-none-eabi")
@pytest.mark.parametrize("target", ["cortex-m4", "cortex-m7"])
@pytest.mark.parametrize("dsp", [True, False])
def test_every_kernel_is_called_after_cross_compiling(target: str, dsp: bool,
                                                       tmp_path: Path) -> None:
    result = compile_model(str(one_depthwise(tmp_path / "dw.tflite")), target)
    files, _, _ = generate(result, True)
    folder = tmp_path / "c"
    write_tree(folder, {k: v for k, v in files.items() if not k.endswith("+")},
               manifest="model.json")
    kernels = re.findall(r"^static void (k\d+_\w+)\(", files["model.c"], re.M)
    assert len(kernels) == 3  # Transpose, the depthwise conv, Transpose
    extra = [] if dsp else ["-DOPFUSE_NO_DSP"]
    subprocess.run(["arm-none-eabi-gcc", *cflags(result.target.board), *extra, "-c", "model.c",
                    "-o", "model.o"], cwd=folder, check=True, capture_output=True, text=True)
    dis = subprocess.run(["arm-none-eabi-objdump", "-dr", "model.o"], cwd=folder, check=True,
                         capture_output=True, text=True).stdout
    calls = calls_by_function(dis)
    assert calls["opfuse_model_invoke"].count("opfuse_profile_mark") == len(kernels) + 1
    assert [c for c in calls["opfuse_model_invoke"] if c in kernels] == kernels, calls
    assert not [f for f in calls if ".constprop" in f or ".isra" in f], sorted(calls)
