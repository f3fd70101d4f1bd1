"""The sweep page (opfuse/sweep/page.py) in Chromium: opens offline, sorts by a target's
latency, switches precision, and each cell links to its row's details; a hostile model file name
stays text."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.browser import chromium, open_offline

HOSTILE = "<img src=x onerror=alert(1)>.onnx"
TARGETS = ("cortex-m7", "mobile-gpu", "x86-host")


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    from opfuse.sweep import sweep
    from opfuse.sweep.page import write_page

    folder = tmp_path_factory.mktemp("sweep-page")
    bad = folder / HOSTILE
    bad.write_bytes(b"not a model")
    rows = sweep(["seed_block", "ds_cnn", "tiny_transformer", str(bad)], targets=",".join(TARGETS),
                 jobs=1)
    page = folder / "sweep.html"
    write_page(rows, page)
    return page, rows


@pytest.fixture(scope="module")
def browser():
    with chromium() as launched:
        yield launched


def _names(page) -> list[str]:  # noqa: ANN001
    """The models in the matrix's order (each cell shows the file name, its title the model)."""
    return page.eval_on_selector_all("#matrix tbody td.name", "els => els.map(e => e.title)")


def _latency_order(rows: list[dict], target: str, precision: str, descending: bool) -> list[str]:
    """The models ordered by their latency on ``target``; those without figures last, by name."""
    models = sorted({r["model"] for r in rows})
    lat = {r["model"]: r["latency_s"] for r in rows if r["target"] == target
           and r["precision"] == precision and r["status"] == "ok"}
    timed = sorted((m for m in models if m in lat), key=lambda m: lat[m], reverse=descending)
    return timed + [m for m in models if m not in lat]


def test_page_opens_offline_with_one_row_per_model(browser, swept) -> None:  # noqa: ANN001
    path, rows = swept
    page, errors, blocked = open_offline(browser, path)
    assert errors == [] and blocked == []
    heads = page.eval_on_selector_all("#matrix thead th", "els => els.map(e => e.textContent)")
    assert heads[0].startswith("model") and tuple(h.strip() for h in heads[1:]) == TARGETS
    assert sorted(_names(page)) == sorted({r["model"] for r in rows})
    # the hostile file name is text in the matrix and in its error rows, never an element
    assert page.query_selector("img") is None
    assert any(HOSTILE in n for n in _names(page))
    assert HOSTILE in page.locator("#matrix tbody td.name").all_text_contents()
    assert page.locator("#matrix td.error").count() == len(TARGETS)
    assert page.locator("#details article").count() == len(rows)


def test_sorting_a_target_orders_models_by_latency(browser, swept) -> None:  # noqa: ANN001
    path, rows = swept
    page, errors, _ = open_offline(browser, path)
    header = page.locator('#matrix th[data-col="cortex-m7"]')
    header.click()
    assert _names(page) == _latency_order(rows, "cortex-m7", "fp32", descending=False)
    assert page.locator('#matrix th[data-col="cortex-m7"]').get_attribute("aria-sort") == \
        "ascending"
    page.locator('#matrix th[data-col="cortex-m7"]').click()
    assert _names(page) == _latency_order(rows, "cortex-m7", "fp32", descending=True)
    page.locator("#prec-int8").click()  # the sort follows the precision shown
    assert _names(page) == _latency_order(rows, "cortex-m7", "int8", descending=True)
    assert _latency_order(rows, "cortex-m7", "int8", True) != _latency_order(rows, "cortex-m7",
                                                                           "int8", False)
    assert errors == []


def test_a_cell_links_to_its_row(browser, swept) -> None:  # noqa: ANN001
    from opfuse.sweep.schema import sort_rows

    path, rows = swept
    page, errors, _ = open_offline(browser, path, height=700)
    page.locator("#prec-fp16").click()
    row = page.locator("#matrix tbody tr", has_text="ds_cnn")
    row.locator('td[data-target="mobile-gpu"] a').click()
    index = next(i for i, r in enumerate(sort_rows(rows)) if r["model"] == "ds_cnn"
                 and r["target"] == "mobile-gpu" and r["precision"] == "fp16")
    assert page.evaluate("location.hash") == f"#row-{index}"
    article = page.locator(f"#row-{index}")
    assert "ds_cnn on mobile-gpu at fp16" in article.locator("h3").text_content()
    top = page.evaluate(f"document.getElementById('row-{index}').getBoundingClientRect().top")
    assert -2 <= top < 700  # scrolled into view (the top at a fraction of a pixel)
    assert errors == []
