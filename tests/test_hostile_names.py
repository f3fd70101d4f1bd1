"""Names a model's author chose cannot change what opfuse's C compiles to, nor what a terminal
shows (issue 18, parts 1 and 5; docs/architecture.md, "Names from a model").

Each hostile model has a benign twin: the same graph and weights with names ``n0, n1, ...``. The
C of both is compiled with ``-std=c99 -Wall -Wextra -Werror``; the object files must be byte for
byte the same (a name that added code, a macro or an include would differ) and define no global
symbol but the prefix's. The hostile C must still match its reference (onnxruntime, TFLite Micro),
and every table opfuse prints about it must hold no raw control character.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import unicodedata
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from opfuse.measure.run.host import compiler
from opfuse.safe_text import COMMENT_LIMIT, for_comment, for_terminal

HOSTILE = [
    "*/ int evil(void){return 1;} /*",
    "\n#include <stdlib.h>\nint evil_nl(void){return system(\"true\");}\n",
    "??/\nint evil_trigraph;",
    "x\u202ey",
    '"',
    "end\\",
    "%s%n",
    "L" * 10_000,
    "\x1b[2J",
    "\x1b]0;title\x07",
    "[red]red[/red] [bold]",
    "$(rm -rf ~)",
    "a*b",
    "a<U+002A>b",  # what "a*b" sanitizes to: the two must not collide
    "// c",
    "\u00e9\u4e2d",
    "x\nresult: match",
    "</script><script>window.evil=1</script>",
]
FORMULAS = ['=HYPERLINK("http://evil.example/")', "@SUM(1)", "+1", "-1"]

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("nm") is None,
                               reason="needs gcc and nm")


def _raw_control(text: str) -> list[str]:
    """Characters a terminal would act on: controls other than newline, and format (bidi) ones."""
    return [c for c in text if c != "\n" and unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")]


@pytest.mark.parametrize("name", HOSTILE + FORMULAS + [""])
def test_comment_text_is_inert(name: str) -> None:
    text = for_comment(name)
    assert all(" " <= c <= "~" for c in text), text
    for bad in ("*/", "/*", "//", "??", "\\", "`", "$", "<script"):
        assert bad not in text, (bad, text)
    assert len(text) <= COMMENT_LIMIT + len("...(10000 chars)")
    assert for_comment("a*b") != for_comment("a<U+002A>b")


@pytest.mark.parametrize("name", HOSTILE)
def test_terminal_text_is_one_inert_line(name: str) -> None:
    text = for_terminal(name)
    assert "\n" not in text and not _raw_control(text), repr(text)


# -- the models -------------------------------------------------------------------------------

def _onnx(names: list[str]) -> onnx.ModelProto:
    """x, y -> Conv -> Relu -> Conv -> Relu (out a) -> + y (out b): a chain cortex-m7 streams as a
    cascade, two inputs and two outputs, every name from ``names``."""
    rng = np.random.default_rng(0)
    x, y, w1, b1, w2, b2, v1, v2, v3, out_a, out_b = names[:11]
    inits = [numpy_helper.from_array((rng.standard_normal((8, 4, 3, 3)) * 0.2).astype("f4"), w1),
             numpy_helper.from_array(rng.standard_normal(8).astype("f4"), b1),
             numpy_helper.from_array((rng.standard_normal((8, 8, 3, 3)) * 0.2).astype("f4"), w2),
             numpy_helper.from_array(rng.standard_normal(8).astype("f4"), b2)]
    n = names[11:]
    nodes = [helper.make_node("Conv", [x, w1, b1], [v1], name=n[0], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", [v1], [v2], name=n[1]),
             helper.make_node("Conv", [v2, w2, b2], [v3], name=n[2], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", [v3], [out_a], name=n[3]),
             helper.make_node("Add", [out_a, y], [out_b], name=n[4])]
    info = helper.make_tensor_value_info
    f32 = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes, "g", [info(x, f32, [1, 4, 16, 16]), info(y, f32, [1, 8, 16, 16])],
        [info(out_a, f32, [1, 8, 16, 16]), info(out_b, f32, [1, 8, 16, 16])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _hostile_onnx_names() -> list[str]:
    values = [HOSTILE[i] for i in (0, 1, 2, 3, 13, 5, 6, 7, 8, 9, 16)]  # the last: output b
    nodes = [FORMULAS[0], HOSTILE[10], HOSTILE[12], HOSTILE[11], ""]
    return values + nodes


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """The hostile ONNX model at a hostile path (a folder named ``a*``: the path holds ``*/``),
    and its benign twin."""
    root = tmp_path_factory.mktemp("names")
    evil_dir = root / "a*" / "??\u202e$(id)\x1b[2J"
    evil_dir.mkdir(parents=True)
    (root / "good").mkdir()
    out = {"evil": evil_dir / "m.onnx", "good": root / "good" / "m.onnx"}
    onnx.save(_onnx(_hostile_onnx_names()), out["evil"])
    onnx.save(_onnx([f"n{i}" for i in range(16)]), out["good"])
    return out


def _objects(folder: Path) -> dict[str, bytes]:
    """Every host-compilable C file of ``folder`` compiled -Werror; object name -> bytes."""
    objects = {}
    for source in sorted(folder.glob("*.c")):
        if source.name == "startup.c":  # Cortex-M only (inline asm); it holds no model text
            continue
        obj = source.with_suffix(".o")
        proc = subprocess.run([compiler(), "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror",
                               "-c", source.name, "-o", obj.name], cwd=folder,
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-3000:]
        objects[obj.name] = obj.read_bytes()
    return objects


def _globals(folder: Path) -> set[str]:
    objs = sorted(str(p) for p in folder.glob("*.o"))
    out = subprocess.run(["nm", "-g", "--defined-only", *objs], capture_output=True, text=True,
                         check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if len(line.split()) == 3}


def _compile_c(run_cli, model: Path, folder: Path, *options: str) -> str:
    code, out, err = run_cli("compile", str(model), "--emit", "c", "--target", "cortex-m7",
                             "-o", str(folder), *options)
    assert code == 0, err
    return out + err


@needs_gcc
@pytest.mark.parametrize("options", [(), ("--prefix", "hn"), ("--no-cascades",),
                                     ("--prefix", "hn", "--no-cascades")])
def test_onnx_names_do_not_change_the_objects(run_cli, models, tmp_path, options) -> None:
    printed = _compile_c(run_cli, models["evil"], tmp_path / "evil", *options)
    assert ("C: 1 cascades streamed" in printed) == ("--no-cascades" not in options), printed
    _compile_c(run_cli, models["good"], tmp_path / "good", *options)
    assert not _raw_control(printed), printed
    evil, good = _objects(tmp_path / "evil"), _objects(tmp_path / "good")
    assert {"model.o", "weights.o", "main.o", "harness.o", "inputs.o"} <= set(evil)
    assert evil == good
    prefix = options[1] if options[:1] == ("--prefix",) else "opfuse"
    symbols = _globals(tmp_path / "evil")
    assert f"{prefix}_model_invoke" in symbols
    assert all(s.startswith(f"{prefix}_") or s == "main" for s in symbols), symbols
    for name in ("README.md", "Makefile", "model.h", "model.c"):
        text = (tmp_path / "evil" / name).read_text(encoding="utf-8")
        assert text.isascii() and "??" not in text and "$(id)" not in text, name


@needs_gcc
@pytest.mark.parametrize("cascades", [False, True])
def test_validate_hostile_onnx_c_matches_and_prints_safely(run_cli, models, cascades) -> None:
    code, out, err = run_cli("validate", str(models["evil"]), "--backend", "c", "--target",
                             "cortex-m7", *([] if cascades else ["--no-cascades"]))
    assert code == 0, err
    assert not _raw_control(out + err), out
    lines = out.splitlines()
    assert lines.count("result: match") == 1 and lines[-1] == "result: match"
    assert "x\\nresult: match" in out  # the output's name, escaped on its own row
    assert bool(re.search(r"generated float32 C \(\d+ cascades?\)", out)) == cascades


@pytest.mark.skipif(shutil.which("arm-none-eabi-gcc") is None
                    or shutil.which("qemu-system-arm") is None,
                    reason="needs arm-none-eabi-gcc and qemu-system-arm")
def test_hostile_onnx_on_the_cortex_m_board(run_cli, models) -> None:
    """The harness, inputs.c and startup.c built -Werror for the board with the hostile names and
    path, run under QEMU, beside onnxruntime."""
    code, out, err = run_cli("validate", str(models["evil"]), "--backend", "c", "--target",
                             "cortex-m7", "--emulate", "--timeout", "120")
    assert code == 0, err + out
    assert "on mps2-an500 (QEMU)" in out and not _raw_control(out + err), out
    assert out.splitlines().count("result: match") == 1


def test_tables_show_names_literally(run_cli, models) -> None:
    for command in (("fusion",), ("analyze",)):
        code, out, err = run_cli(*command, str(models["evil"]), "--target", "cortex-m7")
        assert code == 0, err
        assert not _raw_control(out + err), (command, out)
    code, out, _ = run_cli("fusion", str(models["evil"]), "--target", "cortex-m7")
    assert "[red]red[/red] [bold]" in out  # not read as rich markup
    assert "\\x1b]0;title\\x07" in out


@pytest.mark.parametrize("prefix", ["*/x", "a\nb", "a b", "$(id)", "k3", "\u00e9t\u00e9", "1a"])
def test_prefix_that_is_not_a_free_identifier_is_one_line(run_cli, tmp_path, prefix) -> None:
    from tests.helpers.cli import assert_clean_error

    code, _, err = run_cli("compile", "seed_block", "--emit", "c", "--prefix", prefix,
                           "-o", str(tmp_path / "c"))
    assert_clean_error(code, err, "--prefix")
    assert not _raw_control(err) and not (tmp_path / "c").exists()


# -- custom ops -------------------------------------------------------------------------------

def test_hostile_custom_op_is_opaque_and_refused_in_one_line(run_cli, tmp_path) -> None:
    info = helper.make_tensor_value_info
    node = helper.make_node("*/x\x1b[2J\n#define y", ["x"], ["y"], name="[red]c",
                            domain="evil.\u202e??/")
    graph = helper.make_graph([node, helper.make_node("Relu", ["y"], ["z"], name="r")], "g",
                              [info("x", TensorProto.FLOAT, [1, 4])],
                              [info("z", TensorProto.FLOAT, [1, 4])],
                              value_info=[info("y", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("evil.\u202e??/", 1)])
    path = tmp_path / "custom.onnx"
    onnx.save(model, path)
    code, out, err = run_cli("fusion", str(path))
    assert code == 0, err
    assert not _raw_control(out) and "opaque_op" in out
    code, out, err = run_cli("compile", str(path), "--emit", "c", "-o", str(tmp_path / "c"))
    assert code == 3 and out == "" and not (tmp_path / "c").exists()  # not supported
    assert len(err.strip().splitlines()) == 1 and not _raw_control(err), err
    assert "\\x1b[2J\\n#define y" in err


# -- TFLite -----------------------------------------------------------------------------------

def _tflite(names: list[str], custom: str | None = None) -> bytes:
    """int8 x -> CONV_2D+RELU -> CONV_2D (a cascade on cortex-m7) [-> CUSTOM], names from
    ``names`` (input, two weights, two biases, the middle tensor, the output, the custom's)."""
    pytest.importorskip("tflite")
    from tests.helpers.tflite_builder import RELU, SAME, TfliteBuilder

    rng = np.random.default_rng(1)
    b = TfliteBuilder()
    x = b.input(names[0], (1, 16, 16, 3), np.int8, scale=0.05, zero_point=-3)
    # a wide middle tensor, so streaming it in rows lowers the arena and the cascade pays
    mid = b.tensor(names[5], (1, 16, 16, 16), np.int8, scale=0.1, zero_point=-128)
    out = b.tensor(names[6], (1, 16, 16, 4), np.int8, scale=0.2, zero_point=3)
    for (src, dst, cin, cout, wname, bname, act) in (
            (x, mid, 3, 16, names[1], names[2], RELU), (mid, out, 16, 4, names[3], names[4], 0)):
        w = b.const(wname, rng.integers(-127, 128, (cout, 3, 3, cin)).astype(np.int8),
                    scale=np.full(cout, 0.01), zero_point=0, axis=0)
        bias = b.const(bname, rng.integers(-500, 500, cout).astype(np.int32),
                       scale=0.05 * np.full(cout, 0.01), axis=0)
        b.op("CONV_2D", [src, w, bias], [dst], "Conv2DOptions", Padding=SAME, StrideH=1,
             StrideW=1, DilationHFactor=1, DilationWFactor=1, FusedActivationFunction=act)
    if custom is None:
        b.output(out)
    else:
        z = b.tensor(names[7], (1, 16, 16, 4), np.int8, scale=0.2, zero_point=3)
        b.op("CUSTOM", [out], [z], custom_code=custom)
        b.output(z)
    return b.build()


TFLITE_NAMES = [HOSTILE[i] for i in (4, 1, 0, 5, 2, 3, 16, 8)]
BENIGN_TFLITE = [f"t{i}" for i in range(8)]


@needs_gcc
def test_tflite_names_do_not_change_the_objects(run_cli, tmp_path) -> None:
    (tmp_path / "e").mkdir()
    (tmp_path / "g").mkdir()
    evil, good = tmp_path / "e" / "m.tflite", tmp_path / "g" / "m.tflite"
    evil.write_bytes(_tflite(TFLITE_NAMES))
    good.write_bytes(_tflite(BENIGN_TFLITE))
    for options in (("--no-cascades",), ("--prefix", "tf")):
        tag = "-".join(options)
        printed = _compile_c(run_cli, evil, tmp_path / f"evil{tag}", *options)
        assert ("C: 1 cascades streamed" in printed) == ("--no-cascades" not in options), printed
        _compile_c(run_cli, good, tmp_path / f"good{tag}", *options)
        assert _objects(tmp_path / f"evil{tag}") == _objects(tmp_path / f"good{tag}"), options
        prefix = "tf" if "--prefix" in options else "opfuse"
        assert all(s.startswith(f"{prefix}_") or s == "main"
                   for s in _globals(tmp_path / f"evil{tag}"))
    pytest.importorskip("tflite_micro")
    for options in (("--no-cascades",), ()):
        code, out, err = run_cli("validate", str(evil), "--backend", "c", "--target",
                                 "cortex-m7", *options)
        assert code == 0, err + out
        assert "TFLite Micro" in out and out.splitlines()[-1] == "result: match"
        assert out.splitlines().count("result: match") == 1 and not _raw_control(out)


def test_tflite_custom_code_is_refused_in_one_line(run_cli, tmp_path) -> None:
    path = tmp_path / "c.tflite"
    path.write_bytes(_tflite(BENIGN_TFLITE, custom="EVIL*/\x1b]0;t\x07\u202e"))
    code, out, err = run_cli("fusion", str(path))
    assert code == 0, err
    assert not _raw_control(out), out
    code, out, err = run_cli("compile", str(path), "--emit", "c", "-o", str(tmp_path / "c"))
    assert code in (2, 3) and not (tmp_path / "c").exists()
    assert len(err.strip().splitlines()) == 1 and not _raw_control(err), err
    assert re.search(r"EVIL\*/\\x1b\]0;t\\x07\\u202e", err), err


# -- the HTML report's CSV --------------------------------------------------------------------

def test_report_csv_quotes_formulas_and_names_stay_in_their_script(models, tmp_path) -> None:
    import csv
    import io

    from opfuse.cli import main
    from tests.helpers.browser import chromium, open_offline

    page_path = tmp_path / "report.html"
    main(["analyze", str(models["evil"]), "--target", "cortex-m7", "--html", str(page_path)])
    with chromium() as browser:
        page, errors, blocked = open_offline(browser, page_path)
        text = page.evaluate("OF.kernelCsv()")
        injected = page.evaluate("window.evil")
        page.close()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert rows and injected is None and errors == [] and blocked == []
    assert rows[0]["nodes"].startswith("'" + FORMULAS[0])  # the first node: =HYPERLINK(...)
    for row in rows:
        for key, cell in row.items():
            if key not in ("flops", "macs", "bytes_read", "bytes_written", "latency_s",
                           "energy_j", "arithmetic_intensity", "efficiency", "index"):
                assert cell[:1] not in ("=", "+", "-", "@", "\t", "\r"), (key, cell)


# -- a target file's board: its name and flags reach the Makefile's recipes --------------------

@pytest.mark.parametrize("old, new", [('name = "mps2-an500"', 'name = "mps2-an500 $(id)"'),
                                      ('"-O2"', '"-O2; touch pwned"'),
                                      ('"-O2"', '"-O2\\n\\ttouch pwned"')])
def test_board_words_are_plain(tmp_path, old: str, new: str) -> None:
    from opfuse.errors import OpfuseError
    from opfuse.targets import parse_target

    text = (Path(__file__).parents[1] / "opfuse" / "targets" / "cortex-m7.toml").read_text()
    assert old in text
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace(old, new))
    with pytest.raises(OpfuseError, match=r"'board\.(name|cflags)'"):
        parse_target(bad)
