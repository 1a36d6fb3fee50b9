// The job page's search: results in a virtualised list, a histogram of matches per rank group
// over aligned time (click or drag to zoom), the context of a line (click it, or Enter), and the
// whole state in the URL (q, rank, host, stream, since, until, line, zoom) so a shared link
// reopens the same view and back/forward work. Keys: / search, j/k or arrows move, Enter context,
// Esc closes. Vanilla JS, no build step.
(function () {
  "use strict";
  var form = document.getElementById("search");
  if (!form) return;
  var job = form.getAttribute("data-job");
  var api = "/api/jobs/" + encodeURIComponent(job);
  var FIELDS = ["q", "rank", "host", "stream", "since", "until"];
  var errorBox = document.getElementById("search-error");
  var counts = document.getElementById("search-counts");
  var histBox = document.getElementById("histogram");
  var ctxBox = document.getElementById("context");
  var ROW = 20;
  var shown = null; // the search the results show, as a query string
  var nextCursor = null;

  function esc(s) { return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;"); }
  function getJSON(url) {
    return fetch(url).then(function (r) { return r.json().then(function (j) { if (!r.ok) throw new Error(j.error || r.statusText); return j; }); });
  }
  function lineKey(h) { return (h.rank == null ? "-" : h.rank) + ":" + h.stream + ":" + h.seq; }
  function lineRow(h) {
    return "<span class='t'>" + esc(h.time.slice(11, 23)) + "</span><span class='r'>" + (h.rank == null ? "-" : h.rank) +
      "</span><span class='s'>" + esc(h.stream) + "</span><code>" + esc(h.line) + "</code>";
  }
  window.coronerLineRow = lineRow;

  var list = coronerVList(document.getElementById("search-results"), ROW, lineRow);
  var resultsBox = document.getElementById("search-results");

  // URL state.
  function searchQuery() {
    var p = new URLSearchParams();
    FIELDS.forEach(function (k) { var v = form.elements[k].value.trim(); if (v) p.set(k, v); });
    return p;
  }
  function pushState(replace) {
    var p = searchQuery();
    if (selectedLine) p.set("line", selectedLine);
    if (zoom) p.set("zoom", Math.round(zoom[0]) + "," + Math.round(zoom[1]));
    var url = location.pathname + (p.toString() ? "?" + p.toString() : "");
    if (url === location.pathname + location.search) return;
    (replace ? history.replaceState : history.pushState).call(history, null, "", url);
  }
  var selectedLine = null, zoom = null;
  function applyURL() {
    var p = new URLSearchParams(location.search);
    FIELDS.forEach(function (k) { form.elements[k].value = p.get(k) || ""; });
    var q = searchQuery().toString();
    if (q && q !== shown) run(null); else if (!q) { shown = null; list.set([]); histBox.innerHTML = ""; counts.textContent = ""; }
    selectedLine = p.get("line");
    if (selectedLine) openContext(selectedLine); else closeContext();
    var z = (p.get("zoom") || "").split(",").map(Number);
    zoom = z.length === 2 && z[0] < z[1] ? z : null;
    if (window.coronerTimeline) window.coronerTimeline.show(zoom);
  }

  // Search and histogram.
  function run(cursor) {
    var p = searchQuery();
    p.set("limit", "200");
    if (cursor) p.set("cursor", cursor);
    errorBox.textContent = "";
    var key = searchQuery().toString();
    return getJSON(api + "/search?" + p.toString()).then(function (res) {
      if (cursor) list.append(res.hits); else { list.set(res.hits); shown = key; histogram(); }
      nextCursor = res.next_cursor;
      counts.textContent = res.total + " matching lines" + (res.next_cursor ? " (scroll for more)" : "");
      document.getElementById("search-results").setAttribute("data-total", res.total);
    }).catch(function (e) { errorBox.textContent = e.message; list.set([]); counts.textContent = ""; histBox.innerHTML = ""; });
  }
  resultsBox.addEventListener("scroll", function () {
    if (nextCursor && resultsBox.scrollTop + resultsBox.clientHeight > list.items().length * ROW - ROW * 20) { var c = nextCursor; nextCursor = null; run(c); }
  });
  function histogram() {
    var p = searchQuery();
    p.set("buckets", "60");
    getJSON(api + "/histogram?" + p.toString()).then(drawHistogram).catch(function (e) { histBox.innerHTML = "<p class='error'>histogram: " + esc(e.message) + "</p>"; });
  }
  function drawHistogram(h) {
    histBox.innerHTML = "";
    if (!h.rows.length) { histBox.innerHTML = "<p class='muted'>no matches to chart</p>"; return; }
    var max = Math.max.apply(null, h.totals.concat([1]));
    var W = 6, H = 60, n = h.buckets;
    var head = document.createElement("div");
    head.className = "hist-head";
    head.innerHTML = "<span class='muted'>matches over aligned time, " + h.rows.length + " " + h.grouped_by + (h.rows.length === 1 ? "" : "s") +
      " · click or drag across bars to zoom</span>";
    histBox.appendChild(head);
    var bars = "<svg id='hist-bars' width='" + (n * W + 2) + "' height='" + H + "'>";
    h.totals.forEach(function (c, i) {
      var bh = c ? Math.max(2, c / max * (H - 2)) : 0;
      bars += "<rect class='bar' data-b='" + i + "' x='" + (i * W + 1) + "' y='" + (H - bh) + "' width='" + (W - 1) + "' height='" + bh + "'><title>" +
        new Date((h.start_ns + i * h.width_ns) / 1e6).toISOString() + ": " + c + "</title></rect>";
      bars += "<rect class='hit' data-b='" + i + "' x='" + i * W + "' y='0' width='" + W + "' height='" + H + "' fill='transparent'/>";
    });
    histBox.insertAdjacentHTML("beforeend", bars + "</svg><div id='hist-rows' class='vlist'></div>");
    var rowMax = Math.max.apply(null, h.rows.map(function (r) { return Math.max.apply(null, r.counts); }).concat([1]));
    var rows = coronerVList(document.getElementById("hist-rows"), 14, function (r) {
      var cells = r.counts.map(function (c) { return "<i class='l" + (c ? 1 + Math.min(4, Math.floor(c / rowMax * 5)) : 0) + "'></i>"; }).join("");
      return "<span class='hl' title='" + esc(r.label + (r.ranks.length > 1 ? " (ranks " + r.ranks[0] + "\u2026" + r.ranks[r.ranks.length - 1] + ")" : "")) + "'>" + esc(r.label) + "</span><span class='cells'>" + cells + "</span><span class='muted'>" + r.sum + "</span>";
    });
    rows.set(h.rows);
    var svg = document.getElementById("hist-bars"), from = null;
    function bucketOf(ev) { return Math.max(0, Math.min(n - 1, Math.floor((ev.clientX - svg.getBoundingClientRect().left) / W))); }
    svg.addEventListener("mousedown", function (ev) { from = bucketOf(ev); ev.preventDefault(); });
    svg.addEventListener("mouseup", function (ev) {
      if (from === null) return;
      var a = Math.min(from, bucketOf(ev)), b = Math.max(from, bucketOf(ev));
      from = null;
      zoomTo(h.start_ns + a * h.width_ns, h.start_ns + (b + 1) * h.width_ns - 1);
    });
  }
  function zoomTo(a, b) {
    form.elements.since.value = String(a);
    form.elements.until.value = String(b);
    zoom = [a, b];
    if (window.coronerTimeline) window.coronerTimeline.show(zoom);
    run(null).then(function () { pushState(false); });
  }
  window.coronerZoomed = function (view) { zoom = view; pushState(false); };

  // Context.
  function openContext(key) {
    var parts = key.split(":");
    if (parts.length !== 3) return;
    var p = new URLSearchParams({ stream: parts[1], seq: parts[2], n: "10" });
    if (parts[0] !== "-") p.set("rank", parts[0]);
    ctxBox.hidden = false;
    ctxBox.innerHTML = "<p class='muted'>loading the lines around " + esc(key) + "…</p>";
    getJSON(api + "/context?" + p.toString()).then(function (c) {
      var l = c.line;
      var html = "<div class='ctx-head'><b>Context</b> of rank " + (l.rank == null ? "unknown" : l.rank) + " " + esc(l.stream) + " line " + l.seq +
        " <span class='muted'>" + esc(l.time) + " (aligned) on " + esc(l.host) + "</span> <button type='button' id='ctx-close'>close (Esc)</button></div>";
      html += "<table class='ctx' id='ctx-own'>" + c.own.map(function (h) {
        return "<tr class='" + (h.context ? "" : "this") + "'><td class='nowrap'>" + esc(h.time.slice(11, 26)) + "</td><td>" + h.seq + "</td><td><code>" + esc(h.line) + "</code></td></tr>";
      }).join("") + "</table>";
      c.peers.forEach(function (p) {
        html += "<h3>rank " + p.rank + (p.host ? " on " + esc(p.host) : "") + " at the same moment</h3><table class='ctx peer' data-rank='" + p.rank + "'>";
        var marked = false;
        p.lines.forEach(function (h) {
          if (!marked && h.time_ns > l.time_ns) { html += "<tr class='moment'><td colspan='3'>\u25B2 before · after \u25BC</td></tr>"; marked = true; }
          html += "<tr><td class='nowrap'>" + esc(h.time.slice(11, 26)) + "</td><td>" + h.seq + "</td><td><code>" + esc(h.line) + "</code></td></tr>";
        });
        if (!p.lines.length) html += "<tr><td class='muted'>no lines near that moment</td></tr>";
        html += "</table>";
      });
      ctxBox.innerHTML = html;
      document.getElementById("ctx-close").onclick = function () { selectedLine = null; closeContext(); pushState(false); };
    }).catch(function (e) { ctxBox.innerHTML = "<p class='error'>context: " + esc(e.message) + "</p>"; });
  }
  function closeContext() { ctxBox.hidden = true; ctxBox.innerHTML = ""; }
  function select(h) { selectedLine = lineKey(h); openContext(selectedLine); pushState(false); }
  window.coronerSelectLine = select;
  resultsBox.addEventListener("click", function (ev) {
    var i = list.rowOf(ev.target);
    if (i >= 0) { list.select(i); select(list.items()[i]); }
  });

  // Keys.
  document.addEventListener("keydown", function (ev) {
    var typing = /^(INPUT|TEXTAREA|SELECT)$/.test(document.activeElement.tagName);
    if (ev.key === "Escape") {
      if (typing) document.activeElement.blur();
      else if (!ctxBox.hidden) { selectedLine = null; closeContext(); pushState(false); }
      return;
    }
    if (typing || ev.ctrlKey || ev.metaKey || ev.altKey) return;
    if (ev.key === "/") { ev.preventDefault(); form.elements.q.focus(); form.elements.q.select(); return; }
    var i = list.selected(), n = list.items().length;
    if (!n) return;
    if (ev.key === "j" || ev.key === "ArrowDown") { ev.preventDefault(); list.select(Math.min(n - 1, i + 1)); }
    else if (ev.key === "k" || ev.key === "ArrowUp") { ev.preventDefault(); list.select(Math.max(0, i - 1)); }
    else if (ev.key === "Enter" && i >= 0) { ev.preventDefault(); select(list.items()[i]); }
  });

  form.addEventListener("submit", function (ev) {
    ev.preventDefault();
    selectedLine = null; closeContext();
    run(null).then(function () { pushState(false); });
  });
  window.addEventListener("popstate", applyURL);
  applyURL();
})();
