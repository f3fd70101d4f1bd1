/* A log-log roofline chart in SVG: the target's roofs (one slanted line per memory level, one flat
   line per precision) and points placed by the caller. Shared by the report and the explorer. */
"use strict";
OF.roofline = function (host, opt) {
  var W = opt.width || 720, H = opt.height || 420;
  var m = { l: 70, r: 20, t: 16, b: 46 };
  var svg = OF.el("svg", { viewBox: "0 0 " + W + " " + H, "class": "roofline", role: "img",
    "aria-label": "roofline chart" }, host);
  var x0 = opt.x[0], x1 = opt.x[1], y0 = opt.y[0], y1 = opt.y[1];
  function sx(v) { return m.l + (Math.log10(v) - Math.log10(x0)) / (Math.log10(x1) - Math.log10(x0)) * (W - m.l - m.r); }
  function sy(v) { return H - m.b - (Math.log10(v) - Math.log10(y0)) / (Math.log10(y1) - Math.log10(y0)) * (H - m.t - m.b); }
  function clampX(v) { return Math.min(Math.max(v, x0), x1); }
  function clampY(v) { return Math.min(Math.max(v, y0), y1); }

  var grid = OF.el("g", { "class": "grid" }, svg);
  OF.logTicks(x0, x1).forEach(function (v) {
    OF.el("line", { x1: sx(v), x2: sx(v), y1: m.t, y2: H - m.b }, grid);
    OF.el("text", { x: sx(v), y: H - m.b + 16, "text-anchor": "middle" }, grid).textContent =
      v >= 1 ? String(v) : v.toPrecision(1);
  });
  OF.logTicks(y0, y1).forEach(function (v) {
    OF.el("line", { x1: m.l, x2: W - m.r, y1: sy(v), y2: sy(v) }, grid);
    OF.el("text", { x: m.l - 6, y: sy(v) + 4, "text-anchor": "end" }, grid).textContent =
      OF.rate(v).replace("FLOP/s", "");
  });
  OF.el("text", { x: (m.l + W - m.r) / 2, y: H - 8, "text-anchor": "middle", "class": "axis" }, svg)
    .textContent = "arithmetic intensity (FLOP / byte)";
  OF.el("text", { x: 14, y: (m.t + H - m.b) / 2, "text-anchor": "middle", "class": "axis",
    transform: "rotate(-90 14 " + (m.t + H - m.b) / 2 + ")" }, svg).textContent = "attained FLOP/s";

  var roofG = OF.el("g", { "class": "roofs" }, svg);
  function drawRoofs(precision) {
    while (roofG.firstChild) roofG.removeChild(roofG.firstChild);
    var peaks = opt.roofs.peaks, levels = opt.roofs.levels;
    var peak = peaks[precision];
    var same = Object.keys(peaks).filter(function (p) { return peaks[p] === peak; });
    var others = {};
    Object.keys(peaks).forEach(function (p) {
      if (same.indexOf(p) < 0) (others[peaks[p]] = others[peaks[p]] || []).push(p);
    });
    Object.keys(others).forEach(function (v) {
      var y = sy(clampY(Number(v)));
      OF.el("line", { x1: m.l, x2: W - m.r, y1: y, y2: y, "class": "roof-other" }, roofG);
      OF.el("text", { x: W - m.r - 4, y: y - 4, "text-anchor": "end", "class": "roof-label dim" }, roofG)
        .textContent = others[v].join("/") + " peak " + OF.rate(Number(v));
    });
    if (!peak) return;
    var byBw = {};  /* levels with the same bandwidth share one line and one label */
    levels.forEach(function (lv) { (byBw[lv.read_bytes_per_s] = byBw[lv.read_bytes_per_s] || []).push(lv.name); });
    Object.keys(byBw).map(Number).sort(function (a, b) { return b - a; }).forEach(function (b, i) {
      var ridge = peak / b;
      var xa = clampX(Math.max(x0, y0 / b)), xb = clampX(ridge);
      OF.el("line", { x1: sx(xa), y1: sy(clampY(b * xa)), x2: sx(xb), y2: sy(clampY(b * xb)),
        "class": "roof-bw roof-l" + Math.min(i, 2) }, roofG);
      var lx = xa * Math.pow(10, 0.12 + 0.35 * i), ly = b * lx;
      if (ly < y1 && ly > y0 && lx < xb) {
        var ang = Math.atan2(sy(b * lx * 10) - sy(ly), sx(lx * 10) - sx(lx)) * 180 / Math.PI;
        OF.el("text", { x: sx(lx), y: sy(ly) - 6, "class": "roof-label",
          transform: "rotate(" + ang + " " + sx(lx) + " " + (sy(ly) - 6) + ")" }, roofG)
          .textContent = byBw[b].join(", ") + " " + OF.bw(b);
      }
      OF.el("line", { x1: sx(xb), x2: sx(xb), y1: sy(clampY(peak)), y2: H - m.b, "class": "ridge" }, roofG);
    });
    var yp = sy(clampY(peak));
    var firstRidge = Math.min.apply(null, levels.map(function (lv) { return peak / lv.read_bytes_per_s; }));
    OF.el("line", { x1: sx(clampX(firstRidge)), x2: W - m.r, y1: yp, y2: yp, "class": "roof-peak" }, roofG);
    OF.el("text", { x: W - m.r - 4, y: yp - 5, "text-anchor": "end", "class": "roof-label" }, roofG)
      .textContent = same.join("/") + " peak " + OF.rate(peak);
  }
  drawRoofs(opt.precision);
  var dots = OF.el("g", { "class": "dots" }, svg);
  return { svg: svg, sx: sx, sy: sy, dots: dots, drawRoofs: drawRoofs,
    place: function (v) { return [sx(clampX(v[0])), sy(clampY(v[1]))]; } };
};

/* Axis ranges that hold the points and the ridge points, padded by a factor, in decades. */
OF.rooflineRange = function (roofs, xs, ys) {
  var peaks = Object.keys(roofs.peaks).map(function (k) { return roofs.peaks[k]; });
  var bws = roofs.levels.map(function (l) { return l.read_bytes_per_s; });
  var ridges = [];
  peaks.forEach(function (p) { bws.forEach(function (b) { ridges.push(p / b); }); });
  var ax = xs.concat(ridges).filter(function (v) { return v > 0 && isFinite(v); });
  var ay = ys.concat(peaks).filter(function (v) { return v > 0 && isFinite(v); });
  function lo(a) { return Math.pow(10, Math.floor(Math.log10(Math.min.apply(null, a)) - 0.3)); }
  function hi(a) { return Math.pow(10, Math.ceil(Math.log10(Math.max.apply(null, a)) + 0.3)); }
  return { x: [lo(ax), hi(ax)], y: [lo(ay), hi(ay)] };
};
