/* The graph view: the canonicalized model's nodes boxed into their kernels (layout computed in
   Python, opfuse/report/layout.py), edges between kernels, refused edges in red with their reason.
   Scrollable; zoom with the buttons or ctrl + wheel (anchored at the cursor); "fit" shows the whole
   graph; the search box finds a node or kernel by name and scrolls to it; a click on a kernel
   selects it in every view (OF.select). */
"use strict";
OF.graphView = function (D) {
  var G = D.graph, L = G.layout, K = D.analysis.kernels;
  var host = document.getElementById("graph-scroll");
  if (!host || !G.kernels.length) return;
  var svg = OF.el("svg", { viewBox: "0 0 " + L.width + " " + L.height, "class": "graph" }, host);
  var defs = OF.el("defs", {}, svg);
  ["plain", "refused"].forEach(function (k) {
    var mk = OF.el("marker", { id: "arrow-" + k, viewBox: "0 0 10 10", refX: 9, refY: 5,
      markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" }, defs);
    OF.el("path", { d: "M0,0 L10,5 L0,10 z", "class": "arrow-" + k }, mk);
  });
  var byName = {}, rowOf = {};
  G.nodes.forEach(function (n) { byName[n.name] = n; });
  G.kernels.forEach(function (k) { k.nodes.forEach(function (n, j) { rowOf[n] = j; }); });
  function rowY(name) {
    var b = L.boxes[byName[name].kernel];
    return b.y + L.head_h + rowOf[name] * L.row_h + L.row_h / 2;
  }
  var edgeG = OF.el("g", { "class": "edges" }, svg), boxG = OF.el("g", {}, svg);

  G.kernels.forEach(function (k, i) {
    var b = L.boxes[i], info = K[i] || {};
    var g = OF.el("g", { "class": "kbox " + (info.bound || ""), "data-kernel": k.name, "data-index": i }, boxG);
    g.addEventListener("click", function () { OF.select(i, "graph"); });
    OF.el("rect", { x: b.x, y: b.y, width: b.w, height: b.h, rx: 6 }, g);
    OF.el("text", { x: b.x + 8, y: b.y + 14, "class": "khead" }, g).textContent =
      "#" + i + " " + (k.name.length > 40 ? k.name.slice(0, 39) + "\u2026" : k.name) +
      (k.members ? " \u00b7 " + k.members.length + " members, rings " + OF.bytes(info.ring_buffer_bytes || 0) : "");
    OF.tooltip(g, function () {
      return "kernel #" + i + " " + k.name + "\n" + k.ops.join(" + ") +
        (info.flops !== undefined ? "\n" + OF.flops(info.flops) + ", " + OF.bytes(info.bytes_read + info.bytes_written) +
          " moved\n" + OF.time(info.latency_s) + ", " + info.bound + "-bound" : "");
    });
    (k.member_rows || []).forEach(function (r, m) {  /* a cascade: each member boxed, its ring named */
      var y0 = b.y + L.head_h + r[0] * L.row_h - 1, y1 = b.y + L.head_h + (r[1] + 1) * L.row_h - 1;
      var ring = m ? k.ring_buffers[m - 1] : null;
      /* the graph's ring bytes are at the model's element type; the analysis is at its precision */
      var scale = (info.ring_buffer_bytes || 0) / Math.max(1, k.ring_buffers.reduce(function (a, q) { return a + q.bytes; }, 0));
      var mb = OF.el("rect", { x: b.x + 2, y: y0, width: b.w - 4, height: y1 - y0, rx: 4, "class": "member" }, g);
      OF.tooltip(mb, function () {
        return "cascade member " + (m + 1) + " of " + k.members.length + ": " + k.members[m] +
          (ring ? "\nreads ring " + ring.value + ": " + ring.rows + " of " + ring.height + " rows, " + OF.bytes(Math.round(ring.bytes * scale))
            : "\nreads the cascade's input") + "\nbands of " + k.band_rows + " output rows";
      });
    });
    k.nodes.forEach(function (name, j) {
      var n = byName[name], y = b.y + L.head_h + j * L.row_h;
      OF.el("rect", { x: b.x + 5, y: y + 1, width: b.w - 10, height: L.row_h - 3, rx: 3, "class": "nrow" }, g);
      var t = OF.el("text", { x: b.x + 10, y: y + 13, "class": "nlabel" }, g);
      OF.el("tspan", { "class": "op" }, t).textContent = n.op + " ";
      var label = name + (n.sources.length ? " +" + n.sources.join(",") : "");
      OF.el("tspan", {}, t).textContent = label.length > 40 ? label.slice(0, 39) + "\u2026" : label;
    });
  });

  G.edges.forEach(function (e) {
    if (e.kind === "internal") return;
    var s = byName[e.src], d = byName[e.dst];
    var sb = L.boxes[s.kernel], db = L.boxes[d.kernel], lane = L.lanes[s.kernel + ">" + d.kernel];
    var path;
    if (lane !== undefined) {
      var lx = L.lane_x0 + lane * L.lane_gap, y1 = rowY(e.src), y2 = rowY(e.dst);
      path = "M" + (sb.x + sb.w) + "," + y1 + " H" + (lx - 6) + " Q" + lx + "," + y1 + " " + lx + "," + (y1 + 6) +
        " V" + (y2 - 6) + " Q" + lx + "," + y2 + " " + (lx - 6) + "," + y2 + " H" + (db.x + db.w + 1);
    } else {
      var x1 = sb.x + sb.w / 2, yy1 = sb.y + sb.h;
      if (rowOf[e.dst] === 0) {
        var x2 = db.x + db.w / 2, yy2 = db.y - 1;
        path = "M" + x1 + "," + yy1 + " C" + x1 + "," + (yy1 + 22) + " " + x2 + "," + (yy2 - 22) + " " + x2 + "," + yy2;
      } else {
        var yr = rowY(e.dst);
        path = "M" + x1 + "," + yy1 + " C" + x1 + "," + (yr) + " " + (db.x - 30) + "," + yr + " " + (db.x - 1) + "," + yr;
      }
    }
    var cls = e.kind === "refused" ? "edge refused" : "edge";
    var p = OF.el("path", { d: path, "class": cls, "marker-end": "url(#arrow-" + (e.kind === "refused" ? "refused" : "plain") + ")" }, edgeG);
    var hit = OF.el("path", { d: path, "class": "edge-hit" }, edgeG);
    OF.tooltip(hit, function () {
      return e.src + " \u2192 " + e.dst + " (" + e.value + ")\n" +
        (e.kind === "refused" ? "not fused: " + e.reason + "\n" + e.message : "crosses a kernel boundary");
    });
    hit.addEventListener("mouseenter", function () { p.classList.add("hover"); });
    hit.addEventListener("mouseleave", function () { p.classList.remove("hover"); });
  });

  var zoom = 1, minZoom = 0.15;
  function setZoom(z, ax, ay) {  /* (ax, ay): the point of the view that stays put, in host pixels */
    var old = zoom;
    zoom = Math.min(3, Math.max(minZoom, z));
    if (ax === undefined) { ax = host.clientWidth / 2; ay = host.clientHeight / 2; }
    var gx = (host.scrollLeft + ax) / old, gy = (host.scrollTop + ay) / old;  /* graph coordinates */
    svg.setAttribute("width", L.width * zoom); svg.setAttribute("height", L.height * zoom);
    host.scrollLeft = gx * zoom - ax; host.scrollTop = gy * zoom - ay;
    document.getElementById("graph-zoom").textContent = Math.round(zoom * 100) + "%";
  }
  function fit() {  /* the whole graph in the box, both ways; below the usual floor when it must */
    var z = Math.min((host.clientWidth - 4) / L.width, (host.clientHeight - 4) / L.height);
    minZoom = Math.min(0.15, z);
    setZoom(z); host.scrollLeft = 0; host.scrollTop = 0;
  }
  document.getElementById("graph-in").onclick = function () { setZoom(zoom * 1.25); };
  document.getElementById("graph-out").onclick = function () { setZoom(zoom / 1.25); };
  document.getElementById("graph-fit").onclick = fit;
  document.getElementById("graph-one").onclick = function () { setZoom(1); };
  host.addEventListener("wheel", function (ev) {
    if (!ev.ctrlKey) return;
    ev.preventDefault();
    var r = host.getBoundingClientRect();
    setZoom(zoom * (ev.deltaY < 0 ? 1.1 : 1 / 1.1), ev.clientX - r.left, ev.clientY - r.top);
  }, { passive: false });

  var boxes = boxG.querySelectorAll("g.kbox");
  function show(i, row) {  /* scroll kernel i (and its node row, if given) to the middle of the view */
    var b = L.boxes[i], y = row === undefined ? b.y + b.h / 2 : b.y + L.head_h + (row + 0.5) * L.row_h;
    host.scrollLeft = (b.x + b.w / 2) * zoom - host.clientWidth / 2;
    host.scrollTop = y * zoom - host.clientHeight / 2;
  }
  OF.onSelect(function (i, from) {
    boxes.forEach(function (g) { g.classList.remove("selected"); });
    if (!boxes[i]) return;
    boxes[i].classList.add("selected");
    if (from !== "graph" && from !== "search") show(i);
  });

  var search = document.getElementById("graph-search"), found = document.getElementById("graph-found");
  var hits = [], at = 0;
  function find(q) {
    q = q.trim().toLowerCase(); hits = []; at = 0;
    if (!q) return;
    G.kernels.forEach(function (k, i) {
      if (k.name.toLowerCase().indexOf(q) >= 0) hits.push({ kernel: i, row: undefined, name: k.name });
      k.nodes.forEach(function (n, j) {
        var node = byName[n], names = [n].concat(node.sources || []);
        if (names.some(function (x) { return x.toLowerCase().indexOf(q) >= 0; })) hits.push({ kernel: i, row: j, name: n });
      });
    });
  }
  function go(step) {
    if (!hits.length) { found.textContent = search.value.trim() ? "no match" : ""; return; }
    at = (at + step + hits.length) % hits.length;
    var h = hits[at];
    OF.select(h.kernel, "search");
    show(h.kernel, h.row);
    found.textContent = (at + 1) + " of " + hits.length + ": " + h.name + " (kernel #" + h.kernel + ")";
    search.setAttribute("data-kernel", String(h.kernel));
  }
  if (search) {
    search.addEventListener("input", function () { find(search.value); go(0); });
    search.addEventListener("keydown", function (ev) {
      if (ev.key === "Enter") { ev.preventDefault(); go(ev.shiftKey ? -1 : 1); }
    });
  }
  setZoom(1);
};
