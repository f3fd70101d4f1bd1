"""The ISA seam (docs/isa.md): the [isa] record of a target file, and a toy ISA built against the
interface as a new one would be: its target file, its kernels, this test. The toy's dot product
(two steps a pass under its own macro) reaches the int8 fully connected kernel's C, and the C is
bit-exact with TFLite Micro with the toy's branch compiled in and with it compiled out."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import opfuse.backends.c
from opfuse.backends.c import emit_c
from opfuse.backends.c.cgen import CWriter
from opfuse.backends.c.isa import IsaKernels, kernels, portable, register
from opfuse.errors import OpfuseError
from opfuse.measure.run.host import CModel, build_shared
from opfuse.targets import list_targets, load_target, target_file
from opfuse.targets.isa import PORTABLE, Isa, parse_isa
from tests.helpers import qgraphs as q
from tests.helpers import tflite_builder as tb
from tests.helpers.c_int8 import int8_inputs
from tests.helpers.qgraphs import QGraph, compile_ir


def test_built_in_targets_name_their_isa() -> None:
    assert load_target("cortex-m4").isa == load_target("cortex-m7").isa
    m7, host = load_target("cortex-m7").isa, load_target("x86-host").isa
    assert (m7.name, m7.int8_dot, m7.scalar) == ("armv7em", "smlad", True)
    assert (host.name, host.int8_dot, host.scalar) == ("x86", "vnni", False)
    for name in list_targets():  # every target's record has its kernels
        assert kernels(load_target(name).isa).name == load_target(name).isa.name


@pytest.mark.parametrize(("table", "message"), [
    ("[isa]\nlanes = 4\n", "unknown key 'isa.lanes'"),
    ("[isa]\nname = \"../x\"\n", "'isa.name' must be a lower-case identifier"),
    ("[isa]\nint8_dot = \"sdot\"\n", "'isa.int8_dot' must be one of widen, smlad, vnni"),
    ("[isa]\nvector_bits = 96\n", "'isa.vector_bits' must be 0 or a power of two"),
    ("[isa]\nmatmul_tile = [4]\n", "'isa.matmul_tile' must be [rows, columns]"),
    ("[isa]\nsoftmax_lanes = true\n", "'isa.softmax_lanes' must be an integer in [1, 256]"),
    ("[isa]\ndepthwise_rows = 1\n", "'isa.depthwise_rows' must be true or false"),
])
def test_a_bad_isa_table_is_one_line_naming_the_file(table: str, message: str,
                                                      tmp_path: Path) -> None:
    text = target_file("x86-host").read_text()
    path = tmp_path / "bad.toml"
    path.write_text(text[:text.index("\n[isa]")] + "\n" + table)
    with pytest.raises(OpfuseError, match=re.escape(message)) as err:
        load_target(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_no_isa_table_is_the_portable_record(tmp_path: Path) -> None:
    assert parse_isa(None, tmp_path / "t.toml") == PORTABLE
    assert load_target("cortex-a76").isa == PORTABLE


def test_an_isa_without_kernels_is_one_line() -> None:
    with pytest.raises(OpfuseError, match="no kernels for \\[isa\\] name 'nosuch'"):
        kernels(Isa(name="nosuch"))


TOY_PRELUDE = "#ifndef OPFUSE_NO_TOY\n#define OPFUSE_TOY_DOT 1\n#endif\n"


def toy_dot(w: CWriter, acc: str, a: str, a_ctype: str, za: int, b: str, k: int) -> None:
    """Two steps a pass under the toy's macro, the portable tail after it."""
    del a_ctype
    w("int kk = 0;")
    w("#ifdef OPFUSE_TOY_DOT")
    w(f"for (; kk + 2 <= {k}; kk += 2) {acc} += ((int32_t){a}[kk] - {za}) * {b}[kk]"
      f" + ((int32_t){a}[kk + 1] - {za}) * {b}[kk + 1];")
    w("#endif")
    portable.dot_tail(w, acc, a, za, b, k)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_a_toy_isa_builds_against_the_interface(tmp_path: Path) -> None:
    register(IsaKernels(name="toy", prelude=TOY_PRELUDE, dot=toy_dot,
                        saturate8=portable.saturate8))
    host = target_file("x86-host").read_text()
    toy = tmp_path / "toy.toml"
    toy.write_text(host[:host.index("\n[isa]")].replace('name = "x86-host"', 'name = "toy"')
                   + '\n[isa]\nname = "toy"\nint8_dot = "widen"\n')
    rng = np.random.default_rng(3)
    k, n, sx, zx, sy, zy = 37, 10, 0.03, 7, 0.11, -4
    wt = rng.integers(-127, 128, (n, k)).astype(np.int8)
    bias = rng.integers(-5000, 5000, n).astype(np.int32)
    m = tb.TfliteBuilder()
    x = q.tensor(m, (1, k), np.int8, sx, zx)
    wi = q.tensor(m, wt.shape, np.int8, np.full(1, 0.01, np.float32), 0, 0, wt)
    bi = q.tensor(m, (n,), np.int32, np.full(n, sx * 0.01), 0, 0, bias)
    y = q.tensor(m, (1, n), np.int8, sy, zy)
    q.add_op(m, "FULLY_CONNECTED", [x, wi, bi], [y], q.fc_options(None))
    m.inputs, m.outputs = [x], [y]
    g = QGraph()
    xi = g.input((1, k), sx, zx)
    out = g.op("Gemm", [xi, g.const(wt, np.float32(0.01), 0), g.const(bias, sx * 0.01, 0)],
               (1, n), sy, zy, transB=1)
    model = g.model(out)
    emit_c(compile_ir(model, str(toy)), tmp_path / "c")
    text = (tmp_path / "c" / "model.c").read_text()
    assert TOY_PRELUDE in text and "#ifdef OPFUSE_TOY_DOT" in text
    xs = int8_inputs((1, k), 5)
    want = [r[0] for r in q.run_tflm(m.build(), [[v] for v in xs])]
    for flags, lib in (((), "libtoy.so"), (("-DOPFUSE_NO_TOY",), "libportable.so")):
        c = CModel(build_shared(tmp_path / "c", extra=("-march=native", *flags), name=lib))
        got = [c.run({xi.name: v})[out.name] for v in xs]
        assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True)), flags


