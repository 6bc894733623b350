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

// --- jobs: follow a job's log ([data-follow-log] = its server-sent events URL) ------------------
// Lines are added as text nodes, never as markup: a job's output is untrusted.
(function () {
  "use strict";

  var STATES = ["pending", "running", "succeeded", "failed", "cancelled"];

  function showState(state) {
    if (STATES.indexOf(state) < 0) return;
    document.querySelectorAll("[data-job-state]").forEach(function (el) {
      el.textContent = state;
      el.className = "state state-" + state;
    });
  }

  function follow(pre) {
    if (pre.dataset.following || typeof EventSource === "undefined") return;
    pre.dataset.following = "1";
    var status = document.getElementById(pre.dataset.logStatus);
    var say = function (text) { if (status) status.textContent = text; };
    var source = new EventSource(pre.dataset.followLog);
    source.addEventListener("log", function (e) {
      var atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.appendChild(document.createTextNode(e.data));
      if (atBottom) pre.scrollTop = pre.scrollHeight;
    });
    source.addEventListener("state", function (e) {
      showState(e.data);
      say("Following the log (job " + e.data + ").");
    });
    source.addEventListener("end", function (e) {
      source.close();
      showState(e.data);
      pre.dataset.complete = "1";
      say("Log complete (job " + e.data + "): reload for its accounting.");
    });
    source.addEventListener("stop", function (e) {
      source.close();
      say("The log stopped: " + e.data);
    });
    source.addEventListener("error", function () {
      if (source.readyState === EventSource.CLOSED) say("The log stream closed: reload the page.");
    });
  }

  function start(root) { root.querySelectorAll("[data-follow-log]").forEach(follow); }
  document.addEventListener("DOMContentLoaded", function () { start(document); });
  document.addEventListener("htmx:afterSettle", function (e) { start(e.target); });
// Data section: the labeling queue. A number key clicks the label button whose
// data-label-key matches (in a form marked data-label-form), unless the person is typing.
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
