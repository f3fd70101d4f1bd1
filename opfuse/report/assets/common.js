/* Shared helpers for the report and the explorer: number formatting, SVG elements, tooltips, and a
   selection every view follows. Units as in the terminal (opfuse/report/units.py): sizes in KiB/MiB
   (1024), bandwidth in decimal GB/s (10^9 B/s). */
"use strict";
var OF = (function () {
  var SVGNS = ["http:", "", "www.w3.org", "2000", "svg"].join("/");

  function el(tag, attrs, parent) {
    var node = document.createElementNS(SVGNS, tag);
    for (var k in attrs || {}) node.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(node);
    return node;
  }

  function html(tag, attrs, text, parent) {
    var node = document.createElement(tag);
    for (var k in attrs || {}) node.setAttribute(k, attrs[k]);
    if (text !== undefined && text !== null) node.textContent = text;
    if (parent) parent.appendChild(node);
    return node;
  }

  function scaled(v, units, base, digits) {
    if (v === 0) return "0 " + units[0];
    var i = 0, x = Math.abs(v);
    while (x >= base && i < units.length - 1) { x /= base; v /= base; i++; }
    var d = digits === undefined ? (Math.abs(v) >= 100 ? 0 : Math.abs(v) >= 10 ? 1 : 2) : digits;
    return v.toFixed(d) + " " + units[i];
  }

  /* as opfuse.report.units.fmt_bytes: one decimal from KiB up, so a size reads the same as in the terminal */
  function bytes(v) { return Math.abs(v) < 1024 ? v + " B" : scaled(v, ["B", "KiB", "MiB", "GiB", "TiB"], 1024, 1); }
  function count(v) { return scaled(v, ["", "K", "M", "G", "T", "P"], 1000).trim(); }
  function flops(v) { return scaled(v, ["FLOP", "KFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP"], 1000); }
  function rate(v) { return scaled(v, ["FLOP/s", "KFLOP/s", "MFLOP/s", "GFLOP/s", "TFLOP/s", "PFLOP/s"], 1000); }
  function bw(v) { return scaled(v, ["B/s", "KB/s", "MB/s", "GB/s", "TB/s"], 1000); }

  function small(v, units) { /* seconds or joules: pick the largest unit with value >= 1 */
    if (v === 0) return "0 " + units[0][0];
    for (var i = 0; i < units.length; i++) {
      var x = v / units[i][1];
      if (Math.abs(x) >= 1 || i === units.length - 1) {
        return x.toFixed(Math.abs(x) >= 100 ? 0 : Math.abs(x) >= 10 ? 1 : 2) + " " + units[i][0];
      }
    }
  }
  function time(v) { return small(v, [["s", 1], ["ms", 1e-3], ["\u00b5s", 1e-6], ["ns", 1e-9]]); }
  function energy(v) { return small(v, [["J", 1], ["mJ", 1e-3], ["\u00b5J", 1e-6], ["nJ", 1e-9], ["pJ", 1e-12]]); }
  function intensity(v) {
    if (v === null || v === undefined || !isFinite(v)) return "\u221e (no bytes)";
    return (v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2)) + " FLOP/B"; }
  function ratio(a, b) { return b > 0 ? (a / b).toFixed(2) + "x" : "n/a"; }
  function pct(before, after) {
    if (!before) return "";
    var p = Math.round((1 - after / before) * 100);
    return p >= 0 ? p + "% less" : -p + "% more";
  }

  var tip = null;
  function showTip(ev, text) {
    if (!tip) { tip = html("div", { "class": "of-tip" }, "", document.body); tip.style.display = "none"; }
    tip.textContent = text;
    tip.style.display = "block";
    var x = ev.clientX + 14, y = ev.clientY + 14;
    var w = tip.offsetWidth, h = tip.offsetHeight;
    if (x + w > window.innerWidth - 8) x = Math.max(4, ev.clientX - w - 14);
    if (y + h > window.innerHeight - 8) y = Math.max(4, ev.clientY - h - 14);
    tip.style.left = x + "px"; tip.style.top = y + "px";
  }
  function hideTip() { if (tip) tip.style.display = "none"; }
  function tooltip(target, textFn) {
    target.addEventListener("mousemove", function (ev) { showTip(ev, textFn()); });
    target.addEventListener("mouseleave", hideTip);
  }

  /* One selected kernel for every view: views register a listener; select(i, from) tells the others. */
  var listeners = [];
  function onSelect(fn) { listeners.push(fn); }
  function select(i, from) { listeners.forEach(function (fn) { fn(i, from); }); }

  /* A download built here from text: no network, no server. */
  function download(name, text, type) {
    var url = URL.createObjectURL(new Blob([text], { type: type || "text/plain" }));
    var a = html("a", { href: url, download: name }, null, document.body);
    a.click(); a.remove();
    setTimeout(function () { URL.revokeObjectURL(url); }, 1000);
  }

  function data(id) { return JSON.parse(document.getElementById(id).textContent); }

  function logTicks(lo, hi) {
    var out = [];
    for (var e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
      var v = Math.pow(10, e);
      if (v >= lo * 0.999 && v <= hi * 1.001) out.push(v);
    }
    return out;
  }

  return { el: el, html: html, bytes: bytes, count: count, flops: flops, rate: rate, bw: bw,
    time: time, energy: energy, intensity: intensity, ratio: ratio, pct: pct, tooltip: tooltip, showTip: showTip, hideTip: hideTip,
    data: data, logTicks: logTicks, onSelect: onSelect, select: select, download: download };
})();
