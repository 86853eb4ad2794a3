(function () {
  "use strict";
  var hover = document.getElementById("hover");
  var timeline = document.getElementById("tl");
  if (timeline && hover) {
    var show = function (event) {
      var mark = event.target.closest ? event.target.closest("[title]") : null;
      if (!mark || !timeline.contains(mark)) return;
      hover.textContent = mark.getAttribute("title");
      hover.className = "hover on";
    };
    timeline.addEventListener("mouseover", show);
    timeline.addEventListener("focusin", show);
  }
  var filter = document.getElementById("tl-filter");
  var flagged = document.getElementById("tl-flagged");
  var apply = function () {
    if (!timeline) return;
    var words = filter && filter.value ? filter.value.toLowerCase().split(/\s+/).filter(Boolean) : [];
    var onlyFlagged = flagged && flagged.checked;
    var rows = timeline.querySelectorAll(".row");
    for (var i = 0; i < rows.length; i++) {
      var row = rows[i];
      var id = (row.getAttribute("data-id") + " " + row.getAttribute("data-role")).toLowerCase();
      var ok = words.every(function (w) { return id.indexOf(w) >= 0; });
      if (onlyFlagged && !row.getAttribute("data-flags")) ok = false;
      row.style.display = ok ? "" : "none";
    }
  };
  if (filter) filter.addEventListener("input", apply);
  if (flagged) flagged.addEventListener("change", apply);
  var findings = document.querySelectorAll(".finding[data-row]");
  for (var f = 0; f < findings.length; f++) {
    findings[f].addEventListener("click", function () {
      if (!timeline) return;
      var want = this.getAttribute("data-row");
      var rows = timeline.querySelectorAll(".row");
      for (var i = 0; i < rows.length; i++) {
        if (rows[i].getAttribute("data-id") === want) {
          rows[i].style.display = "";
          rows[i].scrollIntoView({ block: "center" });
          rows[i].classList.add("flash");
          setTimeout(function (r) { r.classList.remove("flash"); }, 1500, rows[i]);
          break;
        }
      }
    });
  }
  var buttons = document.querySelectorAll("button.copy");
  for (var b = 0; b < buttons.length; b++) {
    buttons[b].addEventListener("click", function () {
      var block = document.getElementById(this.getAttribute("data-copy"));
      if (!block) return;
      var range = document.createRange();
      range.selectNodeContents(block);
      var selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      var done = false;
      try { done = document.execCommand("copy"); } catch (e) { done = false; }
      this.textContent = done ? "Copied" : "Selected: press Ctrl+C";
    });
  }
  var tables = document.querySelectorAll("table.runs");
  for (var t = 0; t < tables.length; t++) {
    (function (table) {
      var heads = table.querySelectorAll("th");
      for (var h = 0; h < heads.length; h++) {
        (function (th, column) {
          th.addEventListener("click", function () {
            var ascending = !th.classList.contains("asc");
            for (var k = 0; k < heads.length; k++) heads[k].classList.remove("asc", "desc");
            th.classList.add(ascending ? "asc" : "desc");
            var body = table.tBodies[0];
            var rows = Array.prototype.slice.call(body.rows);
            var key = function (row) {
              var cell = row.cells[column];
              var value = cell ? (cell.getAttribute("data-sort") || cell.textContent) : "";
              var number = parseFloat(value);
              return isNaN(number) || String(number) !== value.trim() ? value.toLowerCase() : number;
            };
            rows.sort(function (a, b) {
              var x = key(a), y = key(b);
              if (typeof x !== typeof y) { x = String(x); y = String(y); }
              return (x < y ? -1 : x > y ? 1 : 0) * (ascending ? 1 : -1);
            });
            for (var r = 0; r < rows.length; r++) body.appendChild(rows[r]);
          });
        })(heads[h], h);
      }
    })(tables[t]);
  }
})();
