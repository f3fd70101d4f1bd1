"""The report and explorer in Chromium: the deployment verdict, the three columns against
`analyze --json`, search in a large graph, selection from the roofline, layout at four widths, the
explorer's verdict rule for every setting, and the CSV export."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from tests.helpers.browser import chromium, open_offline
from tests.helpers.shared import SHARED_ONNX

WIDTHS = (800, 1100, 1300, 1920)
DENSENET = SHARED_ONNX / "light_densenet121.onnx"


@pytest.fixture(scope="module")
def browser():
    with chromium() as launched:
        yield launched


@pytest.fixture(scope="module")
def m7(tmp_path_factory) -> tuple[Path, dict]:
    """The report and the JSON of mobilenet_v2 on cortex-m7 at int8, both written by the CLI."""
    from opfuse.cli import main

    folder = tmp_path_factory.mktemp("m7")
    page, summary = folder / "report.html", folder / "a.json"
    main(["analyze", "mobilenet_v2", "--target", "cortex-m7", "--precision", "int8", "--no-cascades",
          "--html", str(page), "--json", str(summary)])  # fmt: skip
    return page, json.loads(summary.read_text())


@pytest.fixture(scope="module")
def explorer_page(tmp_path_factory) -> Path:
    from opfuse.report.explorer import write_explorer

    path = tmp_path_factory.mktemp("explorer") / "explorer.html"
    write_explorer("seed_pipeline", path)
    return path


def kib(n: int) -> str:
    return f"{n / 1024:,.1f} KiB" if n < 1 << 20 else f"{n / (1 << 20):,.1f} MiB"


def test_verdict_banner(browser, m7) -> None:
    path, data = m7
    dep = data["deployment"]
    page, errors, _ = open_offline(browser, path)
    ram = page.locator('#verdict li[data-key="ram"]')
    assert "v-bad" in ram.get_attribute("class")
    assert "does not fit" in ram.text_content()
    assert f"{kib(dep['arena_bytes'] - dep['ram_bytes'])} over" in ram.text_content()
    flash = page.locator('#verdict li[data-key="flash"]')
    assert "v-bad" in flash.get_attribute("class") and "of flash" in flash.text_content()
    assert f"{kib(dep['weight_bytes'] - dep['flash_bytes'])} over" in flash.text_content()
    peak = page.locator('#verdict li[data-key="peak"]').text_content()
    assert f"step {dep['peak']['step']}" in peak
    assert all(t["name"] in peak for t in dep["peak"]["tensors"][:4])
    assert "compute-bound" in page.locator('#verdict li[data-key="time"]').text_content()
    # the banner comes first, above the cards
    assert page.locator("#verdict-section").bounding_box()["y"] < page.locator("#cards").bounding_box()["y"]
    assert errors == []
    page.close()


def test_cascades_are_boxed_and_rings_hatched(browser, tmp_path) -> None:
    """With cascades (the default), the graph boxes every member of every cascade inside its
    kernel and names its rings at the analysed precision; the timeline hatches the ring buffers."""
    from opfuse.cli import main
    from opfuse.pipeline import compile_model

    page_path, summary = tmp_path / "report.html", tmp_path / "a.json"
    main(["analyze", "mobilenet_v2", "--target", "cortex-m7", "--precision", "int8",
          "--html", str(page_path), "--json", str(summary)])  # fmt: skip
    data = json.loads(summary.read_text())
    cascades = [k for k in data["kernels"] if k.get("members")]
    assert cascades
    rings = sum(len(k.ring_buffers) for k in compile_model("mobilenet_v2", "cortex-m7").partition.cascades)
    page, errors, _ = open_offline(browser, page_path)
    assert page.locator("#graph-scroll rect.member").count() == sum(len(k["members"]) for k in cascades)
    first = page.locator("#graph-scroll g.kbox").first.locator("text.khead").text_content()
    shown = re.search(r"(\d+) members, rings ([\d.]+) KiB", first)
    assert shown and int(shown[1]) == len(cascades[0]["members"])
    assert abs(float(shown[2]) - cascades[0]["ring_buffer_bytes"] / 1024) <= 0.051
    assert f"({rings} ring buffers, hatched)" in page.locator("#timeline-after-cap").text_content()
    assert page.locator("#timeline-after rect.tensor.ring").count() == rings
    assert errors == []
    page.close()


def test_three_columns_agree_with_analyze_json(browser, m7) -> None:
    path, data = m7
    page, errors, _ = open_offline(browser, path)
    rows = page.locator("#columns tbody tr")
    assert rows.count() >= 8
    for i in range(rows.count()):
        key = rows.nth(i).get_attribute("data-key")
        for side in ("before", "canonical", "after"):
            cell = rows.nth(i).locator(f'td[data-side="{side}"]')
            assert float(cell.get_attribute("data-value")) == pytest.approx(data[side][key], rel=1e-12)
    # sizes in binary units written as the terminal writes them; no decimal-looking KB/MB labels
    from opfuse.report.units import fmt_bytes

    arena = page.locator('#columns tr[data-key="peak_arena_bytes"] td[data-side="after"]')
    assert arena.text_content() == fmt_bytes(data["after"]["peak_arena_bytes"])
    assert not re.search(r"\d (KB|MB|GB)(?!/s)\b", page.locator("main").inner_text())
    headers = page.locator("#columns thead th").all_text_contents()
    assert headers[1:4] == ["as imported", "after canonicalization", "after fusion"]
    # the cards show fusion's own gain: canonical -> fused
    kernels = page.locator('#cards .card[data-card="kernels"] .card-value').text_content()
    assert f"{data['canonical']['kernels']} \u2192 {data['after']['kernels']}" in kernels
    assert errors == []
    page.close()


def test_clicking_roofline_dots_selects_every_kernel_there(browser, m7) -> None:
    path, data = m7
    page, errors, _ = open_offline(browser, path)
    page.locator("#roofline svg").scroll_into_view_if_needed()
    dots = page.locator("#roofline circle.dot.after")
    centre = {}
    for i in range(dots.count()):
        box = dots.nth(i).bounding_box()
        centre[int(dots.nth(i).get_attribute("data-kernel"))] = (
            box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        )
    # the most crowded spot: the kernels whose dots lie within 4 px of one dot
    crowd = max(
        ({j for j, q in centre.items() if abs(q[0] - p[0]) + abs(q[1] - p[1]) <= 4} for p in centre.values()),
        key=len,
    )
    assert len(crowd) > 1, "mobilenet_v2 on cortex-m7 has overlapping dots"
    x, y = centre[min(crowd)]
    reached = set()
    for _ in range(len(crowd) + 6):
        page.mouse.click(x, y)
        row = page.locator("#kernel-table tbody tr.selected")
        assert row.count() == 1
        reached.add(int(row.get_attribute("data-kernel")))
    assert crowd <= reached, "every kernel under the cursor is reachable by clicking"
    last = int(page.locator("#kernel-table tbody tr.selected").get_attribute("data-kernel"))
    assert page.locator("#graph-scroll g.kbox.selected").get_attribute("data-index") == str(last)
    # and a table row selects its kernel in the graph and the roofline
    page.locator('#kernel-table tbody tr[data-kernel="3"]').click()
    assert page.locator("#graph-scroll g.kbox.selected").get_attribute("data-index") == "3"
    assert page.locator("#roofline circle.dot.after.selected").get_attribute("data-kernel") == "3"
    assert page.locator("#timeline-after rect.tl-selected").get_attribute("data-step") == "3"
    assert errors == []
    page.close()


OVERFLOW_JS = """() => {
  const bad = [], vw = document.documentElement.clientWidth;
  for (const el of document.querySelectorAll('.card, section, #verdict li, #ex-verdict li, .ro')) {
    const r = el.getBoundingClientRect(), host = el.parentElement.getBoundingClientRect();
    if (el.scrollWidth > el.clientWidth + 1 || r.right > vw + 0.5 || r.left < -0.5 ||
        (el.matches('.card, .ro, li') && (r.right > host.right + 0.5 || r.left < host.left - 0.5)))
      bad.push((el.id || el.className || el.tagName) + ' ' + Math.round(r.left) + '..' + Math.round(r.right) +
        ' scroll ' + el.scrollWidth + '/' + el.clientWidth);
  }
  if (document.documentElement.scrollWidth > vw) bad.push('page ' + document.documentElement.scrollWidth);
  return bad;
}"""


@pytest.mark.parametrize("width", WIDTHS)
def test_no_card_overflows(browser, m7, explorer_page, width) -> None:
    for path in (m7[0], explorer_page):
        page, errors, _ = open_offline(browser, path, width=width)
        assert page.evaluate(OVERFLOW_JS) == [], (path.name, width)
        assert errors == []
        page.close()


def test_kernel_name_stays_in_view_at_800(browser, m7) -> None:
    page, _, _ = open_offline(browser, m7[0], width=800)
    wrap = page.locator("#kernels-section .table-wrap")
    assert wrap.evaluate("e => e.scrollWidth > e.clientWidth"), "the table is wider than 800 px"
    wrap.evaluate("e => { e.scrollLeft = e.scrollWidth; }")
    box, name = wrap.bounding_box(), page.locator("#kernel-table tbody tr td.c-name").first.bounding_box()
    assert box["x"] - 1 <= name["x"] <= box["x"] + 2 and name["width"] > 40
    page.close()


def test_search_scrolls_to_a_node_in_a_large_graph(browser, tmp_path) -> None:
    if not DENSENET.exists():
        pytest.skip("../shared/models not present")
    from opfuse.cli import main

    page_path = tmp_path / "densenet.html"
    main(["analyze", str(DENSENET), "--no-cascades", "--html", str(page_path), "--json", str(tmp_path / "a.json")])
    data = json.loads((tmp_path / "a.json").read_text())
    assert len(data["kernels"]) >= 250
    kernel = len(data["kernels"]) * 3 // 4
    node = data["kernels"][kernel]["nodes"][-1]
    page, errors, _ = open_offline(browser, page_path)
    page.locator("#graph-fit").click()
    scroll = page.locator("#graph-scroll")
    fit = page.evaluate("() => { const s = document.querySelector('#graph-scroll'), g = s.querySelector('svg');"
                        " return [g.getBoundingClientRect().width, g.getBoundingClientRect().height,"
                        " s.clientWidth, s.clientHeight]; }")
    assert fit[0] <= fit[2] + 1 and fit[1] <= fit[3] + 1, "fit shows the whole graph"
    page.locator("#graph-one").click()
    page.locator("#graph-search").fill(node)
    hit = page.locator(f'#graph-scroll g.kbox[data-index="{kernel}"]')
    assert "selected" in hit.get_attribute("class")
    view, box = scroll.bounding_box(), hit.bounding_box()
    assert view["y"] <= box["y"] + box["height"] / 2 <= view["y"] + view["height"]
    assert view["x"] <= box["x"] + box["width"] / 2 <= view["x"] + view["width"]
    assert page.locator(f'#kernel-table tbody tr[data-kernel="{kernel}"]').get_attribute("class").endswith("selected")
    assert errors == []
    page.close()


def test_zoom_is_anchored_at_the_cursor(browser, m7) -> None:
    page, _, _ = open_offline(browser, m7[0])
    scroll = page.locator("#graph-scroll")
    scroll.scroll_into_view_if_needed()
    scroll.evaluate("e => { e.scrollTop = 600; e.scrollLeft = 0; }")
    box = scroll.bounding_box()
    ax, ay = 150, 300  # the cursor, in the scroll box
    # the graph point under the cursor, in layout units (zoom 1 at the start)
    under = "z => { const e = document.querySelector('#graph-scroll');" \
        f" return [(e.scrollLeft + {ax}) / z, (e.scrollTop + {ay}) / z]; }}"
    before = page.evaluate(under, 1.0)
    page.mouse.move(box["x"] + ax, box["y"] + ay)
    page.keyboard.down("Control")
    page.mouse.wheel(0, -100)
    page.keyboard.up("Control")
    page.wait_for_timeout(100)
    assert page.locator("#graph-zoom").text_content() == "110%"
    after = page.evaluate(under, 1.1)
    assert after[1] == pytest.approx(before[1], abs=1.0)  # the graph is taller than the box
    if scroll.evaluate("e => e.scrollWidth > e.clientWidth + 20"):
        assert after[0] == pytest.approx(before[0], abs=1.0)
    page.close()


def test_explorer_verdict_follows_the_per_kernel_rule_everywhere(browser, explorer_page) -> None:
    """For every target, precision, size and fusion setting: the verdict is "memory" exactly when
    the schedule's memory time exceeds its compute time (the per-kernel rule of opfuse.cost on the
    sums), and the page says which side of the ridge the intensity is."""
    from opfuse.analysis import analyze
    from opfuse.models.sized import DEFAULT_SIZE, write_sized
    from opfuse.pipeline import compile_model

    page, errors, _ = open_offline(browser, explorer_page)
    data = json.loads(page.locator("#explorer-data").text_content())
    checked = 0
    for key in data["configs"]:
        target, precision, size = key.split("|")
        source = "seed_pipeline" if int(size) == DEFAULT_SIZE else write_sized(int(size), explorer_page.parent)
        a = analyze(compile_model(source, target), precision=precision)
        page.select_option("#hardware", target)
        page.click(f'#precision button[data-precision="{precision}"]')
        page.select_option("#size", size)
        for fused, side in (("1", a.after), ("0", a.before)):
            page.click(f'#fusion button[data-fused="{fused}"]')
            ks = side.cost.kernels
            want = "memory" if sum(k.memory_s for k in ks) > sum(k.compute_s for k in ks) else "compute"
            box = page.locator("#ro-verdict")
            assert box.locator(".v").get_attribute("data-value") == want, (key, fused)
            below = float(box.get_attribute("data-intensity")) < float(box.get_attribute("data-ridge"))
            assert below == (want == "memory")
            assert ("below" in box.locator(".n").text_content()) == below
            assert "latency-weighted" in box.locator(".n").text_content()
            checked += 1
    assert checked == 2 * len(data["configs"]) and errors == []
    page.close()


def test_kernel_csv_download(browser, m7, tmp_path) -> None:
    path, data = m7
    page, errors, blocked = open_offline(browser, path)
    with page.expect_download() as info:
        page.locator("#kernel-csv").click()
    out = tmp_path / "k.csv"
    info.value.save_as(out)
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    assert [r["name"] for r in rows] == [k["name"] for k in data["kernels"]]
    assert [int(r["flops"]) for r in rows] == [k["flops"] for k in data["kernels"]]
    assert errors == [] and blocked == []
    page.close()


def test_report_prints_on_a4(browser, m7, tmp_path) -> None:
    """Under the print stylesheet, at A4's printable width (210 mm less 2 x 12 mm margins, 703 px at
    96 dpi), nothing sticks out sideways; Chromium then lays the page out as an A4 PDF."""
    page, errors, _ = open_offline(browser, m7[0], width=700)
    page.emulate_media(media="print")
    wide = page.evaluate("""() => { const vw = document.documentElement.clientWidth, out = [];
      for (const el of document.querySelectorAll('main *')) {
        const r = el.getBoundingClientRect();
        if (r.width > 0 && r.right > vw + 1) out.push(el.tagName + '.' + el.getAttribute('class'));
      }
      return out.slice(0, 10); }""")
    assert wide == []
    pdf = tmp_path / "report.pdf"
    page.pdf(path=str(pdf), format="A4", margin={"top": "12mm", "bottom": "12mm", "left": "12mm", "right": "12mm"})
    assert pdf.read_bytes()[:5] == b"%PDF-"
    assert errors == []
    page.close()
