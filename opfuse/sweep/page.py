"""The sweep's HTML page: a models x targets matrix at one precision (buttons switch it), each
cell coloured by fit (RAM and flash) and shaded by predicted latency, sortable by any column, and
linking to its row's details further down. One self-contained file: the rows are embedded JSON,
CSS and JS are inlined from ``opfuse/report/assets`` (``opfuse.report.page``), nothing is
fetched (docs/architecture.md, "Sweep")."""

from __future__ import annotations

from pathlib import Path

from opfuse import __version__
from opfuse.report.page import esc, page
from opfuse.sweep.schema import COLUMNS, sort_rows

_CSS = ["base.css", "sweep.css"]
_JS = ["common.js", "sweep.js"]


def _body(rows: list[dict]) -> str:
    models = len({r["model"] for r in rows})
    targets = len({r["target"] for r in rows})
    failed = sum(1 for r in rows if r["status"] == "error")
    return f"""
<header>
  <h1>opfuse sweep: {models} models &times; {targets} targets</h1>
  <div class="sub">{len(rows)} rows, {failed} failed &middot; opfuse {esc(__version__)}</div>
</header>
<main>
<section id="matrix-section"><h2>Does it fit, and how fast?</h2>
  <div id="precisions" class="precisions" role="group" aria-label="precision"></div>
  <p class="dim">Colour: <span class="swatch fit-both"></span>fits RAM and flash
  <span class="swatch fit-one"></span>fits one of them <span class="swatch fit-none"></span>fits
  neither <span class="swatch skipped"></span>skipped <span class="swatch error"></span>error;
  darker is slower (predicted latency, log scale). Click a column to sort by it, a cell for its
  row's details.</p>
  <div class="table-wrap"><table id="matrix"></table></div></section>
<section id="details-section"><h2>Rows</h2><div id="details"></div></section>
</main>
<footer>opfuse {esc(__version__)} &middot; self-contained page, no network</footer>
"""


def render_page(rows: list[dict]) -> str:
    rows = sort_rows(rows)
    data = {"rows": rows, "columns": [[c.name, c.meaning] for c in COLUMNS]}
    return page("opfuse sweep", _CSS, _body(rows), "sweep-data", data, _JS)


def write_page(rows: list[dict], path: str | Path) -> None:
    from opfuse.output import write_file

    write_file(path, render_page(rows))
