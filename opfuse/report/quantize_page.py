"""The accuracy page of ``opfuse quantize --html`` (docs/quantize.md, "Accuracy report"): per
graph output SQNR, largest error and top-1 agreement against the float model, then every kernel's
SQNR ranked worst first, with a bar per kernel. Rendered here, not by script, so the figures are
in the HTML itself; one self-contained file with the report's JSON embedded (``quantize-data``),
nothing fetched (``opfuse.report.page``)."""

from __future__ import annotations

from pathlib import Path

from opfuse import __version__
from opfuse.report.page import esc, page

BAR_DB = 60.0  # a bar's full width: SQNR at or above this many dB


def db_text(db: float | str | None) -> str:
    """An SQNR as the page shows it: dB with two decimals, 'exact' when there is no error."""
    if db is None:
        return "exact"
    return db if isinstance(db, str) else f"{db:.2f}"


def _loss(db: float | str | None) -> str:
    return "-" if db is None else db_text(db)


def _bar(db: float | str | None) -> str:
    if db is None:
        width = 100.0
    elif isinstance(db, str):
        width = 0.0
    else:
        width = max(0.0, min(100.0, 100.0 * db / BAR_DB))
    return f'<td class="bar"><span style="width:{width:.1f}%"></span></td>'


def _outputs(data: dict) -> str:
    rows = []
    for o in data["outputs"]:
        top1 = "-" if o["top1_agreement"] is None else f"{100 * o['top1_agreement']:.1f}%"
        rows.append(f'<tr><td class="name">{esc(o["name"])}</td>'
                    f'<td class="num sqnr">{db_text(o["sqnr_db"])}</td>'
                    f'<td class="num maxerr">{o["max_abs_err"]:.6g}</td>'
                    f'<td class="num top1">{top1}</td></tr>')
    return ('<table class="acc" id="outputs"><thead><tr><th>output</th><th class="num">SQNR dB'
            '</th><th class="num">max |error|</th><th class="num">top-1 agreement</th></tr>'
            f'</thead><tbody>{"".join(rows)}</tbody></table>')


def _kernels(data: dict) -> str:
    kept = set(data.get("kept_float", []))
    rows = []
    for rank, k in enumerate(data["kernels"]):
        cls = " ".join(c for c, on in (("worst", rank == 0), ("kept", k["kernel"] in kept)) if on)
        flag = ' <span class="flag">constant range</span>' if k["constant_range"] else ""
        flag += ' <span class="flag">kept float</span>' if k["kernel"] in kept else ""
        rows.append(f'<tr class="{cls}"><td class="num">{rank + 1}</td>'
                    f'<td class="num index">{k["index"]}</td>'
                    f'<td class="name kernel">{esc(k["kernel"])}{flag}</td>'
                    f'<td class="name tensor">{esc(k["tensor"])}</td>'
                    f'<td class="num sqnr">{db_text(k["sqnr_db"])}</td>'
                    f'<td class="num maxerr">{k["max_abs_err"]:.6g}</td>'
                    f'<td class="num loss">{_loss(k.get("loss_db"))}</td>{_bar(k["sqnr_db"])}</tr>')
    return ('<table class="acc" id="kernels"><thead><tr><th class="num">rank</th><th class="num">'
            'kernel #</th><th>kernel</th><th>tensor it writes</th><th class="num">SQNR dB</th>'
            '<th class="num">max |error|</th><th class="num">loss dB</th><th>SQNR (bar: 0 to '
            f'{BAR_DB:g} dB)</th></tr></thead><tbody>{"".join(rows)}</tbody></table>')


def _io(data: dict) -> str:
    """With --io int8: each graph input and output with what its caller feeds or reads."""
    entries = data.get("io", [])
    if not any(e["dtype"] == "int8" for e in entries):
        return ""
    rows = "".join(
        f'<tr><td>{esc(e["role"])}</td><td class="name">{esc(e["name"])}</td>'
        f'<td>{esc(e["dtype"])}</td><td class="num scale">{e.get("scale", "-")!r}</td>'
        f'<td class="num zp">{e.get("zero_point", "-")}</td></tr>' for e in entries)
    return ('<section id="io-section"><h2>int8 inputs and outputs</h2><p class="dim">Feed q = '
            'clamp(round(x / scale) + zero point, -128, 127) (half to even); read x = scale * '
            '(q - zero point).</p><table class="acc" id="io"><thead><tr><th>role</th><th>name'
            '</th><th>type</th><th class="num">scale</th><th class="num">zero point</th></tr>'
            f'</thead><tbody>{rows}</tbody></table></section>')


def render_quantize_page(data: dict) -> str:
    """The page of ``Quantized.to_json()``."""
    ev = data["evaluation"]
    on = (f"{ev['samples']} held-out samples (the last quarter of the calibration data, not "
          "calibrated on)" if ev["held_out_split"] else f"{ev['samples']} samples of {ev['data']}")
    kept = data.get("kept_float", [])
    body = f"""
<header>
  <h1>opfuse quantize: {esc(data["model"])}</h1>
  <div class="sub">target {esc(data["target"])} &middot; {esc(data["method"])} &middot; weights
  {esc(data["weights"])} &middot; calibrated on {data["calibration"]["samples"]} samples of
  {esc(data["calibration"]["data"])} &middot; opfuse {esc(__version__)}</div>
</header>
<main>
<section id="outputs-section"><h2>Accuracy against the float model</h2>
  <p class="dim">On {esc(on)}. SQNR: signal power over error power, summed over all samples;
  top-1: the fraction of samples whose argmax agrees (classifier outputs).</p>
  {_outputs(data)}</section>
<section id="kernels-section"><h2>Kernels, worst first</h2>
  <p class="dim">The SQNR of the tensor each kernel writes against the float model's: the error
  accumulated up to it. Loss: the lowest SQNR of the activations it reads minus its output's,
  what the kernel itself loses; <code>--keep-float KERNEL</code> leaves one float between DQ and
  Q.
  {("Kept float: " + esc(", ".join(kept)) + ".") if kept else ""}</p>
  {_kernels(data)}</section>
{_io(data)}
</main>
<footer>opfuse {esc(__version__)} &middot; self-contained page, no network</footer>
"""
    return page(f"opfuse quantize: {data['model']}", ["base.css", "quantize.css"], body,
                "quantize-data", data, [])


def write_quantize_page(data: dict, path: str | Path, protect=()) -> None:  # noqa: ANN001
    from opfuse.output import write_file

    write_file(path, render_quantize_page(data), protect=tuple(p for p in protect if p))
