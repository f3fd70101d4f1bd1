"""`opfuse quantize --html`: the accuracy page shows the figures of the report's JSON (per output
SQNR, largest error, top-1; every kernel ranked worst first), self-contained, in Chromium too."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.helpers.browser import chromium, needs_chromium, open_offline
from tests.helpers.quant import ops_model


class _Cells(HTMLParser):
    """Per table id, its body rows as lists of cell texts; and the embedded JSON."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.table: str | None = None
        self.in_body = self.in_cell = self.in_data = False
        self.data = ""

    def handle_starttag(self, tag, attrs):  # noqa: ANN001
        a = dict(attrs)
        if tag == "table":
            self.table = a.get("id")
            self.tables[self.table] = []
        elif tag == "tbody":
            self.in_body = True
        elif tag == "tr" and self.in_body:
            self.tables[self.table].append([])
        elif tag == "td" and self.in_body:
            self.in_cell = True
            self.tables[self.table][-1].append("")
        elif tag == "script" and a.get("id") == "quantize-data":
            self.in_data = True

    def handle_endtag(self, tag):  # noqa: ANN001
        if tag == "tbody":
            self.in_body = False
        elif tag == "td":
            self.in_cell = False
        elif tag == "script":
            self.in_data = False

    def handle_data(self, data):  # noqa: ANN001
        if self.in_cell:
            self.tables[self.table][-1][-1] += data
        if self.in_data:
            self.data += data


def _shown_db(text: str) -> float | None:
    return None if text == "exact" else float(text)


def _json_db(value) -> float | None:  # noqa: ANN001
    return None if value is None else round(float(value), 2)


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> tuple[Path, dict]:
    from opfuse.cli import main

    tmp = tmp_path_factory.mktemp("qpage")
    src = tmp / "ops.onnx"
    onnx.save(ops_model(), src)
    np.savez(tmp / "cal.npz", x=np.random.default_rng(0).standard_normal(
        (12, 1, 4, 8, 8)).astype(np.float32))
    args = ["quantize", str(src), "-o", str(tmp / "q.onnx"), "--calibration",
            str(tmp / "cal.npz"), "--json", str(tmp / "q.json"), "--html", str(tmp / "q.html")]
    try:
        main(args)
    except SystemExit as exc:
        assert not exc.code
    return tmp / "q.html", json.loads((tmp / "q.json").read_text())


def test_the_page_shows_the_jsons_figures(page) -> None:
    path, data = page
    text = path.read_text()
    cells = _Cells()
    cells.feed(text)
    assert json.loads(cells.data) == data  # the page embeds the report it shows
    outputs = cells.tables["outputs"]
    assert len(outputs) == len(data["outputs"]) >= 1
    for row, o in zip(outputs, data["outputs"], strict=True):
        assert row[0] == o["name"]
        assert _shown_db(row[1]) == _json_db(o["sqnr_db"])
        assert float(row[2]) == pytest.approx(o["max_abs_err"], rel=1e-5)
        top1 = None if row[3] == "-" else float(row[3].rstrip("%")) / 100
        assert top1 == (None if o["top1_agreement"] is None else
                        pytest.approx(o["top1_agreement"], abs=5e-4))
    kernels = cells.tables["kernels"]
    assert len(kernels) == len(data["kernels"]) >= 5
    for rank, (row, k) in enumerate(zip(kernels, data["kernels"], strict=True)):
        assert int(row[0]) == rank + 1 and int(row[1]) == k["index"]
        assert row[2].startswith(k["kernel"]) and row[3] == k["tensor"]
        assert _shown_db(row[4]) == _json_db(k["sqnr_db"])
        assert float(row[5]) == pytest.approx(k["max_abs_err"], rel=1e-5)
        assert (None if row[6] == "-" else float(row[6])) == _json_db(k["loss_db"])
    shown = [_shown_db(r[4]) for r in kernels]
    finite = [s for s in shown if s is not None]
    assert finite == sorted(finite)  # worst first
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)  # nothing fetched


@needs_chromium
def test_the_page_renders_offline(page) -> None:
    path, data = page
    with chromium() as browser:
        view, errors, blocked = open_offline(browser, path)
        assert not errors and not blocked
        assert view.locator("#outputs tbody tr").count() == len(data["outputs"])
        rows = view.locator("#kernels tbody tr")
        assert rows.count() == len(data["kernels"])
        first = data["kernels"][0]
        assert rows.nth(0).locator("td.kernel").inner_text().startswith(first["kernel"])
        assert _shown_db(rows.nth(0).locator("td.sqnr").inner_text()) == _json_db(first["sqnr_db"])
        assert "worst" in rows.nth(0).get_attribute("class")
        widths = [rows.nth(i).locator("td.bar span").evaluate("e => e.getBoundingClientRect().width")
                  for i in range(rows.count())]
        assert widths[0] <= widths[-1] and widths[-1] > 0  # bars grow with the SQNR


def test_names_from_the_model_are_escaped() -> None:
    from opfuse.report.quantize_page import render_quantize_page

    evil = '<img src=x onerror="alert(1)"></td><script>alert(2)</script>'
    data = {"model": evil, "target": "x86-host", "method": "minmax", "weights": "per-channel",
            "calibration": {"data": evil, "samples": 3},
            "evaluation": {"data": evil, "samples": 1, "held_out_split": False},
            "kept_float": [evil],
            "outputs": [{"name": evil, "sqnr_db": "-inf", "max_abs_err": 1.0,
                         "top1_agreement": None}],
            "kernels": [{"index": 0, "kernel": evil, "tensor": evil, "sqnr_db": 3.0,
                         "max_abs_err": 0.5, "constant_range": True}]}
    text = render_quantize_page(data)
    assert "<script>alert" not in text and "<img" not in text
    cells = _Cells()
    cells.feed(text)
    assert cells.tables["kernels"][0][2].startswith(evil) and json.loads(cells.data) == data


def test_a_page_that_cannot_be_written_writes_nothing(tmp_path, run_cli) -> None:
    src = tmp_path / "ops.onnx"
    onnx.save(ops_model(), src)
    np.savez(tmp_path / "cal.npz", x=np.random.default_rng(0).standard_normal(
        (8, 1, 4, 8, 8)).astype(np.float32))
    out = tmp_path / "q.onnx"
    for page_arg, message in ((str(tmp_path / "none" / "q.html"), "does not exist"),
                              (str(tmp_path / "q.txt"), "name it .html")):
        code, _, err = run_cli("quantize", str(src), "-o", str(out), "--calibration",
                               str(tmp_path / "cal.npz"), "--html", page_arg)
        assert code == 2 and err.count("\n") == 1 and message in err, err
        assert not out.exists()
