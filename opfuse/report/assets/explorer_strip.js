/* The explorer's pipeline strip on a canvas: operators on the chip plane, a memory lane below.
   Data packets flow left to right (requestAnimationFrame); between two kernels a packet dips to the
   memory lane (written out, read back); inside a fused kernel it stays on chip. The lane holds a
   tile under each operator whose output is written to memory, with its size; the canvas's
   data-ops and data-lane attributes say what is drawn (operator names; [name, bytes] tiles). */
"use strict";
OF.strip = function (canvas) {
  var ctx = canvas.getContext("2d"), state = { ops: [], groups: [], fused: true, memName: "DRAM",
    precision: "int8", lane: [], found: [], packets: [], last: 0, spawn: 0 };
  var SHORT = { BatchNormalization: "BatchNorm", GlobalAveragePool: "GlobalAvgPool",
    HardSwish: "HSwish", LayerNormalization: "LayerNorm" };
  var CHIP_Y = 66, MEM_Y = 200, BOX_H = 56, H = 240;

  function size() {
    var dpr = window.devicePixelRatio || 1, w = canvas.clientWidth || 900;
    canvas.width = w * dpr; canvas.height = H * dpr;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    state.w = w;
  }
  function geom() {
    var n = state.ops.length, pad = 40, gap = 26;
    var bw = Math.min(130, (state.w - 2 * pad - gap * (n - 1)) / n);
    var total = n * bw + (n - 1) * gap, x0 = (state.w - total) / 2;
    return state.ops.map(function (op, i) { return { x: x0 + i * (bw + gap), w: bw }; });
  }
  function kernelOf() { /* op index -> kernel index */
    var k = {};
    if (state.fused) state.groups.forEach(function (g, gi) { g.forEach(function (i) { k[i] = gi; }); });
    state.ops.forEach(function (op, i) { if (k[i] === undefined) k[i] = "solo" + i; });
    return k;
  }
  function pathFor(g, kmap) { /* waypoints of one packet: [x, y, dwell weight] */
    var pts = [[g[0].x - 30, CHIP_Y]];
    g.forEach(function (b, i) {
      pts.push([b.x + b.w / 2, CHIP_Y]);
      if (i + 1 < g.length) {
        var nx = g[i + 1].x;
        if (kmap[i] !== kmap[i + 1]) {
          var mid = (b.x + b.w + nx) / 2;
          pts.push([b.x + b.w, CHIP_Y + BOX_H / 2], [mid, MEM_Y], [nx, CHIP_Y + BOX_H / 2]);
        } else {
          pts.push([b.x + b.w, CHIP_Y], [nx, CHIP_Y]);
        }
      }
    });
    pts.push([g[g.length - 1].x + g[g.length - 1].w + 30, CHIP_Y]);
    var len = [0];
    for (var i = 1; i < pts.length; i++)
      len.push(len[i - 1] + Math.hypot(pts[i][0] - pts[i - 1][0], pts[i][1] - pts[i - 1][1]));
    return { pts: pts, len: len };
  }
  function at(p, d) {
    for (var i = 1; i < p.pts.length; i++) {
      if (d <= p.len[i]) {
        var t = (d - p.len[i - 1]) / ((p.len[i] - p.len[i - 1]) || 1), a = p.pts[i - 1], b = p.pts[i];
        return [a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t];
      }
    }
    return p.pts[p.pts.length - 1];
  }
  function draw(now) {
    var dt = Math.min(0.05, (now - (state.last || now)) / 1000); state.last = now;
    var g = geom(), kmap = kernelOf(), path = pathFor(g, kmap), w = state.w;
    ctx.clearRect(0, 0, w, H);
    ctx.fillStyle = "#eef3ff"; ctx.fillRect(10, CHIP_Y - 58, w - 20, BOX_H + 80);
    ctx.fillStyle = "#fff1e6"; ctx.fillRect(10, MEM_Y - 16, w - 20, 34);
    ctx.font = "12px system-ui, sans-serif"; ctx.fillStyle = "#6b7385";
    ctx.fillText("on chip (registers / local SRAM)", 18, CHIP_Y - 42);
    ctx.fillText(state.memName + " (off-kernel memory): outputs written", 18, MEM_Y - 22);
    g.forEach(function (b, i) {  /* the lane: a tile per output written to memory */
      if (!state.lane[i]) return;
      ctx.strokeStyle = "#e0771b"; ctx.setLineDash([3, 3]); ctx.lineWidth = 1;
      ctx.beginPath(); ctx.moveTo(b.x + b.w / 2, CHIP_Y + BOX_H - 14); ctx.lineTo(b.x + b.w / 2, MEM_Y - 12);
      ctx.stroke(); ctx.setLineDash([]);
      ctx.fillStyle = "#f6c9a1"; ctx.fillRect(b.x + 4, MEM_Y - 12, b.w - 8, 26);
      ctx.fillStyle = "#7a3b06"; ctx.textAlign = "center"; ctx.font = "600 11px system-ui, sans-serif";
      ctx.fillText(OF.bytes(state.lane[i]), b.x + b.w / 2, MEM_Y + 5); ctx.textAlign = "left";
    });
    var drawn = {};
    g.forEach(function (b, i) { /* kernel outlines */
      var k = kmap[i];
      if (drawn[k]) return; drawn[k] = true;
      var idx = g.map(function (_, j) { return j; }).filter(function (j) { return kmap[j] === k; });
      var a = g[idx[0]], z = g[idx[idx.length - 1]];
      ctx.strokeStyle = idx.length > 1 ? "#6a3fd0" : "#b4bac8"; ctx.lineWidth = idx.length > 1 ? 2.5 : 1;
      ctx.setLineDash(idx.length > 1 ? [] : [4, 3]);
      ctx.strokeRect(a.x - 8, CHIP_Y - 22, z.x + z.w - a.x + 16, BOX_H + 10);
      ctx.setLineDash([]);
    });
    var speed = 260, total = path.len[path.len.length - 1];
    state.spawn -= dt;
    if (state.spawn <= 0) { state.packets.push(0); state.spawn = 0.55; }
    state.packets = state.packets.map(function (d) { return d + speed * dt; })
      .filter(function (d) { return d < total; });
    var r = { int8: 4, fp16: 5.5, fp32: 7 }[state.precision] || 5;
    state.packets.forEach(function (d) {
      var p = at(path, d);
      ctx.beginPath(); ctx.arc(p[0], p[1], r, 0, 2 * Math.PI);
      ctx.fillStyle = p[1] > CHIP_Y + 30 ? "#e0771b" : "#2f6fdb"; ctx.fill();
    });
    state.ops.forEach(function (op, i) {
      var b = g[i];
      if (state.found.indexOf(i) >= 0) {
        ctx.strokeStyle = "#f2b705"; ctx.lineWidth = 4; ctx.strokeRect(b.x - 3, CHIP_Y - 17, b.w + 6, BOX_H - 8);
      }
      ctx.fillStyle = "#1d2330"; ctx.fillRect(b.x, CHIP_Y - 14, b.w, BOX_H - 14);
      ctx.fillStyle = "#fff"; ctx.textAlign = "center";
      var fs = 13, label = SHORT[op.op] || op.op;
      do { ctx.font = "600 " + fs + "px system-ui, sans-serif"; fs--; } while (fs > 9 && ctx.measureText(label).width > b.w - 8);
      ctx.fillText(label, b.x + b.w / 2, CHIP_Y + 8);
      ctx.fillStyle = "#6b7385"; ctx.font = "11px system-ui, sans-serif";
      var name = op.name;
      while (name.length > 4 && ctx.measureText(name).width > b.w + 18) name = "\u2026" + name.slice(2);
      ctx.fillText(name, b.x + b.w / 2, CHIP_Y + BOX_H + 8);
      ctx.textAlign = "left";
    });
    requestAnimationFrame(draw);
  }
  window.addEventListener("resize", size);
  size();
  requestAnimationFrame(draw);
  return {
    set: function (ops, groups, fused, memName, precision, lane, found) {
      state.ops = ops; state.groups = groups; state.fused = fused; state.memName = memName;
      state.precision = precision; state.lane = lane || []; state.found = found || [];
      canvas.setAttribute("data-ops", JSON.stringify(ops.map(function (op) { return op.name; })));
      canvas.setAttribute("data-lane", JSON.stringify(ops.map(function (op, i) { return [op.name, state.lane[i]]; })
        .filter(function (t) { return t[1]; })));
    }
  };
};
