"""The HTML report and the roofline explorer: self-contained, offline, and in agreement with the
cost model. Browser tests drive Debian's Chromium through Playwright (no `playwright install`)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from opfuse.errors import OpfuseError
from tests.helpers.browser import chromium, needs_chromium, open_offline
from tests.helpers.shared import REPO

ARTIFACTS = Path(os.environ.get("OPFUSE_TEST_ARTIFACTS", REPO / "artifacts"))
DOCS_IMG = REPO / "docs" / "img"  # refreshed only with OPFUSE_UPDATE_DOCS_IMG=1
REMOTE = re.compile(
    r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//|url\(\s*["']?\s*(?:https?:)?//|@import|"""
    r"""<link[^>]+stylesheet|fonts\.googleapis""",
    re.IGNORECASE,
)


@pytest.fixture(scope="module")
def mobilenet_report(tmp_path_factory) -> tuple[Path, dict]:
    from opfuse.analysis import analyze
    from opfuse.pipeline import compile_model
    from opfuse.report.data import report_data
    from opfuse.report.html import write_report

    result = compile_model("mobilenet_v2", "cortex-m7")
    data = report_data(result, analyze(result, precision="int8", cascades=False))
    path = tmp_path_factory.mktemp("report") / "report.html"
    write_report(data, path)
    return path, data


@pytest.fixture(scope="module")
def explorer_page(tmp_path_factory) -> Path:
    from opfuse.report.explorer import render_explorer

    path = tmp_path_factory.mktemp("explorer") / "explorer.html"
    path.write_text(render_explorer(), encoding="utf-8")
    return path


def test_pages_fetch_nothing(mobilenet_report, explorer_page) -> None:
    for path in (mobilenet_report[0], explorer_page):
        text = path.read_text(encoding="utf-8")
        assert not REMOTE.search(text), REMOTE.search(text)
        assert not re.search(r"<script[^>]+src=", text)


def test_report_size(mobilenet_report) -> None:
    assert mobilenet_report[0].stat().st_size < 6 * 1024 * 1024


def test_report_into_missing_folder_writes_nothing(mobilenet_report, tmp_path) -> None:
    from opfuse.report.html import write_report

    target = tmp_path / "no" / "such" / "report.html"
    with pytest.raises(OpfuseError, match="does not exist") as info:
        write_report(mobilenet_report[1], target)
    assert info.value.exit_code == 2
    assert not target.parent.exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_report_into_read_only_folder(mobilenet_report, tmp_path) -> None:
    from opfuse.report.html import write_report

    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.raises(OpfuseError, match="cannot write"):
            write_report(mobilenet_report[1], folder / "report.html")
        assert list(folder.iterdir()) == []
    finally:
        folder.chmod(0o700)


def test_explore_cli(run_cli, tmp_path) -> None:
    out = tmp_path / "explorer.html"
    code, stdout, _ = run_cli("explore", "-o", str(out))
    assert code == 0 and out.stat().st_size > 10_000 and "wrote" in stdout
    missing = tmp_path / "missing" / "explorer.html"
    code, _, stderr = run_cli("explore", "-o", str(missing))
    assert code == 2 and "does not exist" in stderr and len(stderr.strip().splitlines()) == 1
    assert not missing.parent.exists()


# -- in the browser ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def browser():
    with chromium() as launched:
        yield launched


def shot(page, name: str, **kw) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), **kw)
    if name in ("report", "explorer") and os.environ.get("OPFUSE_UPDATE_DOCS_IMG") == "1":
        DOCS_IMG.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(DOCS_IMG / f"{name}.png"), **kw)


@needs_chromium
def test_report_renders_offline(browser, mobilenet_report) -> None:
    path, data = mobilenet_report
    page, errors, blocked = open_offline(browser, path)
    shot(page, "report")
    shot(page, "report-full", full_page=True)
    kernels = len(data["analysis"]["kernels"])
    assert page.locator("#cards .card").count() == 6
    assert page.locator("#kernel-table tbody tr").count() == kernels
    assert page.locator("#roofline circle.dot.after").count() > 0
    assert page.locator("#roofline circle.dot.before").count() > 0
    assert page.locator("#graph-scroll g.kbox").count() == kernels
    # why not fused: one group per (producer op, consumer op), the one-anchor refusals apart and
    # collapsed, every refused edge in exactly one group, and no scroll box inside the page
    op = {n["name"]: n["op"] for n in data["graph"]["nodes"]}
    refused = [d for d in data["analysis"]["decisions"] if not d["fused"]]
    anchor = [d for d in refused if "holds one anchor" in d["message"]]
    pairs = {(d in anchor, op[d["producer"]], op[d["consumer"]]) for d in refused}
    assert anchor and page.locator("#decisions details.reason").count() == len(pairs)
    top = page.locator("#decisions > details.reason")
    counts = [int(top.nth(i).get_attribute("data-count")) for i in range(top.count())]
    expected = page.locator("#decisions > details.expected")
    assert expected.count() == 1 and not expected.evaluate("e => e.open")
    assert int(expected.get_attribute("data-count")) == len(anchor)
    assert sum(counts) + len(anchor) == len(refused)
    saved = [int(top.nth(i).get_attribute("data-saved")) for i in range(top.count())]
    assert saved == sorted(saved, reverse=True)  # ranked by the bytes fusing would save
    assert page.locator("#decisions").evaluate("e => getComputedStyle(e).overflowY") == "visible"
    assert page.locator("#timeline-before rect.tensor").count() == len(
        data["memory"]["before"]["tensors"]
    )
    assert page.locator("#timeline-after rect.tensor").count() == len(
        data["memory"]["after"]["tensors"]
    )
    fired = [k for k, v in data["analysis"]["passes"].items() if v]
    assert page.locator("#passes .pass").count() == len(fired)
    # sorting: click "latency" twice -> ascending; the first row is the fastest kernel
    header = page.locator('#kernel-table th[data-key="latency_s"]')
    header.click()
    header.click()
    first = page.locator("#kernel-table tbody tr td.c-name").first.text_content()
    fastest = min(data["analysis"]["kernels"], key=lambda k: k["latency_s"])
    assert first in {
        k["name"] for k in data["analysis"]["kernels"] if k["latency_s"] == fastest["latency_s"]
    }
    assert errors == [] and blocked == []
    page.close()


