/* The report page: deployment verdict, summary cards, three columns, roofline, passes. The kernel
   table, the refusals, the graph and the memory timeline live in kernels.js, refusals.js, graph.js
   and timeline.js. Every number shown is read from the embedded JSON. */
"use strict";
(function () {
  var D = OF.data("report-data"), A = D.analysis, B = A.before, C = A.canonical || A.before, F = A.after;

  function verdict() {
    var host = document.getElementById("verdict");
    (D.verdict || []).forEach(function (line) {
      var cls = line.ok === true ? "ok" : line.ok === false ? "bad" : "info";
      var li = OF.html("li", { "class": "v-" + cls, "data-key": line.key }, null, host);
      OF.html("span", { "class": "mark" }, line.ok === true ? "fits" : line.ok === false ? "does not fit" :
        line.key === "flash" ? "unknown" : "", li);
      OF.html("span", { "class": "text" }, line.text, li);
    });
  }

  function card(host, title, before, after, note, cls, raw) {
    var c = OF.html("div", { "class": "card " + (cls || ""), "data-card": title }, null, host);
    OF.html("div", { "class": "card-title" }, title, c);
    var v = OF.html("div", { "class": "card-value" }, null, c);
    if (before !== null) { OF.html("span", { "class": "was" }, before, v); v.appendChild(document.createTextNode(" \u2192 ")); }
    OF.html("span", { "class": "now", "data-value": raw === undefined ? "" : String(raw) }, after, v);
    if (note) OF.html("div", { "class": "card-note" }, note, c);
  }

  function summary() {
    /* cards: fusion's own gain (after canonicalization -> after fusion); folding's in the notes */
    var host = document.getElementById("cards");
    card(host, "kernels", String(C.kernels), String(F.kernels),
      "fusion " + OF.pct(C.kernels, F.kernels) + "; folding first took " + B.kernels + " \u2192 " + C.kernels, "", F.kernels);
    card(host, "memory traffic", OF.bytes(C.traffic_bytes), OF.bytes(F.traffic_bytes),
      "fusion " + OF.pct(C.traffic_bytes, F.traffic_bytes) + ", folding " + OF.pct(B.traffic_bytes, C.traffic_bytes) +
      " \u00b7 activations " + OF.bytes(F.activation_bytes) + ", weights " +
      (A.accounting === "activations-only" ? "not counted" : OF.bytes(F.weight_bytes)), "", F.traffic_bytes);
    var ram = D.roofs.ram_bytes;
    card(host, "activation arena", OF.bytes(C.peak_arena_bytes), OF.bytes(F.peak_arena_bytes),
      (ram ? (F.fits ? "fits in " : "does not fit in ") + OF.bytes(ram) + " RAM" : "no RAM size") +
      " \u00b7 lower bound " + OF.bytes(F.arena_lower_bound_bytes), F.fits ? "good" : "bad", F.peak_arena_bytes);
    card(host, "latency", OF.time(C.latency_s), OF.time(F.latency_s), "roofline-bound estimate \u00b7 imported " +
      OF.time(B.latency_s), "", F.latency_s);
    card(host, "energy", OF.energy(C.energy_j), OF.energy(F.energy_j), "fusion " + OF.pct(C.energy_j, F.energy_j) +
      ", folding " + OF.pct(B.energy_j, C.energy_j), "", F.energy_j);
    card(host, "speedup from fusion", null, OF.ratio(C.latency_s, F.latency_s),
      "with folding " + OF.ratio(B.latency_s, F.latency_s) + " \u00b7 " + OF.flops(F.flops) + " per inference",
      "accent", C.latency_s / F.latency_s);
  }

  var ROWS = [["kernels", "kernels", String], ["traffic", "traffic_bytes", OF.bytes],
    ["activation traffic", "activation_bytes", OF.bytes], ["weight traffic", "weight_bytes", OF.bytes],
    ["FLOPs", "flops", OF.flops], ["peak arena", "peak_arena_bytes", OF.bytes],
    ["latency", "latency_s", OF.time], ["energy", "energy_j", OF.energy]];

  function columns() {
    var t = document.getElementById("columns"), head = OF.html("tr", {}, null, OF.html("thead", {}, null, t));
    ["", "as imported", "after canonicalization", "after fusion", "folding", "fusion"].forEach(function (h) {
      OF.html("th", {}, h, head);
    });
    var body = OF.html("tbody", {}, null, t);
    ROWS.forEach(function (r) {
      var label = r[0] + (r[1] === "weight_bytes" && A.accounting === "activations-only" ? " (not counted)" : "");
      var tr = OF.html("tr", { "data-key": r[1] }, null, body);
      OF.html("td", { "class": "c-name" }, label, tr);
      [["before", B], ["canonical", C], ["after", F]].forEach(function (s) {
        OF.html("td", { "data-side": s[0], "data-value": String(s[1][r[1]]) }, r[2](s[1][r[1]]), tr);
      });
      var change = r[1] === "latency_s" ? function (a, b) { return OF.ratio(a, b) + " faster"; }
        : function (a, b) { return a === b ? "same" : OF.pct(a, b) || "\u2013"; };
      OF.html("td", { "class": "chg" }, change(B[r[1]], C[r[1]]), tr);
      OF.html("td", { "class": "chg" }, change(C[r[1]], F[r[1]]), tr);
    });
  }

  function roofline() {
    var host = document.getElementById("roofline");
    var pts = [];
    function add(list, phase) {
      list.forEach(function (k, i) {
        if (k.flops > 0 && k.latency_s > 0 && k.arithmetic_intensity > 0)
          pts.push({ k: k, i: i, phase: phase, x: k.arithmetic_intensity, y: k.flops / k.latency_s });
      });
    }
    add(D.before_kernels || [], "before");
    add(A.kernels, "after");
    if (!D.roofs.levels.length) { OF.html("p", { "class": "dim" }, "The target has no [perf] table.", host); return; }
    var r = OF.rooflineRange(D.roofs, pts.map(function (p) { return p.x; }), pts.map(function (p) { return p.y; }));
    var chart = OF.roofline(host, { roofs: D.roofs, precision: A.precision, x: r.x, y: r.y, width: 660, height: 420 });
    var byKernel = {};
    pts.forEach(function (p) {
      p.xy = chart.place([p.x, p.y]);
      p.dot = OF.el("circle", { cx: p.xy[0], cy: p.xy[1], r: p.phase === "after" ? 5 : 4,
        "class": "dot " + p.phase + " " + p.k.bound, "data-kernel": p.phase === "after" ? p.i : "" }, chart.dots);
      if (p.phase === "after") byKernel[p.i] = p;
    });
    function label(p) {
      var k = p.k;
      return (p.phase === "after" ? "after #" : "before #") + p.i + " " + k.name + ": " + OF.flops(k.flops) + ", " +
        OF.bytes(k.bytes_read + k.bytes_written) + ", " + OF.intensity(k.arithmetic_intensity) + ", " +
        OF.rate(p.y) + ", " + OF.time(k.latency_s) + ", " + k.bound + "-bound";
    }
    /* Dots that overlap are all reachable: hovering lists every dot within 6 px; a click selects the
       nearest kernel after fusion, and clicking the same spot again steps to the next one there. */
    function near(ev) {
      var m = chart.svg.getScreenCTM(), scale = m ? m.a : 1, out = [];
      var pt = chart.svg.createSVGPoint(); pt.x = ev.clientX; pt.y = ev.clientY;
      var q = m ? pt.matrixTransform(m.inverse()) : pt;
      pts.forEach(function (p) {
        var d = Math.hypot(p.xy[0] - q.x, p.xy[1] - q.y) * scale;
        if (d <= 6) out.push({ p: p, d: d });
      });
      return out.sort(function (a, b) { return a.d - b.d || (a.p.phase === "after" ? -1 : 1); }).map(function (o) { return o.p; });
    }
    var cycle = { key: "", n: 0 };
    chart.svg.addEventListener("mousemove", function (ev) {
      var hits = near(ev);
      if (!hits.length) { OF.hideTip(); return; }
      OF.showTip(ev, (hits.length > 1 ? hits.length + " kernels here (click steps through them):\n" : "") +
        hits.slice(0, 12).map(label).join("\n") + (hits.length > 12 ? "\n\u2026 and " + (hits.length - 12) + " more" : ""));
    });
    chart.svg.addEventListener("mouseleave", OF.hideTip);
    chart.svg.addEventListener("click", function (ev) {
      var hits = near(ev).filter(function (p) { return p.phase === "after"; });
      if (!hits.length) return;
      var key = hits.map(function (p) { return p.i; }).join(",");
      cycle.n = key === cycle.key ? (cycle.n + 1) % hits.length : 0; cycle.key = key;
      OF.select(hits[cycle.n].i, "roofline");
    });
    OF.onSelect(function (i) {
      pts.forEach(function (p) { p.dot.classList.remove("selected"); });
      if (byKernel[i]) { byKernel[i].dot.classList.add("selected"); chart.dots.appendChild(byKernel[i].dot); }
    });
    var skipped = (D.before_kernels || []).length + A.kernels.length - pts.length;
    document.getElementById("roofline-legend").textContent = "Filled: after fusion (" + A.kernels.length +
      " kernels); hollow: as imported (" + (D.before_kernels || []).length + "). Blue: memory-bound, orange: " +
      "compute-bound. Click a dot to select its kernel. Bandwidth in GB/s (10\u2079 B/s)." +
      (skipped ? " " + skipped + " kernels without FLOPs (data movement) are not plotted." : "");
  }

  function passes() {
    var host = document.getElementById("passes"), P = A.passes || {};
    var fired = Object.keys(P).filter(function (k) { return P[k] > 0; }).sort(function (a, b) { return P[b] - P[a]; });
    var idle = Object.keys(P).filter(function (k) { return !(P[k] > 0); }).sort();
    var max = Math.max.apply(null, fired.map(function (k) { return P[k]; }).concat([1]));
    if (!fired.length) OF.html("p", {}, "No canonicalization pass fired on this model.", host);
    fired.forEach(function (k) {
      var row = OF.html("div", { "class": "pass" }, null, host);
      OF.html("code", {}, k, row);
      var bar = OF.html("span", { "class": "bar" }, null, row);
      bar.style.width = Math.max(4, 160 * P[k] / max) + "px";
      OF.html("span", { "class": "num" }, "\u00d7" + P[k], row);
    });
    if (idle.length) OF.html("p", { "class": "dim idle" }, "Did not fire: " + idle.join(", "), host.parentNode);
  }

  verdict(); summary(); columns(); roofline(); passes();
  if (OF.kernelTable) OF.kernelTable(D);
  if (OF.refusals) OF.refusals(D);
  if (OF.graphView) OF.graphView(D);
  if (OF.timelines) OF.timelines(D);
})();
