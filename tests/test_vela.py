"""``analyze --compare vela``: the parser of Vela's CSVs (on stored output, no Vela run), the
comparison's rows and totals, the ethos-u55 cycle model against Vela's per-layer figures, the
missing-Vela message, and one end-to-end run when Vela is installed."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from opfuse.cost.vela import parse_per_layer, parse_summary, read_output_dir
from opfuse.errors import OpfuseError
from tests.helpers.cli import assert_clean_error as _assert_clean_error
from tests.helpers.shared import SHARED_ABSENT, SHARED_MODELS

DATA = Path(__file__).parent / "data" / "vela"
SUMMARY = DATA / "kws_ref_model_summary_Ethos_U55_High_End_Embedded.csv"
LAYERS = DATA / "kws_ref_model_per-layer.csv"
KWS = SHARED_MODELS / "tflite" / "kws_ref_model.tflite"


def _raw(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_summary_parser_reads_vela_figures():
    s = parse_summary(SUMMARY)
    raw = _raw(SUMMARY)[0]
    assert s.network == "kws_ref_model"
    assert (s.accelerator, s.system_config, s.memory_mode) == (
        "Ethos_U55_128", "Ethos_U55_High_End_Embedded", "Shared_Sram")
    assert s.cycles == int(raw["cycles_total"])
    # Vela's own identity: inference time = total cycles / clock
    assert s.inference_s == pytest.approx(s.cycles / s.clock_hz, rel=1e-3)
    assert s.sram_bytes == round(float(raw["sram_memory_used"]) * 1024)
    assert s.passes == int(raw["passes_after_fusing"])


def test_per_layer_parser_groups_rows_by_tflite_operator():
    layers = parse_per_layer(LAYERS)
    raw = _raw(LAYERS)
    # every CSV row lands in exactly one layer, cycles and MACs are kept
    assert sum(len(la.npu_ops) for la in layers) == len(raw)
    assert sum(la.cycles for la in layers) == sum(int(r["Op Cycles"]) for r in raw)
    assert sum(la.macs for la in layers) == sum(int(r["MAC Count"]) for r in raw)
    # Vela's per-layer cycles add up to its network total
    assert sum(la.cycles for la in layers) == parse_summary(SUMMARY).cycles
    conv = layers[0]
    assert conv.operator == "Conv2D" and conv.npu_ops == ("Conv2D", "Relu")
    assert conv.passes == 1 and conv.fused == 1
    assert conv.staging_bytes == max(int(r["Staging Usage"]) for r in raw[:2])


def test_read_output_dir_finds_both_files():
    run = read_output_dir(DATA, "kws_ref_model")
    assert run.summary.network == "kws_ref_model" and run.layers


def test_parser_rejects_a_csv_that_is_not_vela(tmp_path):
    bad = tmp_path / "x_summary_y.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(OpfuseError, match="not a Vela CSV"):
        parse_summary(bad)
    with pytest.raises(OpfuseError, match="not a Vela CSV"):
        parse_per_layer(bad)
    with pytest.raises(OpfuseError, match="no summary"):
        read_output_dir(tmp_path, "other")


@pytest.fixture(scope="module")
def kws_comparison():
    if not KWS.exists():
        pytest.skip(SHARED_ABSENT)
    from opfuse import api
    from opfuse.measure.vela_run import compare_vela

    result = api.compile(str(KWS), target="ethos-u55")
    analysis = api.analyze(result, cascades=False)  # the rows are per layer
    return analysis, compare_vela(result, analysis, read_output_dir(DATA, "kws_ref_model"))


def test_comparison_totals_are_the_sums_of_its_rows(kws_comparison):
    analysis, c = kws_comparison
    assert c.opfuse_s == pytest.approx(sum(r.opfuse_s for r in c.rows))
    assert c.vela_s == pytest.approx(sum(r.vela_s for r in c.rows))
    assert c.opfuse_npu_s == pytest.approx(sum(r.opfuse_s for r in c.rows if not r.vela_cpu))
    # nothing dropped on either side: every kernel and every Vela cycle is in one row
    assert c.opfuse_s == pytest.approx(analysis.after.cost.latency_s)
    assert c.vela_s == pytest.approx(c.vela_summary_s, rel=1e-3)
    kernels = [k for r in c.rows for k in r.kernels]
    assert sorted(kernels) == sorted(k.name for k in analysis.kernels)
    data = c.to_json()
    assert data["total"]["opfuse_arena_bytes"] == analysis.after.plan.peak_bytes
    assert data["total"]["vela_sram_bytes"] == parse_summary(SUMMARY).sram_bytes


def test_layers_match_by_tflite_operator(kws_comparison):
    _, c = kws_comparison
    by_op = {r.tflite_ops: r for r in c.rows}
    # kws_ref_model: op 1 is a depthwise conv, op 12 the softmax Vela lowers into many passes
    assert by_op[(1,)].vela_layers == ("DepthwiseConv2D",)
    assert any("depthwise" in k or "conv" in k for k in by_op[(1,)].kernels)
    assert by_op[(12,)].vela_layers == ("Softmax",) and by_op[(12,)].vela_passes > 10


def test_ethos_u55_cycle_model_tracks_vela_per_layer(kws_comparison):
    """The calibrated profile against Vela's own per-layer estimate (the stored CSV): the
    convolutions, which carry most of the time, within 20% each, the total within 15%."""
    _, c = kws_comparison
    convs = [r for r in c.rows if set(r.vela_layers) <= {"Conv2D", "DepthwiseConv2D"} and r.vela_s]
    assert len(convs) == 9
    for r in convs:
        assert abs(r.error) <= 0.20, (r.tflite_ops, r.error)
    assert abs(c.error) <= 0.15


def test_cli_says_how_to_install_vela_when_missing(run_cli, monkeypatch, tmp_path):
    import opfuse.measure.vela_run as vela_run

    monkeypatch.setattr(vela_run, "vela_available", lambda: False)
    out = tmp_path / "a.json"
    code, _, err = run_cli("analyze", str(KWS), "--target", "ethos-u55", "--compare", "vela",
                           "--json", str(out))
    _assert_clean_error(code, err, "pip install 'opfuse[vela]'")
    assert not out.exists()


def test_end_to_end_runs_vela(run_cli, tmp_path):
    from opfuse.measure.vela_run import vela_available

    if not vela_available():
        pytest.skip("ethos-u-vela not installed (pip install 'opfuse[vela]')")
    if not KWS.exists():
        pytest.skip(SHARED_ABSENT)
    page = tmp_path / "r.html"
    code, out, err = run_cli("analyze", str(KWS), "--target", "ethos-u55", "--compare", "vela",
                             "--json", "-", "--html", str(page))
    assert code == 0, err
    data = json.loads(out)["compare"]
    assert data["vela_config"]["accelerator"] == "ethos-u55-128"
    assert data["total"]["vela_summary_s"] > 0 and data["rows"]
    assert abs(data["total"]["error"]) <= 0.30
    html = page.read_text()
    assert 'id="vela-section"' in html and '"compare"' in html


def test_compare_needs_a_target_that_names_vela(run_cli, monkeypatch, tmp_path):
    import opfuse.measure.vela_run as vela_run

    if not KWS.exists():
        pytest.skip(SHARED_ABSENT)
    monkeypatch.setattr(vela_run, "vela_available", lambda: True)  # refused before Vela would run
    out = tmp_path / "a.json"
    code, _, err = run_cli("analyze", str(KWS), "--target", "cortex-m7", "--compare", "vela",
                           "--json", str(out))
    _assert_clean_error(code, err, "cortex-m7", "[perf.vela]")
    assert not out.exists()


def test_vela_missing_is_probed_without_an_exception(monkeypatch):
    """Without ethos-u-vela, find_spec("ethosu.vela") raises ModuleNotFoundError (it imports the
    absent parent): the probe must say False, not raise (the CLI then prints the install line)."""
    import importlib.util

    import opfuse.measure.vela_run as vela_run

    real = importlib.util.find_spec

    def absent(name, *args):  # noqa: ANN001, ANN202 - what Python does with ethosu uninstalled
        if name == "ethosu":
            return None
        if name.startswith("ethosu."):
            raise ModuleNotFoundError("No module named 'ethosu'", name="ethosu")
        return real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", absent)
    assert vela_run.vela_available() is False


def test_a_zero_vela_total_gives_no_error_figure():
    """Vela 5.2 on a float .tflite runs nothing on the NPU: its total is 0 s, and the comparison's
    error is no figure ("-"), not a ZeroDivisionError."""
    from opfuse.cost.compare import Comparison
    from opfuse.report.vela_console import fmt_error

    c = Comparison(model="m", target="ethos-u55", vela_config={}, rows=(), opfuse_s=1e-3,
                   vela_s=0.0, vela_summary_s=0.0, opfuse_arena_bytes=0, vela_sram_bytes=0,
                   opfuse_kernels=1, vela_passes=0)
    assert c.error is None and fmt_error(c.error) == "-"
    assert c.to_json()["total"]["error"] is None


def test_a_float_model_vela_leaves_to_the_cpu_is_not_counted_as_npu_ops(run_cli, tmp_path):
    """Vela 5.2 puts every operator of a float .tflite on the CPU, yet its summary still counts
    them as passes: the total said "3 NPU ops" (MediaPipe face detection: "164 NPU ops"). Now the
    NPU count comes from the operators Vela's per-layer CSV puts on the NPU, and the terminal says
    there is nothing to compare."""
    import numpy as np

    from opfuse.measure.vela_run import vela_available
    from opfuse.report.vela_console import NOTHING_ON_NPU
    from tests.helpers.tflite_builder import RELU, SAME, TfliteBuilder

    if not vela_available():
        pytest.skip("ethos-u-vela not installed (pip install 'opfuse[vela]')")
    rng = np.random.default_rng(0)
    b = TfliteBuilder()
    x = b.input("image", (1, 16, 16, 8), np.float32)
    for i in range(3):
        w = b.const(f"w{i}", (rng.standard_normal((8, 3, 3, 8)) * 0.3).astype(np.float32))
        bias = b.const(f"b{i}", np.zeros(8, np.float32))
        y = b.tensor(f"y{i}", (1, 16, 16, 8), np.float32)
        b.op("CONV_2D", [x, w, bias], [y], "Conv2DOptions", Padding=SAME, StrideH=1, StrideW=1,
             DilationHFactor=1, DilationWFactor=1, FusedActivationFunction=RELU)
        x = y
    b.output(x)
    model = tmp_path / "float_convs.tflite"
    model.write_bytes(b.build())
    args = ("analyze", str(model), "--target", "ethos-u55", "--compare", "vela")
    code, out, err = run_cli(*args, "--json", "-")
    assert code == 0, err
    data = json.loads(out)["compare"]
    listed = [r for r in data["rows"] if r["vela_layers"]]  # rows of Vela's own per-layer CSV
    assert listed and all(r["vela_cpu"] for r in listed) and data["total"]["nothing_on_npu"]
    assert data["total"]["vela_passes"] > 0 and data["total"]["vela_npu_passes"] == 0
    code, out, err = run_cli(*args)
    assert code == 0, err
    flat = " ".join(out.split())
    assert f"{data['total']['vela_passes']} NPU ops" not in flat and "0 NPU ops" in flat
    assert " ".join(NOTHING_ON_NPU.split()) in flat
