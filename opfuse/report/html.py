"""The offline HTML report: ``render_report(report_data(result, analysis))`` -> one HTML file.

The page is a template with empty sections that the inline JS fills from the embedded JSON
(``opfuse.report.data``); there is no other source of numbers. See ``page.py`` for how it stays
self-contained.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from opfuse.report.page import esc, page

_CSS = ["base.css", "report.css"]
_JS = ["common.js", "roofline.js", "kernels.js", "refusals.js", "graph.js", "timeline.js", "report.js",
       "vela.js"]
# analyze --compare vela: one added section, filled by vela.js from data["compare"]
_VELA = """<section id="vela-section"><h2>opfuse vs Vela</h2><p class="dim" id="vela-config"></p>
  <div class="table-wrap"><table id="vela-table"></table></div></section>"""


def _body(data: dict[str, Any]) -> str:
    a = data["analysis"]
    graph = data["graph"]
    refused = sum(1 for e in graph["edges"] if e["kind"] == "refused")
    accounting = (
        '<span class="acct">activations only (--activations-only): weight traffic not counted'
        "</span>"
        if a.get("accounting") == "activations-only"
        else "traffic counts activations and weights"
    )
    return f"""
<header>
  <h1>opfuse report: {esc(a["model"])} on {esc(a["target"])}</h1>
  <div class="sub">precision {esc(a["precision"])} &middot; planner {esc(a["planner"])} &middot;
  {accounting} &middot;
  {data["original_nodes"]} imported nodes, {len(graph["nodes"])} after canonicalization,
  {len(graph["kernels"])} kernels &middot; {esc(data["target_description"])}</div>
</header>
<main>
<section id="verdict-section"><h2>Does it deploy on {esc(a["target"])}?</h2><ul id="verdict"></ul></section>
<section id="summary"><h2>What fusion bought</h2>
  <p class="dim">Cards: after canonicalization &rarr; after fusion, fusion&rsquo;s own gain; folding
  (BatchNorm into Conv and the other passes) is the step before it. Sizes in KiB/MiB (1024 B),
  bandwidth in GB/s (10<sup>9</sup> B/s).</p>
  <div class="cards" id="cards"></div>
  <div class="table-wrap cols"><table id="columns"></table></div></section>
<div class="two">
<section id="roofline-section"><h2>Roofline</h2><div id="roofline"></div>
  <p class="dim" id="roofline-legend"></p></section>
<section id="decisions-section"><h2>Why not fused</h2>
  <p class="dim">Every producer &rarr; consumer edge the partitioner left unfused, grouped by op pair,
  ranked by the activation traffic fusing them would save.</p>
  <div id="decisions"></div></section>
</div>
<section id="passes-section"><h2>Passes that fired</h2><div id="passes"></div></section>
<section id="kernels-section"><h2>Kernels after fusion</h2>
  <p class="dim">Click a column to sort, a row to select its kernel in the graph and the roofline;
  hover a kernel name for its nodes. <button id="kernel-csv" class="tool">download CSV</button></p>
  <div class="table-wrap"><table id="kernel-table"></table></div></section>
<div class="graph-mem">
<section id="graph-section"><h2>Graph</h2>
  <div class="graph-tools"><input id="graph-search" type="search" placeholder="find a node or kernel"
  aria-label="find a node or kernel by name"><span id="graph-found" class="dim"></span>
  <button id="graph-out" title="zoom out">&minus;</button>
  <button id="graph-in" title="zoom in">+</button><button id="graph-fit">fit</button>
  <button id="graph-one">100%</button><span id="graph-zoom" class="dim"></span>
  <span class="dim">ctrl + wheel zooms at the cursor; Enter: next match</span></div>
  <p class="dim legend">Boxes are kernels (blue border: memory-bound, orange: compute-bound), rows their
  nodes; &ldquo;+name&rdquo; marks a node a pass folded in.
  <span class="legend-swatch" style="border-color:#c8322d;border-top-style:dashed"></span>refused edge
  ({refused}; hover for the reason)
  <span class="legend-swatch" style="border-color:#8c93a6"></span>kernel boundary</p>
  <div id="graph-scroll"></div></section>
<section id="memory-section"><h2>Memory timeline</h2>
  <p class="dim">Each tensor in the activation arena: schedule step (x) by arena offset (y), both plans on
  one byte scale. Hover a tensor for its name.</p>
  <div id="timeline-before"></div><p class="dim" id="timeline-before-cap"></p>
  <div id="timeline-after"></div><p class="dim" id="timeline-after-cap"></p></section>
</div>
{_VELA if data.get("compare") else ""}
</main>
<footer>opfuse {esc(data["version"])} &middot; {esc(data["source"])} &middot; self-contained page, no network</footer>
"""


def render_report(data: dict[str, Any]) -> str:
    """The report page for ``data`` (from ``opfuse.report.data.report_data``)."""
    a = data["analysis"]
    title = f"opfuse report: {a['model']} on {a['target']}"
    return page(title, _CSS, _body(data), "report-data", data, _JS)


def write_report(data: dict[str, Any], path: str | Path, protect: tuple = ()) -> None:
    """Render and write by opfuse/output's rules (never over ``protect``, the input model; a
    missing or read-only folder raises OpfuseError)."""
    from opfuse.output import write_file

    write_file(path, render_report(data), protect=protect)
