/* Run console: while the run is active, poll the live endpoint every few seconds and swap in
   the status panel and the trace when they changed, dropping the notices of an earlier
   transition once the status moved on. Stops at a terminal status. */
(function () {
  "use strict";

  function start() {
    var root = document.querySelector(".mc-console");
    if (!root || root.dataset.terminal === "true") {
      return;
    }
    var url = root.dataset.liveUrl;
    var interval = parseInt(root.dataset.pollMs, 10) || 2000;
    var fingerprint = root.dataset.fingerprint || "";
    var timer = null;

    function typing() {
      // Never replace a form the user is filling in; the next poll after it loses focus will.
      var active = document.activeElement;
      return Boolean(active && root.contains(active) &&
        (active.tagName === "TEXTAREA" || active.tagName === "INPUT") && active.value);
    }

    function dropStaleNotices(status) {
      // The page's notices ("Answer sent. Run …: awaiting_input → running.") report the
      // transition that led here; once the run has moved on they no longer describe it.
      if (status && status !== root.dataset.status) {
        root.dataset.status = status;
        document.querySelectorAll("ul.messagelist").forEach(function (list) {
          list.remove();
        });
      }
    }

    function apply(data) {
      dropStaleNotices(data.status);
      if (data.html && !typing()) {
        document.getElementById("mc-run-state").innerHTML = data.html.state;
        document.getElementById("mc-trace").innerHTML = data.html.trace;
        fingerprint = data.fingerprint;
        root.dataset.fingerprint = fingerprint;
      }
      if (data.terminal && fingerprint === data.fingerprint) {
        root.dataset.terminal = "true";
        var note = document.getElementById("mc-live-note");
        if (note) {
          note.textContent = "This run is finished.";
        }
        return false;
      }
      return true;
    }

    function poll() {
      fetch(url + "?since=" + encodeURIComponent(fingerprint), {
        credentials: "same-origin",
        headers: { Accept: "application/json" },
      })
        .then(function (response) {
          if (!response.ok) {
            throw new Error("live endpoint answered " + response.status);
          }
          return response.json();
        })
        .then(function (data) {
          if (apply(data)) {
            timer = window.setTimeout(poll, interval);
          }
        })
        .catch(function () {
          // A failed poll (server restart, network blip) is retried at a slower pace.
          timer = window.setTimeout(poll, interval * 3);
        });
    }

    timer = window.setTimeout(poll, interval);
    window.addEventListener("pagehide", function () {
      if (timer !== null) {
        window.clearTimeout(timer);
      }
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
