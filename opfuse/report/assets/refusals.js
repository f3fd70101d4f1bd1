/* Why not fused, ranked (grouped and ranked in Python: opfuse/report/refusals.py): one line per
   producer -> consumer op pair with its count, reasons and the bytes fusing it would save; the
   refusals the target's one-anchor rule makes certain sit under one collapsed line at the end. */
"use strict";
OF.refusals = function (D) {
  var host = document.getElementById("decisions"), R = D.refusals || { actionable: [], expected: [] };
  function edges(parent, list) {
    var ul = OF.html("ul", {}, null, parent);
    list.forEach(function (e) {
      var li = OF.html("li", {}, null, ul);
      OF.html("code", {}, e.producer, li);
      li.appendChild(document.createTextNode(" \u2192 "));
      OF.html("code", {}, e.consumer, li);
      OF.html("span", { "class": "dim" }, "  " + e.reason + (e.saved_bytes ? ", " + OF.bytes(e.saved_bytes) : "") +
        ": " + e.message, li);
    });
  }
  function group(parent, g, open) {
    var det = OF.html("details", { "class": "reason", "data-pair": g.producer_op + ">" + g.consumer_op,
      "data-count": String(g.count), "data-saved": String(g.saved_bytes) }, null, parent);
    det.open = open;
    var sum = OF.html("summary", {}, null, det);
    OF.html("b", {}, g.producer_op + " \u2192 " + g.consumer_op, sum);
    OF.html("span", { "class": "badge" }, "\u00d7" + g.count, sum);
    OF.html("span", { "class": "saves" }, g.saved_bytes ? "fusing saves " + OF.bytes(g.saved_bytes) : "saves nothing", sum);
    var why = Object.keys(g.reasons).map(function (r) { return r + (g.count > 1 ? " \u00d7" + g.reasons[r] : ""); });
    OF.html("span", { "class": "dim" }, " " + why.join(", "), sum);
    Object.keys(g.reasons).forEach(function (r) {
      if (D.reasons[r]) OF.html("p", { "class": "dim why" }, r + ": " + D.reasons[r], det);
    });
    edges(det, g.edges);
  }
  if (!R.actionable.length && !R.expected.length) {
    OF.html("p", {}, "Every producer-consumer edge was fused.", host);
    return;
  }
  if (!R.actionable.length) OF.html("p", {}, "Nothing to act on: every refusal is the target's one-anchor rule.", host);
  R.actionable.forEach(function (g) { group(host, g, false); });
  if (R.expected.length) {
    var count = 0, saved = 0;
    R.expected.forEach(function (g) { count += g.count; saved += g.saved_bytes; });
    var det = OF.html("details", { "class": "expected", "data-count": String(count) }, null, host);
    var sum = OF.html("summary", {}, null, det);
    OF.html("b", {}, count + " expected", sum);
    OF.html("span", { "class": "dim" }, ": a kernel holds one anchor on " + D.analysis.target + " (" +
      R.expected.map(function (g) { return g.producer_op + " \u2192 " + g.consumer_op + " \u00d7" + g.count; }).join(", ") +
      "); fusing them would save " + OF.bytes(saved) + " (only a cascade across layers can)", sum);
    R.expected.forEach(function (g) { group(det, g, false); });
  }
};
