// The job page: draws the timeline as SVG swimlanes from /api/jobs/<id>/timeline and runs the
// search box against /api/jobs/<id>/search. Vanilla JS, no build step, no external resources.
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";
  var COLORS = { root: "#d32f2f", symptom: "#f57c00", progress: "#1976d2", noise: "#9e9e9e" };
  var LABEL_W = 210, LANE_H = 18, AXIS_H = 26;
  var box = document.getElementById("timeline");
  if (!box) return;
  var job = box.getAttribute("data-job");
  var data = null, view = null;

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
    data.lanes.forEach(function (lane, idx) {
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
    });
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
  function setView(a, b) { if (b - a >= 1e3) { view = [a, b]; draw(); } }
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
        view = whole();
        draw();
      })
      .catch(function (e) { box.innerHTML = "<p class='error'>timeline: " + String(e.message).replace(/</g, "&lt;") + "</p>"; });
  }
  document.getElementById("tl-all").onclick = function () { view = whole(); draw(); };
  document.getElementById("tl-failure").onclick = failureWindow;
  document.getElementById("tl-in").onclick = function () { zoom(0.5); };
  document.getElementById("tl-out").onclick = function () { zoom(2); };
  document.getElementById("tl-group").onchange = load;
  window.addEventListener("resize", function () { if (data) draw(); });
  load();

  // Search.
  var form = document.getElementById("search");
  var results = document.getElementById("search-results");
  var errorBox = document.getElementById("search-error");
  var counts = document.getElementById("search-counts");
  function esc(s) { return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;"); }
  function perRank(q) {
    fetch("/api/jobs/" + encodeURIComponent(job) + "/counts?q=" + encodeURIComponent(q))
      .then(function (r) { return r.ok ? r.json() : []; })
      .then(function (c) {
        if (!c.length) return;
        counts.textContent += " \u00B7 per rank: " + c.map(function (x) { return (x.rank == null ? "no rank" : x.rank) + " (" + x.count + ")"; }).join(", ");
      });
  }
  function run(cursor) {
    var p = new URLSearchParams();
    ["q", "rank", "since", "until"].forEach(function (k) { var v = form.elements[k].value.trim(); if (v) p.set(k, v); });
    p.set("limit", "100");
    if (cursor) p.set("cursor", cursor);
    errorBox.textContent = "";
    fetch("/api/jobs/" + encodeURIComponent(job) + "/search?" + p.toString())
      .then(function (r) { return r.json().then(function (j) { if (!r.ok) throw new Error(j.error || r.statusText); return j; }); })
      .then(function (res) {
        var html = cursor ? "" : "<table><tr><th>time (aligned)</th><th>rank</th><th>host</th><th>stream</th><th>line</th></tr>";
        res.hits.forEach(function (h) {
          html += "<tr><td class='nowrap'>" + esc(h.time) + "</td><td>" + (h.rank == null ? "-" : h.rank) + "</td><td>" + esc(h.host) + "</td><td>" + esc(h.stream) + "</td><td><code>" + esc(h.line) + "</code></td></tr>";
        });
        if (cursor) {
          var t = results.querySelector("table"); var more = results.querySelector("button"); if (more) more.remove();
          t.insertAdjacentHTML("beforeend", html);
        } else {
          results.innerHTML = html + "</table>";
          counts.textContent = res.total + " matching lines";
          if (form.elements.q.value.trim()) perRank(form.elements.q.value);
        }
        if (res.next_cursor) {
          var b = document.createElement("button"); b.textContent = "more"; b.type = "button";
          b.onclick = function () { run(res.next_cursor); }; results.appendChild(b);
        }
      })
      .catch(function (e) { errorBox.textContent = e.message; results.innerHTML = ""; counts.textContent = ""; });
  }
  if (form) form.addEventListener("submit", function (ev) { ev.preventDefault(); run(null); });
})();
