// A virtualised list: only the rows in view (and a few around them) are in the DOM, whatever the
// number of items, so 16,384 ranks or 100,000 tail lines cost a few dozen elements.
// coronerVList(box, rowHeight, render) -> {set, append, items, scrollTo}; render(item, i)
// returns one row's inner HTML (no style attributes: the page's CSP refuses them). The box must have a fixed height and overflow-y: auto.
(function () {
  "use strict";
  window.coronerVList = function (box, rowH, render, rowClass) {
    var items = [], selected = -1;
    var inner = document.createElement("div");
    inner.className = "vlist-inner";
    box.appendChild(inner);
    var queued = false;
    function paint() {
      queued = false;
      var top = box.scrollTop, h = box.clientHeight || 400;
      var a = Math.max(0, Math.floor(top / rowH) - 8), b = Math.min(items.length, Math.ceil((top + h) / rowH) + 8);
      inner.style.height = items.length * rowH + "px";
      var html = "";
      for (var i = a; i < b; i++) {
        var cls = "vrow" + (i === selected ? " selected" : "") + (rowClass ? " " + rowClass(items[i], i) : "");
        html += "<div class='" + cls + "' data-i='" + i + "'>" + render(items[i], i) + "</div>";
      }
      inner.innerHTML = html;
      // Placed through the CSSOM: the server's Content-Security-Policy refuses style attributes.
      for (var r = inner.firstChild, k = a; r; r = r.nextSibling, k++) { r.style.top = k * rowH + "px"; r.style.height = rowH + "px"; }
    }
    function later() { if (!queued) { queued = true; requestAnimationFrame(paint); } }
    box.addEventListener("scroll", later);
    window.addEventListener("resize", later);
    return {
      set: function (list) { items = list; selected = -1; box.scrollTop = 0; paint(); },
      // Appends, keeping at most `max` items; follows the end when the view was at the end.
      append: function (list, max) {
        var atEnd = box.scrollTop + box.clientHeight >= inner.offsetHeight - rowH * 2;
        items = items.concat(list);
        if (max && items.length > max) { var cut = items.length - max; items = items.slice(cut); selected = Math.max(-1, selected - cut); }
        paint();
        if (atEnd) box.scrollTop = items.length * rowH;
        paint();
      },
      items: function () { return items; },
      selected: function () { return selected; },
      select: function (i) {
        if (i < 0 || i >= items.length) return;
        selected = i;
        var y = i * rowH;
        if (y < box.scrollTop) box.scrollTop = y;
        else if (y + rowH > box.scrollTop + box.clientHeight) box.scrollTop = y + rowH - box.clientHeight;
        paint();
      },
      rowOf: function (target) { var r = target.closest(".vrow"); return r ? +r.getAttribute("data-i") : -1; },
    };
  };
})();