# What only an ISA module may write or know (docs/isa.md): the compiler's feature macros, the
# ISA modules' own switches, intrinsics headers, and the old per-CPU flags.
ISA_KNOWLEDGE = re.compile(
    r"__(x86_64|i386|ARM[A-Z_]*|AVX[A-Z0-9_]*|SSE[A-Z0-9_]*|FMA|F16C|aarch64|arm|thumb)__|__ARM_"
    r"|OPFUSE_(DSP|MVE|NO_DSP|NO_MVE)\b|\w+intrin\.h|arm_(acle|mve|neon)\.h|armv7em|on_board")
BACKEND = Path(opfuse.backends.c.__file__).parent


def offending_lines(root: Path) -> list[str]:
    """``file:line: text`` of every line of a module outside ``isa/`` that knows an ISA."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if "isa" in path.relative_to(root).parts[:-1]:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if ISA_KNOWLEDGE.search(line):
                found.append(f"{path.relative_to(root)}:{n}: {line.strip()}")
    return found


def test_no_module_outside_isa_knows_an_isa(tmp_path: Path) -> None:
    assert offending_lines(BACKEND) == []
    # the check sees a module that does (and not one inside isa/)
    (tmp_path / "isa").mkdir()
    (tmp_path / "isa" / "fast.py").write_text('GUARD = "#ifdef __AVX512F__"\n')
    (tmp_path / "kernel.py").write_text('w("#ifdef OPFUSE_DSP")\n')
    assert offending_lines(tmp_path) == ['kernel.py:1: w("#ifdef OPFUSE_DSP")']
