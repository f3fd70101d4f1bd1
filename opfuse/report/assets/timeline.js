/* The memory timelines: each tensor of the arena a rectangle, schedule step (x) by arena offset (y),
   before and after fusion on one byte scale, with the peak, the lower bound and the target's RAM. */
"use strict";
OF.timelines = function (D) {
  var M = D.memory, ram = D.roofs.ram_bytes;
  var top = Math.max(M.before.peak_bytes, M.after.peak_bytes, 1);
  if (ram && ram < top * 1.15) top = Math.max(top, ram);
  ["before", "after"].forEach(function (phase) {
    var P = M[phase], host = document.getElementById("timeline-" + phase);
    if (!host) return;
    var W = 760, H = 250, m = { l: 70, r: 16, t: 14, b: 34 };
    var svg = OF.el("svg", { viewBox: "0 0 " + W + " " + H, "class": "timeline" }, host);
    var steps = Math.max(P.steps, 1);
    function sx(s) { return m.l + s / steps * (W - m.l - m.r); }
    function sy(b) { return H - m.b - b / top * (H - m.t - m.b); }
    var pat = OF.el("pattern", { id: "tl-ring-" + phase, width: 6, height: 6, patternUnits: "userSpaceOnUse",
      patternTransform: "rotate(45)" }, OF.el("defs", {}, svg));  /* ring buffers: hatched */
    OF.el("rect", { width: 6, height: 6, "class": "ring-bg" }, pat);
    OF.el("line", { x1: 0, y1: 0, x2: 0, y2: 6, "class": "ring-hatch" }, pat);
    var grid = OF.el("g", { "class": "grid" }, svg);
    for (var i = 0; i <= 4; i++) {
      var b = top * i / 4;
      OF.el("line", { x1: m.l, x2: W - m.r, y1: sy(b), y2: sy(b) }, grid);
      OF.el("text", { x: m.l - 6, y: sy(b) + 4, "text-anchor": "end" }, grid).textContent = OF.bytes(Math.round(b));
    }
    var every = Math.max(1, Math.ceil(steps / 12));
    for (var s = 0; s < steps; s += every) {
      OF.el("text", { x: sx(s + 0.5), y: H - m.b + 14, "text-anchor": "middle" }, grid).textContent = String(s);
    }
    OF.el("text", { x: (m.l + W - m.r) / 2, y: H - 4, "text-anchor": "middle", "class": "axis" }, svg)
      .textContent = "schedule step (kernel) \u2014 " + phase + " fusion, " + P.steps + " steps";
    P.tensors.forEach(function (t, j) {
      var name = t[0], off = t[1], size = t[2], first = t[3], last = t[4], kind = t[5];
      var y0 = sy(off + size), y1 = sy(off);
      var r = OF.el("rect", { x: sx(first) + 0.5, y: y0, width: Math.max(1.5, sx(last + 1) - sx(first) - 1),
        height: Math.max(1, y1 - y0), "class": "tensor " + kind }, svg);
      r.style.fill = kind === "ring" ? "url(#tl-ring-" + phase + ")"
        : "hsl(" + ((j * 47) % 360) + ",55%," + (kind === "intermediate" ? 62 : 45) + "%)";
      OF.tooltip(r, function () {
        return name + " (" + (kind === "ring" ? "ring buffer of a cascade: only the rows its reader's window needs" : kind) + ")\n" + OF.bytes(size) + " at offset " + OF.bytes(off) +
          "\nlive steps " + first + "\u2013" + last + (P.aliases[name] ? "\nin place over " + P.aliases[name] : "");
      });
    });
    function hline(v, cls, label) {
      if (v > top * 1.001) return;
      OF.el("line", { x1: m.l, x2: W - m.r, y1: sy(v), y2: sy(v), "class": cls }, svg);
      OF.el("text", { x: W - m.r - 4, y: sy(v) - 4, "text-anchor": "end", "class": "tl-label " + cls }, svg)
        .textContent = label;
    }
    hline(P.peak_bytes, "tl-peak", "arena " + OF.bytes(P.peak_bytes));
    if (P.lower_bound_bytes < P.peak_bytes * 0.97) hline(P.lower_bound_bytes, "tl-lb", "lower bound " + OF.bytes(P.lower_bound_bytes));
    if (ram) hline(ram, "tl-ram", "target RAM " + OF.bytes(ram));
    var peak = phase === "after" && D.analysis.deployment ? D.analysis.deployment.peak : null;
    if (peak && peak.step >= 0) {  /* the step the verdict names: most bytes live at once */
      var px = sx(peak.step + 0.5);
      OF.el("line", { x1: px, x2: px, y1: m.t, y2: H - m.b, "class": "tl-step" }, svg);
      OF.el("text", { x: px + 4, y: m.t + 10, "class": "tl-step" }, svg).textContent =
        "peak step " + peak.step + ": " + OF.bytes(peak.live_bytes) + " live";
    }
    if (phase === "after") {  /* the kernel selected in another view: its step */
      var mark = OF.el("rect", { y: m.t, height: H - m.t - m.b, width: Math.max(2, sx(1) - sx(0)),
        "class": "tl-selected", visibility: "hidden" }, svg);
      OF.onSelect(function (i) {
        mark.setAttribute("x", sx(i)); mark.setAttribute("visibility", "visible");
        mark.setAttribute("data-step", String(i));
      });
    }
    var cap = document.getElementById("timeline-" + phase + "-cap");
    var rings = P.tensors.filter(function (t) { return t[5] === "ring"; }).length;
    if (cap) cap.textContent = phase + ": arena " + OF.bytes(P.peak_bytes) + " (" + P.planner + "), lower bound " +
      OF.bytes(P.lower_bound_bytes) + ", " + P.tensors.length + " tensors" + (rings ? " (" + rings + " ring buffers, hatched)" : "") +
      (ram ? (P.peak_bytes <= ram ? ", fits " : ", exceeds ") + OF.bytes(ram) + " RAM" +
        (ram > top * 1.001 ? " (off the scale)" : "") : "");
  });
};
