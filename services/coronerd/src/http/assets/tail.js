// The live tail: server-sent events from /api/jobs/<id>/tail. `lines` events append to a
// virtualised list (the last 20,000 lines kept), `report` events refresh the verdict banner and
// the timeline, `dropped` says lines were skipped. The browser's EventSource reconnects by itself
// and sends the last event id, so the server sends only what was missed, never a line twice.
// Changing a filter reopens the stream. Clicking a line opens its context (explore.js).
(function () {
  "use strict";
  var form = document.getElementById("tail-filters");
  if (!form) return;
  var job = form.getAttribute("data-job");
  var status = document.getElementById("tail-status");
  var box = document.getElementById("tail");
  var list = coronerVList(box, 20, window.coronerLineRow);
  var source = null, paused = false, held = [], verdict = null;
  var KEEP = 20000;

  function say(text, cls) { status.textContent = text; status.className = cls || "muted"; }
  function open() {
    if (source) source.close();
    var p = new URLSearchParams();
    ["rank", "host", "stream", "q"].forEach(function (k) { var v = form.elements[k].value.trim(); if (v) p.set(k, v); });
    source = new EventSource("/api/jobs/" + encodeURIComponent(job) + "/tail?" + p.toString());
    source.addEventListener("open", function () { say("following", "live"); box.setAttribute("data-following", "1"); });
    source.addEventListener("error", function () {
      // EventSource retries by itself; a refusal (a 4xx) closes it.
      if (source.readyState === EventSource.CLOSED) {
        fetch("/api/jobs/" + encodeURIComponent(job) + "/tail?" + p.toString()).then(function (r) { return r.json(); })
          .then(function (j) { say("not following: " + (j.error || "the server refused"), "error"); }).catch(function () { say("not following", "error"); });
      } else say("reconnecting…", "muted");
    });
    source.addEventListener("lines", function (ev) {
      var d = JSON.parse(ev.data);
      if (d.skipped) d.lines.push({ rank: null, stream: "-", seq: 0, time: "                       ", line: "[" + d.skipped + " more lines of this commit not shown: search for them]", context: true });
      if (paused) { held = held.concat(d.lines); return; }
      list.append(d.lines, KEEP);
      box.setAttribute("data-lines", list.items().length);
    });
    source.addEventListener("dropped", function (ev) {
      var d = JSON.parse(ev.data);
      list.append([{ rank: null, stream: "-", seq: 0, time: "                       ", line: "[coroner: " + d.reason + "]", context: true }], KEEP);
    });
    source.addEventListener("report", function (ev) {
      var b = JSON.parse(ev.data);
      var key = JSON.stringify(b);
      if (verdict !== null && verdict !== key) refreshBanner();
      verdict = key;
      var v = document.getElementById("verdict");
      if (v) v.setAttribute("data-live-verdict", b.verdict);
    });
  }
  // The banner as the server renders it, swapped in place; and the timeline drawn again.
  function refreshBanner() {
    fetch(location.pathname).then(function (r) { return r.text(); }).then(function (html) {
      var doc = new DOMParser().parseFromString(html, "text/html");
      ["verdict", "live-findings"].forEach(function (id) {
        var now = document.getElementById(id), fresh = doc.getElementById(id);
        if (now && fresh) now.replaceWith(fresh);
      });
      if (window.coronerTimeline) window.coronerTimeline.reload();
    });
  }
  form.addEventListener("submit", function (ev) { ev.preventDefault(); list.set([]); open(); });
  document.getElementById("tail-pause").onclick = function () {
    paused = !paused;
    this.textContent = paused ? "resume" : "pause";
    if (!paused && held.length) { list.append(held, KEEP); held = []; }
  };
  box.addEventListener("click", function (ev) {
    var i = list.rowOf(ev.target), h = list.items()[i];
    if (h && h.stream !== "-" && window.coronerSelectLine) window.coronerSelectLine(h);
  });
  open();
})();
