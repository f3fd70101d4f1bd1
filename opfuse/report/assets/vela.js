/* opfuse vs Vela (analyze --compare vela): the rows and totals of opfuse/cost/compare.py, laid out
   as one table; the section stays hidden when the report has no comparison. */
"use strict";
(function () {
  var D = OF.data("report-data"), C = D.compare, sec = document.getElementById("vela-section");
  if (!sec) return;
  if (!C) { sec.hidden = true; return; }
  function err(e) { return e === null || e === undefined ? "-" : (e >= 0 ? "+" : "") + (100 * e).toFixed(0) + "%"; }
  function names(list) { return list.length ? list.join(", ") : "-"; }
  var cfg = C.vela_config || {};
  document.getElementById("vela-config").textContent = "Vela: " + [cfg.accelerator, cfg.system_config,
    cfg.memory_mode].join(", ") + ". error = (opfuse - Vela) / Vela over the rows Vela runs on its NPU " +
    "(CPU: an operator Vela leaves to the CPU); arena live: our planned arena bytes live " +
    "while the row runs; Vela SRAM: its staging usage (total: \u201cTotal SRAM used\u201d).";
  var t = document.getElementById("vela-table");
  var head = OF.html("tr", {}, null, OF.html("thead", {}, null, t));
  ["TFLite op", "opfuse kernels", "Vela operator", "Vela passes", "opfuse", "Vela", "error", "arena live",
    "Vela SRAM"].forEach(function (h) { OF.html("th", {}, h, head); });
  var body = OF.html("tbody", {}, null, t);
  function row(cells, cls) {
    var tr = OF.html("tr", cls ? { "class": cls } : {}, null, body);
    cells.forEach(function (c) { OF.html("td", {}, String(c), tr); });
  }
  C.rows.forEach(function (r) {
    row([r.tflite_ops.join(",") || "-", names(r.kernels), names(r.vela_layers), r.vela_passes,
      OF.time(r.opfuse_s), r.vela_cpu ? "CPU" : OF.time(r.vela_s), r.vela_cpu ? "-" : err(r.error),
      OF.bytes(r.opfuse_live_bytes),
      OF.bytes(r.vela_staging_bytes)]);
  });
  var T = C.total;
  row(["total", T.opfuse_kernels + " kernels", T.vela_passes + " Vela passes", "", OF.time(T.opfuse_s),
    OF.time(T.vela_summary_s), err(T.error), OF.bytes(T.opfuse_arena_bytes), OF.bytes(T.vela_sram_bytes)], "total");
  if (C.rows.some(function (r) { return r.vela_cpu; }))
    row(["on NPU", "rows Vela runs", T.vela_npu_passes + " NPU ops", "", OF.time(T.opfuse_npu_s),
      OF.time(T.vela_summary_s), err(T.error), OF.bytes(T.opfuse_npu_arena_bytes),
      OF.bytes(T.vela_sram_bytes)], "total");
  if (T.nothing_on_npu)
    document.getElementById("vela-config").textContent += " Vela runs none of this model\u2019s " +
      "operators on its NPU (the NPU takes int8 and int16 tensors; a float model stays on the " +
      "CPU): there is nothing to compare. Quantize the model first (opfuse quantize).";
})();
