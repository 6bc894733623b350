// aifab dashboard: draw the charts embedded as JSON, and send the CSRF token with htmx calls.
// No inline script runs (the Content-Security-Policy forbids it): everything starts here.
(function () {
  "use strict";

  function drawCharts(root) {
    if (typeof Chart === "undefined") return;
    root.querySelectorAll("canvas[data-spec]").forEach(function (canvas) {
      if (canvas.dataset.drawn) return;
      var source = document.getElementById(canvas.dataset.spec);
      if (!source) return;
      var box = canvas.parentElement;
      if (box && box.dataset.height) box.style.height = box.dataset.height + "px";
      var old = Chart.getChart(canvas);
      if (old) old.destroy();
      new Chart(canvas, JSON.parse(source.textContent));
      canvas.dataset.drawn = "1";
    });
  }

  document.addEventListener("DOMContentLoaded", function () { drawCharts(document); });
  document.addEventListener("htmx:afterSettle", function (e) { drawCharts(e.target); });
  document.addEventListener("htmx:configRequest", function (e) {
    var token = document.body.dataset.csrf;
    if (token) e.detail.headers["X-CSRF-Token"] = token;
  });
  // Confirm dangerous buttons (data-confirm) without inline handlers.
  document.addEventListener("submit", function (e) {
    var message = e.target.dataset ? e.target.dataset.confirm : null;
    if (message && !window.confirm(message)) e.preventDefault();
  });
})();

// Data section: the labeling queue. A number key clicks the label button whose
// data-label-key matches (in a form marked data-label-form), unless the person is typing.
(function () {
  "use strict";
  document.addEventListener("keydown", function (e) {
    if (e.ctrlKey || e.metaKey || e.altKey || e.repeat) return;
    var target = e.target;
    if (target && (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName))) return;
    var form = document.querySelector("form[data-label-form]");
    if (!form || form.dataset.sent) return;
    var button = form.querySelector('button[data-label-key="' + e.key + '"]');
    if (!button) return;
    e.preventDefault();
    form.dataset.sent = "1";  // one label per row, even if the key is pressed twice
    if (form.requestSubmit) form.requestSubmit(button); else button.click();
  });
})();
