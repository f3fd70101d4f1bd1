"""The interactive page "Operator Fusion & the Roofline Model": ``render_explorer(model)`` -> HTML.

Every number the page shows is computed here, ahead of time, by the same cost model as
``opfuse analyze``: one ``opfuse.analysis.analyze`` call per (target, precision, tensor size), each
giving the unfused ("before") and fused ("after") figures. The page only looks them up, so it can
never disagree with the CLI. For the toy pipeline (``seed_pipeline``) the tensor-size control
rebuilds the model at each size (``opfuse.models.sized``); other models have one size.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import opfuse
from opfuse.compiled import CompileResult
from opfuse.cost.precision import model_precision
from opfuse.errors import OpfuseError
from opfuse.ir.provenance import source_map
from opfuse.models.sized import DEFAULT_SIZE, SIZES, write_sized
from opfuse.pipeline import compile_model
from opfuse.report.data import roofs
from opfuse.report.explorer_lane import lanes, op_elements
from opfuse.report.page import esc, page
from opfuse.safe_text import for_terminal
from opfuse.targets import list_targets, load_target

TOY = "seed_pipeline"
PRECISIONS = ("int8", "fp16", "fp32")
PLANNER = "greedy-inplace"
STRIP_PAGE = 10  # operators drawn in the pipeline strip at a time (the page pages through all)
_CSS = ["base.css", "explorer.css"]
_JS = ["common.js", "roofline.js", "explorer_strip.js", "explorer.js"]


def figures(side: dict[str, Any], kernels: list[dict[str, Any]], dep: dict[str, Any]) -> dict[str, Any]:
    """The readouts of one side (before or after) of an analysis, from its JSON. The verdict is the
    per-kernel rule applied to the whole schedule (``opfuse.cost.summary.TimeSplit.bound``:
    memory-bound when its intensity is below its ridge point); the share of time spent in
    memory-bound kernels is given beside it, as the latency-weighted view."""
    flops, traffic, latency = side["flops"], side["traffic_bytes"], side["latency_s"]
    split = dep["time"]
    return {
        "traffic_bytes": traffic,
        "flops": flops,
        "latency_s": latency,
        "energy_j": side["energy_j"],
        "kernels": side["kernels"],
        "arena_bytes": side["peak_arena_bytes"],
        "fits": side["fits"],
        "intensity": flops / traffic if traffic else 0.0,
        "throughput": flops / latency if latency else 0.0,
        "verdict": split["bound"],
        "ridge_point": split["ridge_point"],
        "memory_kernels": split["memory_bound_kernels"],
        "memory_share": split["memory_bound_share"],
        "bounds": [k["bound"] for k in kernels],
    }


def analyze_config(result: CompileResult, precision: str) -> dict[str, Any]:
    """Both sides of one configuration, exactly as ``opfuse analyze --json`` reports them, with
    each side's deployment verdict (``opfuse.report.verdict``)."""
    from opfuse.analysis import analyze
    from opfuse.report.figures import before_kernels
    from opfuse.report.verdict import deployment_lines

    analysis = analyze(result, precision=precision, planner=PLANNER)
    summary = analysis.to_json()
    before = before_kernels(analysis)
    dep_off, dep_on = analysis.deployment_json("before"), summary["deployment"]
    out = {
        "off": figures(summary["before"], before, dep_off),
        "on": figures(summary["after"], summary["kernels"], dep_on),
        "verdict": {
            "off": deployment_lines(dep_off, analysis.target, summary["accounting"]),
            "on": deployment_lines(dep_on, analysis.target, summary["accounting"]),
        },
    }
    if result.partition.cascades:  # the cascade toggle: fused, layer by layer
        layer = analyze(result, precision=precision, planner=PLANNER, cascades=False)
        ls = layer.to_json()
        out["layer"] = figures(ls["after"], ls["kernels"], ls["deployment"])
        out["verdict"]["layer"] = deployment_lines(ls["deployment"], layer.target, ls["accounting"])
    return out


def _groups(result: CompileResult, strip: list[str]) -> list[list[int]]:
    """For each fused kernel, the indices of the strip's operators it runs."""
    index = {name: i for i, name in enumerate(strip)}
    sources = source_map(result.optimized)
    out = []
    for kernel in result.partition.kernels:
        members = sorted(
            {index[s] for n in kernel.nodes for s in sources.get(n, [n]) if s in index}
        )
        if members:
            out.append(members)
    return out


