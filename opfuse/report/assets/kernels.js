/* The kernel table: sortable, a click on a row selects the kernel in every view, and a CSV of the
   raw figures built here (a download from a Blob: no network). */
"use strict";
OF.kernelTable = function (D) {
  var A = D.analysis, F = A.after;
  var COLS = [
    ["#", "i", null], ["kernel", "name", null], ["ops", "ops", null], ["FLOPs", "flops", OF.flops],
    ["MACs", "macs", OF.count], ["read", "bytes_read", OF.bytes], ["written", "bytes_written", OF.bytes],
    ["intensity", "arithmetic_intensity", OF.intensity], ["bound", "bound", null],
    ["latency", "latency_s", OF.time], ["share", "share", function (v) { return (v * 100).toFixed(1) + "%"; }],
    ["energy", "energy_j", OF.energy]];
  var rows = A.kernels.map(function (k, i) {
    var r = Object.assign({}, k);
    r.i = i; r.ops = k.ops.join("+");
    if (k.arithmetic_intensity === null) r.arithmetic_intensity = Infinity;
    r.share = F.latency_s > 0 ? k.latency_s / F.latency_s : 0;
    return r;
  });
  var t = document.getElementById("kernel-table"), head = OF.html("tr", {}, null, OF.html("thead", {}, null, t));
  var body = OF.html("tbody", {}, null, t), state = { key: "i", dir: 1 }, selected = -1;
  COLS.forEach(function (c) {
    var th = OF.html("th", { "data-key": c[1], "class": "c-" + c[1], title: "sort by " + c[0] }, c[0], head);
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
      var tr = OF.html("tr", { "class": r.bound + (r.i === selected ? " selected" : ""), "data-kernel": r.i }, null, body);
      COLS.forEach(function (c) {
        var v = r[c[1]];
        var td = OF.html("td", { "class": "c-" + c[1] }, c[2] ? c[2](v) : String(v), tr);
        if (c[1] === "name") td.title = r.nodes.join(", ");
      });
      tr.addEventListener("click", function () { OF.select(r.i, "table"); });
    });
    head.querySelectorAll("th").forEach(function (th) {
      th.classList.toggle("asc", th.getAttribute("data-key") === state.key && state.dir > 0);
      th.classList.toggle("desc", th.getAttribute("data-key") === state.key && state.dir < 0);
    });
  }
  fill();
  OF.onSelect(function (i, from) {
    selected = i;
    body.querySelectorAll("tr.selected").forEach(function (tr) { tr.classList.remove("selected"); });
    var tr = body.querySelector('tr[data-kernel="' + i + '"]');
    if (!tr) return;
    tr.classList.add("selected");
    if (from !== "table") {  /* scroll inside the table's box only, not the page */
      var wrap = tr.closest(".table-wrap");
      if (wrap) wrap.scrollTop = tr.offsetTop - wrap.clientHeight / 2;
    }
  });

  /* A text cell that a spreadsheet would read as a formula (= + - @, or a tab or CR first) gets a
     leading ' and quotes, as OWASP's CSV-injection guidance says; numbers stay numbers. */
  function csvCell(v) {
    var s = v === null || v === undefined ? "" : String(v);
    if (typeof v !== "number" && /^[=+\-@\t\r]/.test(s)) s = "'" + s;
    return /[",\n\r']/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s;
  }
  var KEYS = ["name", "ops", "nodes", "flops", "macs", "bytes_read", "bytes_written", "arithmetic_intensity",
    "bound", "latency_s", "energy_j", "kernel_class", "efficiency"];
  function csv() {
    var lines = [["index"].concat(KEYS).join(",")];
    A.kernels.forEach(function (k, i) {
      lines.push([i].concat(KEYS.map(function (key) {
        var v = k[key];
        return csvCell(Array.isArray(v) ? v.join(key === "ops" ? "+" : " ") : v);
      })).join(","));
    });
    return lines.join("\n") + "\n";
  }
  OF.kernelCsv = csv;
  var button = document.getElementById("kernel-csv");
  if (button) button.addEventListener("click", function () {
    OF.download(A.model.replace(/[^\w.-]+/g, "_") + "-" + A.target + "-kernels.csv", csv(), "text/csv");
  });
};