def readouts(page) -> dict[str, float]:
    return {
        key: float(page.locator(f"#ro-{key} .v").get_attribute("data-value"))
        for key in ("traffic", "intensity", "throughput", "latency", "speedup")
    }


def expected(target: str, precision: str, fused: bool, cascades: bool = True) -> dict[str, float]:
    from opfuse.analysis import analyze
    from opfuse.pipeline import compile_model

    summary = analyze(compile_model("seed_pipeline", target), precision=precision,
                      cascades=cascades).to_json()  # fmt: skip
    side = summary["after" if fused else "before"]
    return {
        "traffic": side["traffic_bytes"],
        "intensity": side["flops"] / side["traffic_bytes"],
        "throughput": side["flops"] / side["latency_s"],
        "latency": side["latency_s"],
        "speedup": summary["before"]["latency_s"] / summary["after"]["latency_s"],
    }


def assert_matches(page, target: str, precision: str, fused: bool, cascades: bool = True) -> None:
    key = "off" if not fused else ("on" if cascades else "layer")
    assert page.locator("body").get_attribute("data-config") == f"{target}|{precision}|256|{key}"
    got, want = readouts(page), expected(target, precision, fused, cascades)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-12), key


@needs_chromium
def test_explorer_agrees_with_analyze(browser, explorer_page) -> None:
    page, errors, blocked = open_offline(browser, explorer_page)
    assert_matches(page, "npu-generic", "int8", True)
    page.wait_for_timeout(300)  # packets on their way
    shot(page, "explorer", full_page=True)
    page.click('#fusion button[data-fused="0"]')
    assert_matches(page, "npu-generic", "int8", False)
    page.click('#precision button[data-precision="fp16"]')
    assert_matches(page, "npu-generic", "fp16", False)
    page.select_option("#hardware", "cortex-a76")
    assert_matches(page, "cortex-a76", "fp16", False)
    page.click('#fusion button[data-fused="1"]')
    assert_matches(page, "cortex-a76", "fp16", True)
    # the cascade toggle: layer by layer gives analyze --no-cascades; npu-generic has no cascade
    page.click('#cascades button[data-cascades="0"]')
    assert_matches(page, "cortex-a76", "fp16", True, cascades=False)
    page.click('#cascades button[data-cascades="1"]')
    assert_matches(page, "cortex-a76", "fp16", True)
    page.select_option("#hardware", "npu-generic")
    assert page.locator('#cascades button[data-cascades="1"]').is_disabled()
    page.select_option("#hardware", "cortex-a76")
    page.wait_for_timeout(400)  # let packets and the roofline dot move
    shot(page, "explorer-cortex-a76", full_page=True)
    assert page.locator("#ex-roofline circle.dot-now").count() == 1
    assert page.locator("#ex-roofline circle.dot-flip").count() == 1
    assert errors == [] and blocked == []
    page.close()


def test_explore_opens_on_the_chosen_target_at_the_models_own_precision(run_cli, tmp_path) -> None:
    """A float model opens on fp32 (not the page's first precision, int8), on the --target given;
    an unknown target is one line, exit 2, no page."""
    import json
    import re

    from opfuse.report.explorer import explorer_data
    from opfuse.targets import load_target

    data = explorer_data("ds_cnn", "cortex-m7")
    assert data["default"]["target"] == "cortex-m7" and data["default"]["precision"] == "fp32"
    # without --target a float model opened on npu-generic's int8 (MediaPipe face detection did):
    # now on the first target whose precisions include its own
    default = explorer_data("ds_cnn")["default"]
    assert default["precision"] == "fp32" and default["target"] != "npu-generic"
    assert "fp32" in load_target(default["target"]).precisions
    assert "fp32" not in load_target("npu-generic").precisions
    out = tmp_path / "e.html"
    code, _, err = run_cli("explore", "ds_cnn", "--target", "x86-host", "-o", str(out))
    assert code == 0, err
    blob = re.search(r'<script type="application/json" id="explorer-data">(.*?)</script>',
                     out.read_text(), re.S)
    assert blob is not None and json.loads(blob.group(1))["default"]["target"] == "x86-host"
    code, _, err = run_cli("explore", "ds_cnn", "--target", "nosuch", "-o", str(tmp_path / "n.html"))
    assert code == 2 and "nosuch" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "n.html").exists()


