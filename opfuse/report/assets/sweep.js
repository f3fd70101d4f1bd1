/* The sweep page: builds the matrix and the details from the embedded rows (opfuse/sweep/page.py).
   Every text goes in through textContent: model and file names are never parsed as HTML. */
"use strict";
(function () {
  var data = OF.data("sweep-data");
  var rows = data.rows;
  rows.forEach(function (r, i) { r._id = "row-" + i; });
  var precs = ["fp32", "fp16", "int8"].filter(function (p) {
    return rows.some(function (r) { return r.precision === p; });
  });
  rows.forEach(function (r) { if (precs.indexOf(r.precision) < 0) precs.push(r.precision); });
  var models = uniq(rows.map(function (r) { return r.model; }));
  var targets = uniq(rows.map(function (r) { return r.target; })).sort();
  var state = { prec: precs[0], col: null, dir: 1 };

  function uniq(xs) { return xs.filter(function (x, i) { return xs.indexOf(x) === i; }); }

  function cell(model, target) {
    return rows.filter(function (r) {
      return r.model === model && r.target === target && r.precision === state.prec;
    })[0];
  }

  function fitClass(r) {
    if (!r) return "skipped";
    if (r.status !== "ok") return r.status === "error" ? "error" : "skipped";
    var fits = (r.fits_ram ? 1 : 0) + (r.fits_flash === false ? 0 : 1);
    return fits === 2 ? "fit-both" : fits === 1 ? "fit-one" : "fit-none";
  }

  function latencyRange() {
    var xs = rows.filter(function (r) { return r.precision === state.prec && r.latency_s > 0; })
      .map(function (r) { return Math.log10(r.latency_s); });
    return xs.length ? [Math.min.apply(null, xs), Math.max.apply(null, xs)] : [0, 1];
  }

  function sortKey(model) {
    if (state.col === null) return model;
    var r = cell(model, state.col);
    return r && r.status === "ok" && r.latency_s !== null ? r.latency_s : null;
  }

  function ordered() {
    var ms = models.slice();
    ms.sort(function (a, b) {
      var ka = sortKey(a), kb = sortKey(b);
      if (ka === kb) return a < b ? -1 : a > b ? 1 : 0;
      if (ka === null) return 1;  /* rows without figures last, in either direction */
      if (kb === null) return -1;
      return (ka < kb ? -1 : 1) * state.dir;
    });
    return ms;
  }

  function label(r) {
    if (!r) return "\u2013";
    if (r.status === "error") return "error";
    if (r.status === "skipped") return "skipped";
    return OF.time(r.latency_s);
  }

  function tip(r) {
    if (!r) return "no row";
    if (r.status !== "ok") return r.error || r.precision_note || r.status;
    return "arena " + OF.bytes(r.peak_arena_bytes) + " of " + OF.bytes(r.ram_bytes) + " RAM; " +
      "weights " + OF.bytes(r.weight_bytes) +
      (r.flash_bytes === null ? "" : " of " + OF.bytes(r.flash_bytes) + " flash");
  }

  function header(table) {
    var tr = OF.html("tr", {}, null, OF.html("thead", {}, null, table));
    [null].concat(targets).forEach(function (t) {
      var th = OF.html("th", { "data-col": t === null ? "" : t }, t === null ? "model" : t, tr);
      if (state.col === t) th.setAttribute("aria-sort", state.dir > 0 ? "ascending" : "descending");
      th.addEventListener("click", function () {
        state.dir = state.col === t ? -state.dir : 1;
        state.col = t;
        draw();
      });
    });
  }

  function draw() {
    var table = document.getElementById("matrix");
    table.textContent = "";
    header(table);
    var body = OF.html("tbody", {}, null, table);
    var range = latencyRange();
    ordered().forEach(function (m) {
      var tr = OF.html("tr", {}, null, body);
      OF.html("td", { "class": "name", title: m }, m.split("/").pop(), tr);  /* the file name */
      targets.forEach(function (t) {
        var r = cell(m, t);
        var td = OF.html("td", { "class": fitClass(r), "data-target": t }, null, tr);
        if (r && r.status === "ok" && r.latency_s > 0) {
          var x = (Math.log10(r.latency_s) - range[0]) / Math.max(range[1] - range[0], 1e-9);
          td.style.setProperty("--l", (88 - 38 * x).toFixed(1) + "%");
        }
        var a = OF.html("a", { href: r ? "#" + r._id : "#details-section", title: tip(r) },
          label(r), td);
        if (r) a.setAttribute("data-row", r._id);
      });
    });
    Array.prototype.forEach.call(document.querySelectorAll("#precisions button"), function (b) {
      b.classList.toggle("on", b.textContent === state.prec);
    });
  }

  function details() {
    var box = document.getElementById("details");
    rows.forEach(function (r) {
      var art = OF.html("article", { id: r._id }, null, box);
      OF.html("h3", {}, r.model + " on " + r.target + " at " + r.precision + " (" + r.status + ")",
        art);
      var table = OF.html("table", {}, null, art);
      data.columns.forEach(function (c) {
        var v = r[c[0]];
        if (v === null || v === "") return;
        var tr = OF.html("tr", { title: c[1] }, null, table);
        OF.html("td", { "class": "key" }, c[0], tr);
        OF.html("td", {}, typeof v === "number" && !Number.isInteger(v) ? v.toPrecision(6) :
          String(v), tr);
      });
    });
  }

  var box = document.getElementById("precisions");
  precs.forEach(function (p) {
    var b = OF.html("button", { type: "button", id: "prec-" + p }, p, box);
    b.addEventListener("click", function () { state.prec = p; draw(); });
  });
  details();
  draw();
})();
