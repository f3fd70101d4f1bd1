/* The explorer: controls -> a key into the precomputed configurations -> readouts, strip, roofline.
   No figure is computed here beyond a lookup; data-value attributes hold the raw numbers. */
"use strict";
(function () {
  var D = OF.data("explorer-data"), S = Object.assign({}, D.default);
  var strip = OF.strip(document.getElementById("strip"));
  var chart = null, chartTarget = null, dots = null, shown = null;

  function cfg() { return D.configs[S.target + "|" + S.precision + "|" + S.size]; }
  /* the fused side: with cascades (the partition analyze reports) or layer by layer, when the
     configuration has cascades at all */
  function fusedKey(c) { return !S.cascades && c.layer ? "layer" : "on"; }
  function side(c, fused) { return fused ? c[fusedKey(c)] : c.off; }

  var RO = [
    ["traffic", "memory traffic", "traffic_bytes", OF.bytes],
    ["intensity", "arithmetic intensity", "intensity", OF.intensity],
    ["throughput", "achieved throughput", "throughput", OF.rate],
    ["latency", "latency", "latency_s", OF.time],
    ["verdict", "roofline verdict", "verdict", function (v) { return v + "-bound"; }],
    ["speedup", "speedup from fusion", null, null],
    ["kernels", "kernels (dispatches)", "kernels", String],
    ["energy", "energy", "energy_j", OF.energy]];

  function readouts() {
    var host = document.getElementById("readouts"), c = cfg(), cur = side(c, S.fused),
      other = side(c, !S.fused);
    host.textContent = "";
    RO.forEach(function (r) {
      var box = OF.html("div", { "class": "ro", id: "ro-" + r[0] }, null, host);
      OF.html("div", { "class": "t" }, r[1], box);
      var raw, text, note;
      if (r[0] === "speedup") {
        var f = side(c, true);
        raw = c.off.latency_s / f.latency_s; text = raw.toFixed(2) + "x"; box.classList.add("speed");
        note = "latency unfused " + OF.time(c.off.latency_s) + " / fused " + OF.time(f.latency_s);
      } else {
        raw = cur[r[2]]; text = r[3](raw);
        note = "fusion " + (S.fused ? "off" : "on") + ": " + r[3](other[r[2]]);
        if (r[0] === "verdict") {  /* the per-kernel rule on the whole schedule; latency-weighted beside it */
          box.classList.add(raw);
          box.setAttribute("data-intensity", String(cur.intensity));
          box.setAttribute("data-ridge", String(cur.ridge_point));
          note = OF.intensity(cur.intensity) + (raw === "memory" ? " below" : " at or above") + " the ridge " +
            OF.intensity(cur.ridge_point) + " (per-kernel rule on the whole schedule); " + cur.memory_kernels +
            " of " + cur.kernels + " kernels memory-bound, " + (cur.memory_share * 100).toFixed(1) +
            "% of the time (latency-weighted); " + note;
        }
      }
      OF.html("div", { "class": "v", "data-value": String(raw) }, text, box);
      OF.html("div", { "class": "n" }, note, box);
    });
  }

  function verdict() {
    var c = cfg(), host = document.getElementById("ex-verdict"), lines = c.verdict[S.fused ? fusedKey(c) : "off"];
    host.textContent = "";
    lines.forEach(function (line) {
      var cls = line.ok === true ? "ok" : line.ok === false ? "bad" : "info";
      var li = OF.html("li", { "class": "v-" + cls, "data-key": line.key }, null, host);
      OF.html("span", { "class": "mark" }, line.ok === true ? "fits" : line.ok === false ? "does not fit" :
        line.key === "flash" ? "unknown" : "", li);
      OF.html("span", { "class": "text" }, line.text, li);
    });
  }

  function buildChart() {
    var host = document.getElementById("ex-roofline"), T = D.targets[S.target], xs = [], ys = [];
    Object.keys(D.configs).forEach(function (k) {
      if (k.split("|")[0] !== S.target) return;
      ["on", "off", "layer"].forEach(function (f) {
        if (D.configs[k][f]) { xs.push(D.configs[k][f].intensity); ys.push(D.configs[k][f].throughput); }
      });
    });
    host.textContent = "";
    var r = OF.rooflineRange(T.roofs, xs, ys);
    chart = OF.roofline(host, { roofs: T.roofs, precision: S.precision, x: r.x, y: r.y, width: 640, height: 400 });
    dots = { flip: OF.el("circle", { r: 7, "class": "dot-flip" }, chart.dots),
      now: OF.el("circle", { r: 8, "class": "dot-now" }, chart.dots),
      label: OF.el("text", { "class": "dot-label" }, chart.dots) };
    chartTarget = S.target; shown = null;
  }

  var goal = null;
  function roof() {
    if (chartTarget !== S.target) buildChart(); else chart.drawRoofs(S.precision);
    var c = cfg(), cur = side(c, S.fused), other = side(c, !S.fused);
    goal = { now: chart.place([cur.intensity, cur.throughput]), flip: chart.place([other.intensity, other.throughput]) };
    dots.now.setAttribute("class", "dot-now " + cur.verdict);
    dots.label.textContent = (S.fused ? "fused" : "unfused") + ", " + S.precision;
    if (!shown) shown = { now: goal.now.slice(), flip: goal.flip.slice() };
  }
  function animate() {
    if (goal && shown) {
      ["now", "flip"].forEach(function (k) {
        shown[k][0] += (goal[k][0] - shown[k][0]) * 0.18; shown[k][1] += (goal[k][1] - shown[k][1]) * 0.18;
        dots[k].setAttribute("cx", shown[k][0]); dots[k].setAttribute("cy", shown[k][1]);
      });
      dots.label.setAttribute("x", shown.now[0] + 11); dots.label.setAttribute("y", shown.now[1] + 18);
    }
    requestAnimationFrame(animate);
  }

  function controls() {
    var T = D.targets[S.target];
    if (T.precisions.indexOf(S.precision) < 0) S.precision = T.precisions[0];
    document.querySelectorAll("#fusion button").forEach(function (b) {
      b.classList.toggle("on", (b.getAttribute("data-fused") === "1") === S.fused);
    });
    var casc = !!cfg().layer;  /* the toggle applies when this configuration has cascades */
    document.querySelectorAll("#cascades button").forEach(function (b) {
      b.disabled = !casc || !S.fused;
      b.title = !casc ? "no cascade on " + S.target + " for this model" : !S.fused ? "fusion is off" : "";
      b.classList.toggle("on", casc && S.fused && (b.getAttribute("data-cascades") === "1") === S.cascades);
    });
    document.querySelectorAll("#precision button").forEach(function (b) {
      var p = b.getAttribute("data-precision");
      b.disabled = T.precisions.indexOf(p) < 0;
      b.title = b.disabled ? S.target + " does not run " + p : "";
      b.classList.toggle("on", p === S.precision);
    });
    document.getElementById("hardware").value = S.target;
    var size = document.getElementById("size");
    if (size) size.value = String(S.size);
    document.getElementById("hw-desc").textContent = T.description;
  }

  /* the pipeline strip shows PAGE operators from S.first; "find" jumps to a name or op type */
  var PAGE = D.page_ops, ITEM = { int8: 1, fp16: 2, fp32: 4 }, found = [];
  S.first = 0;
  function written() {  /* operator index -> bytes its output writes to memory in this setting */
    var key = S.target + "|" + S.size, out = {}, elems = D.elements[S.size], item = ITEM[S.precision];
    if (!S.fused) { elems.forEach(function (n, i) { if (n) out[i] = n * item; }); return out; }
    var w = D.writes[key][fusedKey(cfg())] || {};
    Object.keys(w).forEach(function (i) { out[i] = w[i] * item; });
    return out;
  }
  function stripUpdate(memName) {
    var last = Math.min(S.first + PAGE, D.ops.length), shown = D.ops.slice(S.first, last);
    var local = function (i) { return i - S.first; }, inPage = function (i) { return i >= S.first && i < last; };
    var groups = (D.groups[S.target + "|" + S.size] || []).map(function (g) { return g.filter(inPage).map(local); })
      .filter(function (g) { return g.length; });
    var w = written(), lane = shown.map(function (_, k) { return w[S.first + k] || 0; }), total = 0;
    Object.keys(w).forEach(function (i) { total += w[i]; });
    strip.set(shown, groups, S.fused, memName, S.precision, lane,
      found.filter(inPage).map(local));
    document.getElementById("strip-range").textContent = "operators " + (S.first + 1) + "\u2013" + last +
      " of " + D.ops.length;
    document.getElementById("strip-prev").disabled = S.first === 0;
    document.getElementById("strip-next").disabled = last >= D.ops.length;
    var pageBytes = lane.reduce(function (a, b) { return a + b; }, 0);
    document.getElementById("strip-note").textContent =
      (S.fused ? "Fused: operators inside one kernel (purple outline) pass data on chip; only kernel outputs go to memory."
        : "Unfused: every operator is its own kernel, so every intermediate is written to memory and read back.") +
      " The " + memName + " lane shows each output written there: " + OF.bytes(pageBytes) + " on this page, " +
      OF.bytes(total) + " for all " + D.ops.length + " operators (elements \u00d7 " + ITEM[S.precision] +
      " B at " + S.precision + "; each is read back by its consumers).";
  }
  function find(text) {
    var q = text.trim().toLowerCase();
    found = [];
    if (q) D.ops.forEach(function (op, i) {
      if (op.name.toLowerCase().indexOf(q) >= 0 || op.op.toLowerCase().indexOf(q) >= 0) found.push(i);
    });
    if (found.length) S.first = Math.floor(found[0] / PAGE) * PAGE;
    document.getElementById("strip-found").textContent = !q ? "" : found.length ?
      found.length + (found.length === 1 ? " match" : " matches") + " (outlined in yellow)" : "no match";
    update();
  }

  function update() {
    controls(); verdict(); readouts(); roof();
    var T = D.targets[S.target], levels = T.roofs.levels.filter(function (l) { return l.holds.indexOf("activations") >= 0; });
    stripUpdate(levels.length ? levels[levels.length - 1].name : "memory");
    document.body.setAttribute("data-config", S.target + "|" + S.precision + "|" + S.size + "|" +
      (S.fused ? fusedKey(cfg()) : "off"));
  }

  document.querySelectorAll("#fusion button").forEach(function (b) {
    b.addEventListener("click", function () { S.fused = b.getAttribute("data-fused") === "1"; update(); });
  });
  document.querySelectorAll("#cascades button").forEach(function (b) {
    b.addEventListener("click", function () { S.cascades = b.getAttribute("data-cascades") === "1"; update(); });
  });
  document.querySelectorAll("#precision button").forEach(function (b) {
    b.addEventListener("click", function () { S.precision = b.getAttribute("data-precision"); update(); });
  });
  document.getElementById("hardware").addEventListener("change", function (ev) { S.target = ev.target.value; update(); });
  document.getElementById("strip-prev").addEventListener("click", function () { S.first = Math.max(0, S.first - PAGE); update(); });
  document.getElementById("strip-next").addEventListener("click", function () {
    if (S.first + PAGE < D.ops.length) S.first += PAGE; update();
  });
  document.getElementById("strip-find").addEventListener("input", function (ev) { find(ev.target.value); });
  document.getElementById("strip-find").addEventListener("keydown", function (ev) {
    if (ev.key !== "Enter" || !found.length) return;  /* Enter: the next match's page */
    var next = found.filter(function (i) { return i >= S.first + PAGE; })[0];
    S.first = Math.floor((next === undefined ? found[0] : next) / PAGE) * PAGE; update();
  });
  var sizeSel = document.getElementById("size");
  if (sizeSel) sizeSel.addEventListener("change", function (ev) { S.size = Number(ev.target.value); update(); });
  update();
  requestAnimationFrame(animate);
})();
