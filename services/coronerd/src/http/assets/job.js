// The job page's timeline: SVG swimlanes from /api/jobs/<id>/timeline, only the lanes in view
// drawn. The search is explore.js, the live tail tail.js. Vanilla JS, no build step, no
// external resources.
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var COLORS = { root: "#d32f2f", symptom: "#f57c00", progress: "#1976d2", noise: "#9e9e9e" };
  var LABEL_W = 210, LANE_H = 18, AXIS_H = 26;
  var box = document.getElementById("timeline");
  if (!box) return;
  var job = box.getAttribute("data-job");
  var data = null, view = null, wanted = null, queued = false;

  function el(name, attrs, parent) {
    var e = document.createElementNS(SVG, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function fmtRel(ns) {
    var ref = data.failure_ns != null ? data.failure_ns : data.start_ns;
    var s = (ns - ref) / 1e9, a = Math.abs(s);
    var t = a >= 100 ? a.toFixed(0) : a >= 10 ? a.toFixed(1) : a >= 1 ? a.toFixed(2) : a.toFixed(3);
    return (s < 0 ? "-" : "+") + t + " s";
  }
  function fmtAbs(ns) { return new Date(ns / 1e6).toISOString(); }

  function draw() {
    box.innerHTML = "";
    if (!data.lanes.length) { box.innerHTML = "<p class='muted'>no ranks yet</p>"; return; }
    var width = Math.max(box.clientWidth || 900, 600);
    var plotW = width - LABEL_W - 10;
    var height = AXIS_H + data.lanes.length * LANE_H + 4;
    var t0 = view[0], t1 = Math.max(view[1], view[0] + 1);
    var x = function (t) { return LABEL_W + (t - t0) / (t1 - t0) * plotW; };
    var svg = el("svg", { width: width, height: height, id: "timeline-svg", "data-lanes": data.lanes.length });
    var axis = el("g", { "class": "axis" }, svg);
    for (var i = 0; i <= 6; i++) {
      var t = t0 + (t1 - t0) * i / 6, px = x(t);
      el("line", { x1: px, x2: px, y1: AXIS_H - 6, y2: height, stroke: "#eee" }, axis);
      var tx = el("text", { x: px, y: 14, "text-anchor": i === 0 ? "start" : i === 6 ? "end" : "middle" }, axis);
      tx.textContent = fmtRel(t);
    }
    var lanes = el("g", { "class": "lanes" }, svg);
    // Only the lanes in view are drawn (a 16,384-rank job has thousands of host lanes).
    function paintLanes() {
      var top = Math.max(0, box.scrollTop - AXIS_H), h = box.clientHeight || 600;
      var a = Math.max(0, Math.floor(top / LANE_H) - 10), b = Math.min(data.lanes.length, Math.ceil((top + h) / LANE_H) + 10);
      while (lanes.firstChild) lanes.removeChild(lanes.firstChild);
      for (var idx = a; idx < b; idx++) drawLane(data.lanes[idx], idx);
    }
    function drawLane(lane, idx) {
      var y = AXIS_H + idx * LANE_H;
      var culprit = data.culprit_rank != null && lane.ranks.indexOf(data.culprit_rank) >= 0;
      var g = el("g", { "class": "lane" + (culprit ? " culprit" : ""), "data-ranks": lane.ranks.join(","), "data-role": lane.role }, lanes);
      el("rect", { x: 0, y: y, width: width, height: LANE_H, fill: culprit ? "#fdecea" : idx % 2 ? "#fafafa" : "#fff" }, g);
      var label = el("text", { "class": "lane-label", x: 4, y: y + 13 }, g);
      label.textContent = (culprit ? "\u25B6 " : "") + lane.label + (lane.role && lane.role !== "unknown" ? " \u00B7 " + lane.role : "");
      el("title", {}, label).textContent = lane.label + (lane.host ? " on " + lane.host : "") + (lane.ended ? ", " + lane.ended : "") + ", " + lane.events_total + " events";
      if (lane.end_ns > 0) {
        var a = Math.max(x(lane.start_ns), LABEL_W), b = Math.min(x(lane.end_ns), width);
        if (b > a) el("rect", { x: a, y: y + LANE_H / 2 - 1, width: b - a, height: 2, fill: "#cfd8dc" }, g);
      }
      lane.events.forEach(function (e) {
        if (e.time_ns < t0 || e.time_ns > t1) return;
        var r = el("rect", { "class": "ev " + e.role, x: x(e.time_ns) - 2, y: y + 3, width: e.role === "progress" ? 2 : 5, height: LANE_H - 6, fill: COLORS[e.role] || "#999" }, g);
        el("title", {}, r).textContent = (e.rank != null ? "rank " + e.rank + " " : "") + e.kind + " (" + e.role + ") " + fmtAbs(e.time_ns) + "\n" + e.text;
      });
    }
    paintLanes();
    box.onscroll = function () { if (!queued) { queued = true; requestAnimationFrame(function () { queued = false; paintLanes(); }); } };
    el("line", { x1: LABEL_W, x2: LABEL_W, y1: 0, y2: height, stroke: "#bbb" }, svg);
    if (data.failure_ns != null && data.failure_ns >= t0 && data.failure_ns <= t1) {
      el("line", { id: "failure-line", x1: x(data.failure_ns), x2: x(data.failure_ns), y1: AXIS_H - 6, y2: height, stroke: "#b00020", "stroke-width": 1.5, "stroke-dasharray": "4,3" }, svg);
    }
    var sel = el("rect", { x: 0, y: AXIS_H, width: 0, height: height - AXIS_H, fill: "rgba(25,118,210,.15)", visibility: "hidden" }, svg);
    var start = null;
    svg.addEventListener("mousedown", function (ev) { start = ev.offsetX; });
    svg.addEventListener("mousemove", function (ev) {
      if (start === null) return;
      var a = Math.max(Math.min(start, ev.offsetX), LABEL_W), w = Math.abs(ev.offsetX - start);
      sel.setAttribute("x", a); sel.setAttribute("width", w); sel.setAttribute("visibility", "visible");
    });
    svg.addEventListener("mouseup", function (ev) {
      var s = start; start = null; sel.setAttribute("visibility", "hidden");
      if (s === null || Math.abs(ev.offsetX - s) < 5) return;
      var ta = t0 + (Math.max(Math.min(s, ev.offsetX), LABEL_W) - LABEL_W) / plotW * (t1 - t0);
      var tb = t0 + (Math.max(s, ev.offsetX) - LABEL_W) / plotW * (t1 - t0);
      setView(ta, tb);
    });
    box.appendChild(svg);
  }
  function whole() {
    var pad = Math.max((data.end_ns - data.start_ns) * 0.02, 1e6);
    return [data.start_ns - pad, data.end_ns + pad];
  }
  function setView(a, b) {
    if (b - a < 1e3) return;
    view = [a, b];
    draw();
    if (window.coronerZoomed) window.coronerZoomed(view);
  }
  function zoom(f) { var c = (view[0] + view[1]) / 2, h = (view[1] - view[0]) * f / 2; setView(c - h, c + h); }
  function failureWindow() {
    if (data.failure_ns == null) return;
    var span = data.end_ns - data.start_ns;
    setView(data.failure_ns - Math.max(span * 0.03, 2e9), data.failure_ns + Math.max(span * 0.1, 10e9));
  }
  function load() {
    var group = document.getElementById("tl-group").checked ? "&group=host" : "";
    fetch("/api/jobs/" + encodeURIComponent(job) + "/timeline?max_events=300" + group)
      .then(function (r) { return r.json().then(function (j) { if (!r.ok) throw new Error(j.error || r.statusText); return j; }); })
      .then(function (j) {
        data = j;
        document.getElementById("tl-group").checked = j.grouped_by_host;
        view = wanted || whole();
        draw();
      })
      .catch(function (e) { box.innerHTML = "<p class='error'>timeline: " + String(e.message).replace(/</g, "&lt;") + "</p>"; });
  }
  document.getElementById("tl-all").onclick = function () { view = whole(); draw(); if (window.coronerZoomed) window.coronerZoomed(null); };
  document.getElementById("tl-failure").onclick = failureWindow;
  document.getElementById("tl-in").onclick = function () { zoom(0.5); };
  document.getElementById("tl-out").onclick = function () { zoom(2); };
  document.getElementById("tl-group").onchange = load;
  window.addEventListener("resize", function () { if (data) draw(); });
  // For the search (a zoom from the histogram or the URL) and the live tail (a new report).
  window.coronerTimeline = {
    show: function (v) { wanted = v; if (data) { view = v || whole(); draw(); } },
    reload: load,
  };
  load();

})();
