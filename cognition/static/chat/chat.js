// The chat page: send messages, poll for new ones and for run progress, approve from cards.
(function () {
  "use strict";
  var root = document.getElementById("chat");
  if (!root) { return; }
  var list = document.getElementById("messages");
  var runsList = document.getElementById("runs");
  var statusLine = document.getElementById("status");
  var form = document.getElementById("send");
  var textArea = document.getElementById("text");
  var thinking = document.getElementById("thinking");
  var sendError = document.getElementById("send-error");
  var csrf = root.querySelector("[name=csrfmiddlewaretoken]").value;
  var lastId = parseInt(root.dataset.lastId || "0", 10);
  var POLL_MS = 1500;
  var runErrors = {};  // run id → the last refusal of its Cancel, kept across re-renders

  function append(items) {
    items.forEach(function (item) {
      if (item.id <= lastId) { return; }
      list.insertAdjacentHTML("beforeend", item.html);
      lastId = item.id;
    });
    list.scrollTop = list.scrollHeight;
  }

  function renderRuns(runs) {
    runsList.textContent = "";
    if (!runs.length) {
      var none = document.createElement("li");
      none.className = "muted";
      none.textContent = "No run started here yet.";
      runsList.appendChild(none);
      return;
    }
    runs.forEach(function (run) {
      var li = document.createElement("li");
      li.className = "run";
      li.dataset.runId = run.id;
      li.dataset.status = run.status;
      var title = document.createElement("div");
      // A run started over the API or by a schedule is listed once its news reached this chat.
      title.textContent = run.id + " · " + run.status + (run.review ? " · review" : "") +
        (run.origin === "elsewhere" ? " · started elsewhere" : "");
      var task = document.createElement("div");
      task.className = "muted";
      task.textContent = run.task;
      var progress = document.createElement("div");
      progress.className = "muted progress";
      progress.textContent = "iteration " + run.iteration + "/" + run.max_iterations +
        " · attempt " + run.attempt + "/" + run.max_attempts;
      var step = document.createElement("div");
      step.className = "step";
      step.textContent = run.step || "";
      li.appendChild(title);
      li.appendChild(task);
      li.appendChild(step);
      li.appendChild(progress);
      if (run.cancel_url) {
        // Only a run still going has a bar: a finished run's share of its budget is no progress.
        var bar = document.createElement("div");
        bar.className = "bar";
        var fill = document.createElement("span");
        var share = run.max_iterations ? run.iteration / run.max_iterations : 0;
        fill.style.width = Math.round(share * 100) + "%";
        bar.appendChild(fill);
        li.appendChild(bar);
      }
      var actions = document.createElement("div");
      actions.className = "run-actions";
      var link = document.createElement("a");
      link.className = "run-link";
      link.href = run.url;
      link.textContent = "Open run";
      actions.appendChild(link);
      if (run.cancel_url) {
        var cancel = document.createElement("button");
        cancel.type = "button";
        cancel.className = "cancel-run";
        cancel.dataset.url = run.cancel_url;
        cancel.textContent = "Cancel";
        actions.appendChild(cancel);
      }
      var error = document.createElement("p");
      error.className = "run-error error";
      error.setAttribute("role", "alert");
      error.textContent = runErrors[run.id] || "";
      error.hidden = !runErrors[run.id];
      li.appendChild(actions);
      li.appendChild(error);
      runsList.appendChild(li);
    });
  }

  // Review cards follow the policy wherever it was approved (this card, another card of the
  // same skill, the chat in words, the admin): the button goes once the skill is approved.
  function renderCards(skills) {
    list.querySelectorAll(".review-card[data-skill]").forEach(function (card) {
      var status = skills[card.dataset.skill];
      if (!status) { return; }
      var label = card.querySelector(".card-status");
      if (label) { label.textContent = status; }
      var button = card.querySelector("button.approve-skill");
      if (status === "approved" && button) {
        var done = document.createElement("p");
        done.className = "approved";
        done.textContent = "Approved.";
        button.replaceWith(done);
        // What approving would grant is history now: the policy holds it.
        var proposal = card.querySelector(".approval-proposal");
        if (proposal) { proposal.remove(); }
      }
    });
  }

  function renderStatus(state) {
    statusLine.dataset.status = state.status;
    statusLine.textContent = state.pending_question
      ? "Waiting for your answer to: " + state.pending_question : "";
  }

  function poll() {
    fetch(root.dataset.stateUrl + "?after=" + lastId, {
      headers: { "Accept": "application/json" }, credentials: "same-origin"
    }).then(function (response) {
      return response.ok ? response.json() : null;
    }).then(function (state) {
      if (!state) { return; }
      append(state.messages);
      renderRuns(state.runs);
      renderCards(state.skills || {});
      renderStatus(state);
    }).catch(function () { /* the next poll tries again */ });
  }

  function post(url, body) {
    return fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: {
        "Content-Type": "application/json",
        "Accept": "application/json",
        "X-CSRFToken": csrf
      },
      body: JSON.stringify(body || {})
    }).then(function (response) {
      return response.json().then(function (data) { return { ok: response.ok, data: data }; });
    });
  }

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    var text = textArea.value;
    if (!text.trim()) { return; }
    form.querySelector("button").disabled = true;
    thinking.hidden = false;
    sendError.hidden = true;
    post(root.dataset.sendUrl, { text: text }).then(function (result) {
      if (result.ok) {
        textArea.value = "";
        append(result.data.messages);
      } else {
        sendError.textContent = result.data.error ? result.data.error.message : "Sending failed.";
        sendError.hidden = false;
      }
    }).catch(function () {
      sendError.textContent = "Sending failed; check your connection.";
      sendError.hidden = false;
    }).then(function () {
      form.querySelector("button").disabled = false;
      thinking.hidden = true;
      poll();
    });
  });

  list.addEventListener("click", function (event) {
    var button = event.target.closest("button.approve-skill, button.approve-run");
    if (!button) { return; }
    var card = button.closest(".card");
    var error = card.querySelector(".card-error");
    button.disabled = true;
    post(button.dataset.url).then(function (result) {
      if (result.ok) {
        var done = document.createElement("p");
        done.className = "approved";
        done.textContent = button.classList.contains("approve-run") ? "Allowed." : "Approved.";
        button.replaceWith(done);
        var proposal = card.querySelector(".approval-proposal");
        if (proposal && !button.classList.contains("approve-run")) { proposal.remove(); }
        var status = card.querySelector(".card-status");
        if (status) { status.textContent = "approved"; }
        append(result.data.messages);
      } else {
        error.textContent = result.data.error ? result.data.error.message : "Approval failed.";
        error.hidden = false;
        button.disabled = false;
      }
    });
  });

  runsList.addEventListener("click", function (event) {
    var button = event.target.closest("button.cancel-run");
    if (!button) { return; }
    var row = button.closest(".run");
    var error = row.querySelector(".run-error");
    button.disabled = true;
    post(button.dataset.url).then(function (result) {
      if (result.ok) {
        delete runErrors[row.dataset.runId];
        append(result.data.messages);
        poll();
      } else {
        runErrors[row.dataset.runId] =
          result.data.error ? result.data.error.message : "Cancel failed.";
        error.textContent = runErrors[row.dataset.runId];
        error.hidden = false;
        button.disabled = false;
      }
    });
  });

  renderRuns(JSON.parse(document.getElementById("runs-data").textContent));
  setInterval(poll, POLL_MS);
})();
