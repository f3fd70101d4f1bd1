/* The report page: summary cards, roofline, kernel table, decisions, passes. Graph view and memory
   timeline live in graph.js and timeline.js. Every number shown is read from the embedded JSON. */
"use strict";
(function () {
  var D = OF.data("report-data"), A = D.analysis, B = A.before, F = A.after;

  function card(host, title, before, after, note, cls, raw) {
    var c = OF.html("div", { "class": "card " + (cls || ""), "data-card": title }, null, host);
    OF.html("div", { "class": "card-title" }, title, c);
    var v = OF.html("div", { "class": "card-value" }, null, c);
    if (before !== null) { OF.html("span", { "class": "was" }, before, v); v.appendChild(document.createTextNode(" \u2192 ")); }
    OF.html("span", { "class": "now", "data-value": raw === undefined ? "" : String(raw) }, after, v);
    if (note) OF.html("div", { "class": "card-note" }, note, c);
  }

  function summary() {
    var host = document.getElementById("cards");
    card(host, "kernels", String(B.kernels), String(F.kernels),
      OF.ratio(B.kernels, F.kernels) + " fewer dispatches", "", F.kernels);
    card(host, "memory traffic", OF.bytes(B.traffic_bytes), OF.bytes(F.traffic_bytes),
      OF.pct(B.traffic_bytes, F.traffic_bytes) + " \u00b7 activations " + OF.bytes(F.activation_bytes) +
      ", weights " + OF.bytes(F.weight_bytes), "", F.traffic_bytes);
    var ram = D.roofs.ram_bytes;
    card(host, "activation arena", OF.bytes(B.peak_arena_bytes), OF.bytes(F.peak_arena_bytes),
      (ram ? (F.fits ? "fits" : "does NOT fit") + " in " + OF.bytes(ram) + " RAM" : "no RAM size") +
      " \u00b7 lower bound " + OF.bytes(F.arena_lower_bound_bytes), F.fits ? "good" : "bad", F.peak_arena_bytes);
    card(host, "latency", OF.time(B.latency_s), OF.time(F.latency_s), "roofline-bound estimate", "", F.latency_s);
    card(host, "energy", OF.energy(B.energy_j), OF.energy(F.energy_j), OF.pct(B.energy_j, F.energy_j), "", F.energy_j);
    card(host, "speedup from fusion", null, OF.ratio(B.latency_s, F.latency_s),
      OF.flops(F.flops) + " per inference", "accent", B.latency_s / F.latency_s);
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
    pts.forEach(function (p) {
      var xy = chart.place([p.x, p.y]);
      var dot = OF.el("circle", { cx: xy[0], cy: xy[1], r: p.phase === "after" ? 5 : 4,
        "class": "dot " + p.phase + " " + p.k.bound }, chart.dots);
      OF.tooltip(dot, function () {
        var k = p.k;
        return (p.phase === "after" ? "after #" : "before #") + p.i + " " + k.name + "\n" +
          (k.nodes || []).join(", ") + "\n" + OF.flops(k.flops) + ", " +
          OF.bytes(k.bytes_read + k.bytes_written) + " moved\nintensity " + OF.intensity(k.arithmetic_intensity) +
          "\n" + OF.rate(p.y) + " attained, " + OF.time(k.latency_s) + "\n" + k.bound + "-bound";
      });
    });
    var skipped = (D.before_kernels || []).length + A.kernels.length - pts.length;
    var legend = document.getElementById("roofline-legend");
    legend.textContent = "Filled: after fusion (" + A.kernels.length + " kernels); hollow: before (" +
      (D.before_kernels || []).length + "). Blue: memory-bound, orange: compute-bound." +
      (skipped ? " " + skipped + " kernels without FLOPs (data movement) are not plotted." : "");
  }

  var COLS = [
    ["#", "i", null], ["kernel", "name", null], ["ops", "ops", null], ["FLOPs", "flops", OF.flops],
    ["MACs", "macs", OF.count], ["read", "bytes_read", OF.bytes], ["written", "bytes_written", OF.bytes],
    ["intensity", "arithmetic_intensity", OF.intensity], ["bound", "bound", null],
    ["latency", "latency_s", OF.time], ["share", "share", function (v) { return (v * 100).toFixed(1) + "%"; }],
    ["energy", "energy_j", OF.energy]];

  function table() {
    var rows = A.kernels.map(function (k, i) {
      var r = Object.assign({}, k);
      r.i = i; r.ops = k.ops.join("+");
      if (k.arithmetic_intensity === null) r.arithmetic_intensity = Infinity; r.share = F.latency_s > 0 ? k.latency_s / F.latency_s : 0;
      return r;
    });
    var t = document.getElementById("kernel-table"), head = OF.html("tr", {}, null, OF.html("thead", {}, null, t));
    var body = OF.html("tbody", {}, null, t), state = { key: "i", dir: 1 };
    COLS.forEach(function (c) {
      var th = OF.html("th", { "data-key": c[1], title: "sort by " + c[0] }, c[0], head);
      th.addEventListener("click", function () {
        state.dir = state.key === c[1] ? -state.dir : (typeof rows[0][c[1]] === "number" ? -1 : 1);
        state.key = c[1]; fill();
      });
    });
    function fill() {
      rows.sort(function (a, b) {
        var x = a[state.key], y = b[state.key];
        return (x < y ? -1 : x > y ? 1 : a.i - b.i) * state.dir;
      });
      body.textContent = "";
      rows.forEach(function (r) {
        var tr = OF.html("tr", { "class": r.bound }, null, body);
        COLS.forEach(function (c) {
          var v = r[c[1]];
          var td = OF.html("td", { "class": "c-" + c[1] }, c[2] ? c[2](v) : String(v), tr);
          if (c[1] === "name") td.title = r.nodes.join(", ");
        });
      });
      head.querySelectorAll("th").forEach(function (th) {
        th.className = th.getAttribute("data-key") === state.key ? (state.dir > 0 ? "asc" : "desc") : "";
      });
    }
    fill();
  }

  function decisions() {
    var host = document.getElementById("decisions"), groups = {};
    A.decisions.filter(function (d) { return !d.fused; }).forEach(function (d) {
      (groups[d.reason] = groups[d.reason] || []).push(d);
    });
    var keys = Object.keys(groups).sort(function (a, b) { return groups[b].length - groups[a].length; });
    if (!keys.length) OF.html("p", {}, "Every producer-consumer edge was fused.", host);
    keys.forEach(function (reason, n) {
      var det = OF.html("details", { "class": "reason", "data-reason": reason }, null, host);
      if (n < 2) det.open = true;
      var sum = OF.html("summary", {}, null, det);
      OF.html("b", {}, reason, sum);
      OF.html("span", { "class": "badge" }, groups[reason].length + " edges", sum);
      OF.html("span", { "class": "dim" }, " " + (D.reasons[reason] || ""), sum);
      var ul = OF.html("ul", {}, null, det);
      groups[reason].forEach(function (d) {
        var li = OF.html("li", {}, null, ul);
        OF.html("code", {}, d.producer, li);
        li.appendChild(document.createTextNode(" \u2192 "));
        OF.html("code", {}, d.consumer, li);
        OF.html("span", { "class": "dim" }, "  " + d.message, li);
      });
    });
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

  summary(); roofline(); table(); decisions(); passes();
  if (OF.graphView) OF.graphView(D);
  if (OF.timelines) OF.timelines(D);
})();