def _results(model_source: str, folder: Path,
             chosen: str | None = None) -> dict[int, dict[str, CompileResult]]:
    """Compile each size (the toy only) for each target (and ``chosen``, a target file's
    path, when it is none of the built-ins): {size: {target: result}}."""
    names = list_targets()
    targets = [load_target(t) for t in names]
    if chosen is not None and chosen not in names:
        targets.append(load_target(chosen))
    targets = [t for t in targets if t.perf is not None]
    if not targets:
        raise OpfuseError("no target has a [perf] table; the explorer needs the cost model")
    sizes = SIZES if model_source == TOY else (0,)
    out: dict[int, dict[str, CompileResult]] = {}
    for size in sizes:
        source: str | Path = model_source
        if model_source == TOY and size != DEFAULT_SIZE:
            source = write_sized(size, folder)
        out[size] = {t.name: compile_model(source, t) for t in targets}
    return out


def explorer_data(model_source: str = TOY, target: str | None = None) -> dict[str, Any]:
    """The precomputed table the explorer page looks up; it opens on ``target`` (default: the
    seeds' npu-generic; for a model whose precision npu-generic does not run, the first target
    that runs it) at the model's own precision where that target runs it."""
    # the sized models' files must outlive the analyses: a result re-imports its source lazily
    with tempfile.TemporaryDirectory(prefix="opfuse-explorer-") as tmp:
        results = _results(model_source, Path(tmp), target)
        return _explorer_data(model_source, results,
                              None if target is None else load_target(target).name)


def _explorer_data(
    model_source: str, results: dict[int, dict[str, CompileResult]], opening: str | None = None
) -> dict[str, Any]:
    first = next(iter(next(iter(results.values())).values()))
    strip_nodes = list(first.original.graph)
    strip = [n.name for n in strip_nodes]
    index = {name: i for i, name in enumerate(strip)}
    targets: dict[str, Any] = {}
    configs: dict[str, Any] = {}
    groups: dict[str, Any] = {}
    writes: dict[str, Any] = {}
    elements: dict[int, list[int]] = {}
    for size, by_target in results.items():
        elements[size] = op_elements(list(next(iter(by_target.values())).original.graph))
        for name, result in by_target.items():
            groups[f"{name}|{size}"] = _groups(result, strip)
            writes[f"{name}|{size}"] = lanes(result, index)
            ok = []
            for precision in PRECISIONS:
                if precision not in result.target.precisions:
                    continue
                try:
                    configs[f"{name}|{precision}|{size}"] = analyze_config(result, precision)
                except OpfuseError:
                    continue
                ok.append(precision)
            targets[name] = {
                "description": result.target.description,
                "precisions": ok,
                "roofs": roofs(result),
            }
    targets = {k: v for k, v in targets.items() if v["precisions"]}
    if opening is not None and opening not in targets:
        raise OpfuseError(f"--target {opening}: the explorer has no figures for it (no precision "
                          "of the model runs there)")
    own = model_precision(first.original)
    default_target = opening or _opening_target(targets, None if model_source == TOY else own)
    runs = targets[default_target]["precisions"]
    return {
        "model": model_source,
        "toy": model_source == TOY,
        "sizes": list(results),
        "ops": [{"name": n.name, "op": n.op_type} for n in strip_nodes],
        "page_ops": STRIP_PAGE,
        "elements": elements,
        "targets": targets,
        "groups": groups,
        "writes": writes,
        "configs": configs,
        "default": {
            "target": default_target,
            "precision": own if own in runs else runs[0],  # a float model opens on fp32
            "size": DEFAULT_SIZE if model_source == TOY else 0,
            "fused": True,
            "cascades": True,
        },
        "version": opfuse.__version__,
    }


def _opening_target(targets: dict[str, Any], own: str | None) -> str:
    """npu-generic when it runs the model's own precision (``own``; None: the seeds' toy, which
    opens there), else the first target that does (a float model would open on npu-generic's
    int8, a what-if), else npu-generic."""
    order = sorted(targets, key=lambda name: name != "npu-generic")
    return next((n for n in order if own is None or own in targets[n]["precisions"]), order[0])