def _wide_model(branches: int = 24):
    """~100 nodes in parallel branches (what MediaPipe's face detector's graph looks like to the
    layout): x -> Conv -> Relu -> Sigmoid -> Mul(x) per branch, then one Sum."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits, outs = [], [], []
    for b in range(branches):
        w = np.random.default_rng(b).standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.1
        inits.append(numpy_helper.from_array(w, f"w{b}"))
        nodes += [helper.make_node("Conv", ["x", f"w{b}"], [f"c{b}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{b}"], [f"r{b}"]),
                  helper.make_node("Sigmoid", [f"r{b}"], [f"s{b}"]),
                  helper.make_node("Mul", [f"s{b}", "x"], [f"m{b}"])]
        outs.append(f"m{b}")
    nodes.append(helper.make_node("Sum", outs, ["y"]))
    graph = helper.make_graph(nodes, "wide", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@needs_chromium
def test_a_wide_branched_graph_leaves_the_memory_timeline_its_width(browser, run_cli, tmp_path) -> None:
    """At 1400 px a 97-node branched graph scrolls inside its own box: the page has no horizontal
    scroll and the Memory timeline is at least 600 px wide (it was a 38 px column)."""
    import onnx

    onnx.save(_wide_model(), tmp_path / "wide.onnx")
    code, _, err = run_cli("analyze", str(tmp_path / "wide.onnx"), "--target", "cortex-m7",
                           "--html", str(tmp_path / "wide.html"))
    assert code == 0, err
    page, errors, blocked = open_offline(browser, tmp_path / "wide.html", width=1400)
    assert not errors and not blocked
    size = page.evaluate("""() => ({page: document.documentElement.scrollWidth,
        view: document.documentElement.clientWidth,
        timeline: document.querySelector('.timeline').getBoundingClientRect().width,
        graph: document.querySelector('#graph-scroll').scrollWidth})""")
    assert size["page"] <= size["view"], size
    assert size["timeline"] >= 600 and size["graph"] > size["view"], size  # the graph scrolls


def _strip_pages(page) -> tuple[list[str], list[list]]:
    """Every operator name and memory-lane tile of the explorer's strip, paging from the first."""
    import json

    while not page.locator("#strip-prev").is_disabled():
        page.click("#strip-prev")
    names, tiles = [], []
    while True:
        names += json.loads(page.get_attribute("#strip", "data-ops"))
        tiles += json.loads(page.get_attribute("#strip", "data-lane"))
        if page.locator("#strip-next").is_disabled():
            return names, tiles
        page.click("#strip-next")


@needs_chromium
def test_the_explorer_pages_through_every_operator_and_fills_its_memory_lane(browser, run_cli,
                                                                           tmp_path) -> None:
    """The strip showed "First 10 of 97 operators" and an empty DRAM lane. Now it pages through
    all 97, finds an operator by type, and its memory lane holds one tile per output written:
    unfused, every operator's output (sizes from onnx's shape inference, 4 B at fp32); fused, the
    kernels' outputs of the partition analyze reports."""
    import numpy as np
    import onnx

    import opfuse

    model = _wide_model()
    onnx.save(model, tmp_path / "wide.onnx")
    code, _, err = run_cli("explore", str(tmp_path / "wide.onnx"), "--target", "cortex-m7",
                           "-o", str(tmp_path / "e.html"))
    assert code == 0, err
    page, errors, blocked = open_offline(browser, tmp_path / "e.html", width=1400)
    assert "First" not in page.text_content("#strip-note")
    page.click('#fusion button[data-fused="0"]')
    names, tiles = _strip_pages(page)
    assert len(names) == len(set(names)) == len(model.graph.node) == 97
    inferred = onnx.shape_inference.infer_shapes(model).graph
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in (*inferred.value_info, *inferred.output)}
    assert len(tiles) == 97
    assert sum(t[1] for t in tiles) == sum(4 * int(np.prod(shapes[n.output[0]])) for n in model.graph.node)
    page.click('#fusion button[data-fused="1"]')
    _, fused = _strip_pages(page)
    result = opfuse.compile(str(tmp_path / "wide.onnx"), target="cortex-m7")
    values = {v.name: v for n in result.optimized.graph for v in n.outputs}
    expected = sum(4 * int(np.prod(values[o].shape.numpy())) for k in result.partition.kernels
                   for o in k.outputs)
    assert 0 < len(fused) < 97 and sum(t[1] for t in fused) == expected
    page.fill("#strip-find", "sum")
    assert page.text_content("#strip-found").startswith("1 match")
    assert page.text_content("#strip-range") == "operators 91\u201397 of 97"
    shot(page, "explorer-wide")
    assert errors == [] and blocked == []
    page.close()
