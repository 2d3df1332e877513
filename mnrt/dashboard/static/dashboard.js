// Charts from the JSON each page embeds, and the search boxes that filter table rows.
(function () {
  "use strict";
  function filter(input) {
    var table = document.getElementById(input.dataset.table);
    var words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
    var shown = 0;
    Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
      var text = row.dataset.text || (row.dataset.text = row.textContent.toLowerCase());
      var hit = words.every(function (w) { return text.indexOf(w) !== -1; });
      row.hidden = !hit;
      if (hit) { shown += 1; }
    });
    var count = document.getElementById(input.dataset.table + "-count");
    if (count) { count.textContent = shown; }
  }
  function select(sel) {
    var table = document.getElementById(sel.dataset.table);
    var chosen = {};
    document.querySelectorAll("select[data-table='" + sel.dataset.table + "']").forEach(function (s) {
      chosen[s.dataset.column] = s.value;
    });
    Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
      row.hidden = Object.keys(chosen).some(function (col) {
        return chosen[col] !== "*" && row.dataset[col] !== chosen[col];
      });
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("input.search").forEach(function (input) {
      input.addEventListener("input", function () { filter(input); });
    });
    document.querySelectorAll("select.pick").forEach(function (s) {
      s.addEventListener("change", function () { select(s); });
      select(s);
    });
    var charts = document.querySelectorAll("script.chart-data");
    var pending = [];
    charts.forEach(function (script) {
      var fig = JSON.parse(script.textContent);
      pending.push(window.Plotly.newPlot(fig.id, fig.data, fig.layout, { responsive: true, displaylogo: false }));
    });
    Promise.all(pending).then(function () {
      document.body.dataset.chartsRendered = String(pending.length);
    });
  });
})();