def _body(data: dict[str, Any]) -> str:
    sizes = "".join(f'<option value="{s}">{s} &times; {s}</option>' for s in data["sizes"])
    hardware = "".join(f'<option value="{esc(t)}">{esc(t)}</option>' for t in data["targets"])
    precisions = "".join(f'<button data-precision="{p}">{p.upper()}</button>' for p in PRECISIONS)
    size_ctl = (
        f'<label>tensor size <select id="size">{sizes}</select></label>' if data["toy"] else ""
    )
    return f"""
<header><h1>Operator Fusion &amp; the Roofline Model</h1>
<div class="sub">{esc(data["model"])} &middot; every number from opfuse's cost model
(opfuse analyze), precomputed for each setting &middot; works offline</div></header>
<main>
<section class="controls">
  <div class="seg" id="fusion"><span class="lbl">fusion</span><button data-fused="1">ON</button>
  <button data-fused="0">OFF</button></div>
  <div class="seg" id="cascades" title="Stream rows through chains of kernels (ring buffers)">
  <span class="lbl">cascades</span><button data-cascades="1">ON</button>
  <button data-cascades="0">OFF</button></div>
  <div class="seg" id="precision"><span class="lbl">precision</span>{precisions}</div>
  <label>hardware <select id="hardware">{hardware}</select></label>
  {size_ctl}
  <span class="dim" id="hw-desc"></span>
</section>
<section id="ex-verdict-section"><h2>Does it deploy?</h2><ul id="ex-verdict"></ul>
  <p class="dim">For the setting above, fused or not. Sizes in KiB/MiB (1024 B), bandwidth in GB/s
  (10<sup>9</sup> B/s).</p></section>
<section><h2>Pipeline</h2>
  <div class="strip-nav"><button id="strip-prev" title="earlier operators">&#9664;</button>
  <span id="strip-range"></span><button id="strip-next" title="later operators">&#9654;</button>
  <label>find <input id="strip-find" type="search" placeholder="operator name or type"
  autocomplete="off"></label><span class="dim" id="strip-found"></span></div>
  <canvas id="strip" height="240"></canvas>
  <p class="dim" id="strip-note"></p></section>
<div class="ex-two">
<section><h2>Readouts</h2><div id="readouts" class="readouts"></div></section>
<section><h2>Roofline</h2><div id="ex-roofline"></div>
  <p class="dim">Solid dot: this configuration; faint dot: the same with fusion flipped.</p></section>
</div>
</main>
<footer>opfuse {esc(data["version"])} &middot; self-contained page, no network</footer>
"""


def render_explorer(model_source: str = TOY, target: str | None = None) -> str:
    """The explorer page for ``model_source`` (a built-in name or a model path)."""
    data = explorer_data(model_source, target)
    return page(
        "Operator Fusion & the Roofline Model", _CSS, _body(data), "explorer-data", data, _JS
    )


def write_explorer(model_source: str, path: str | Path, protect: tuple = (),
                   target: str | None = None) -> None:
    """Render and write by opfuse/output's rules (never over ``protect``, the input model; a
    missing or read-only folder raises OpfuseError)."""
    from opfuse.output import write_file

    write_file(path, render_explorer(model_source, target), protect=protect)


def check_port(port: int) -> int:
    if not 0 <= port <= 65535:
        raise OpfuseError(f"--port {port}: must be 0 (any free port) to 65535")
    return port


def page_server(path: str | Path, port: int = 8000) -> Any:
    """An HTTP server on 127.0.0.1:``port`` (0: any free port) that answers GET and HEAD for ``/``
    and ``/NAME`` (the page's file name) with the page, and 404 for every other path: no directory
    listing, no other file of the page's folder. The page is read once, now. A request whose Host
    is not ``127.0.0.1:PORT`` or ``localhost:PORT`` gets 421: a page of another site that has
    pointed its own name at 127.0.0.1 (DNS rebinding) cannot read this one."""
    import http.server

    check_port(port)
    file = Path(path).resolve()
    body = file.read_bytes()
    paths = {"/", f"/{file.name}"}

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self, send_body: bool) -> None:
            bound = self.server.server_address[1]
            hosts = {f"127.0.0.1:{bound}", f"localhost:{bound}"}
            if bound == 80:  # a browser leaves the default port out
                hosts |= {"127.0.0.1", "localhost"}
            if (self.headers.get("Host") or "").lower() not in hosts:
                self.send_error(421, "Misdirected Request", "this server answers only to "
                                f"127.0.0.1:{bound} and localhost:{bound}")
                return
            if self.path.split("?", 1)[0] not in paths:
                self.send_error(404, "not found")
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            if send_body:
                self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            self._answer(True)

        def do_HEAD(self) -> None:  # noqa: N802
            self._answer(False)

        def log_message(self, fmt: str, *args: Any) -> None:
            pass

    try:
        return http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    except OSError as exc:  # busy (EADDRINUSE), or a privileged port
        raise OpfuseError(f"--port {port}: cannot listen on 127.0.0.1:{port}: "
                          f"{exc.strerror or exc}") from None


def serve(path: str | Path, port: int = 8000) -> None:  # pragma: no cover (blocks)
    """Serve the page ``path`` (and nothing else) on 127.0.0.1:``port`` until interrupted (the page
    needs no server; this is for a remote shell with a forwarded port)."""
    with page_server(path, port) as httpd:
        name = Path(path).name
        print(f"serving http://127.0.0.1:{httpd.server_address[1]}/{for_terminal(name)} "
              "(ctrl-c stops)", flush=True)
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            pass
