// The approval page's script: it keeps the pending list up to date from the server's event stream,
// counts the deadlines down, and sends the decisions. Request data only ever reaches the page as text
// (textContent and attribute values), never as HTML.
"use strict";

(() => {
  const body = document.body;
  const pending = document.getElementById("pending");
  const pendingEmpty = document.getElementById("pending-empty");
  const recentRows = document.getElementById("recent-rows");
  const requestTemplate = document.getElementById("request-template");
  const recentTemplate = document.getElementById("recent-template");
  const voteTemplate = document.getElementById("vote-template");
  const connection = document.getElementById("connection");

  // skew is the server clock minus the browser clock, so that time left follows the server's clock.
  let skew = Date.parse(body.dataset.now) - Date.now();

  function formatLeft(ms) {
    if (!(ms > 0)) return "deadline passed";
    const secs = Math.floor(ms / 1000);
    const h = Math.floor(secs / 3600), m = Math.floor(secs / 60) % 60, s = secs % 60;
    const two = (n) => String(n).padStart(2, "0");
    if (h > 0) return `${h}h ${two(m)}m`;
    if (m > 0) return `${m}m ${two(s)}s`;
    return `${s}s`;
  }

  function tick() {
    const now = Date.now() + skew;
    for (const article of pending.querySelectorAll("article.request")) {
      article.querySelector(".time-left").textContent = formatLeft(Date.parse(article.dataset.deadline) - now);
    }
  }

  function setText(root, selector, text) {
    root.querySelector(selector).textContent = text || "";
  }

  // timestamp is an RFC 3339 time to the second, as the server renders it.
  function timestamp(text) {
    const ms = Date.parse(text);
    return Number.isNaN(ms) ? "" : new Date(ms).toISOString().replace(/\.\d+Z$/, "Z");
  }

  // showVotes shows a request's quorum: the votes so far and how many more approvals it needs. It is
  // hidden for a request that needs one approval.
  function showVotes(article, req) {
    article.querySelector(".votes").hidden = !(req.approvals_required > 1);
    setText(article, ".approvals-needed", String(req.approvals_needed ?? ""));
    setText(article, ".approvals-required", String(req.approvals_required ?? ""));
    article.querySelector(".vote-list").replaceChildren(...(req.votes || []).map((vote) => {
      const item = voteTemplate.content.firstElementChild.cloneNode(true);
      for (const [selector, text] of [[".voter", vote.approver], [".vote", vote.vote], [".at", timestamp(vote.at)], [".vote-note", vote.note]]) {
        setText(item, selector, text);
      }
      return item;
    }));
  }

  // showPreview shows what the tool says the call would do (the request's context.preview, as the
  // server renders it): its output, or why there is none, with its digest and image. The section is
  // hidden for a request without a preview.
  function showPreview(article, preview) {
    article.querySelector(".preview").hidden = !preview;
    if (!preview) return;
    article.querySelector(".preview-failed").hidden = !preview.failed;
    setText(article, ".preview-error", preview.error);
    article.querySelector(".preview-output").hidden = !!preview.failed;
    setText(article, ".preview-output", preview.output);
    article.querySelector(".preview-cut").hidden = !preview.cut;
    for (const [name, text] of [["format", preview.format], ["digest", preview.digest], ["image", preview.image], ["image-id", preview.image_id]]) {
      setText(article, `.preview-${name}`, text);
      article.querySelector(`.preview-${name}`).hidden = !text;
      article.querySelector(`.preview-${name}-label`).hidden = !text;
    }
  }

  function newRequest(req) {
    const article = requestTemplate.content.firstElementChild.cloneNode(true);
    article.dataset.id = req.id;
    article.dataset.deadline = req.deadline_at;
    setText(article, ".tool", req.tool);
    setText(article, ".id", req.id);
    setText(article, ".key", req.idempotency_key);
    article.querySelector(".key").hidden = !req.idempotency_key;
    article.querySelector(".key-label").hidden = !req.idempotency_key;
    setText(article, ".instance-name", req.instance_name);
    setText(article, ".instance-id", req.instance_id);
    setText(article, ".created", req.created_at);
    setText(article, ".deadline", req.deadline_at);
    setText(article, ".arguments", req.arguments);
    showPreview(article, req.preview);
    setText(article, ".agent-reasoning", req.agent_reasoning);
    article.querySelector(".reasoning").hidden = !req.agent_reasoning;
    setText(article, ".context", req.context);
    article.querySelector(".runtime-context").hidden = !req.context;
    showVotes(article, req);
    return article;
  }

  function newRecent(req) {
    const row = recentTemplate.content.firstElementChild.cloneNode(true);
    row.dataset.id = req.id;
    for (const [selector, text] of [[".tool", req.tool], [".instance", req.instance_name], [".status", req.status], [".note", req.note],
      [".decided", req.decided_at], [".expires", req.expires_at], [".id", req.id]]) {
      setText(row, selector, text);
    }
    return row;
  }

  // apply shows a snapshot. Rows already on the page stay as they are, so that a note being typed or a
  // validity being chosen survives updates, except for their votes; new rows go where the snapshot
  // puts them (newest first).
  function apply(snap) {
    skew = Date.parse(snap.now) - Date.now();
    const existing = new Map();
    for (const article of pending.querySelectorAll("article.request")) existing.set(article.dataset.id, article);
    const wanted = new Set(snap.pending.map((req) => req.id));
    for (const [id, article] of existing) {
      if (!wanted.has(id)) article.remove();
    }
    let previous = null;
    for (const req of snap.pending) {
      let article = existing.get(req.id);
      if (article) showVotes(article, req);
      else article = newRequest(req);
      if (previous === null) {
        if (pending.firstElementChild !== article) pending.prepend(article);
      } else if (previous.nextElementSibling !== article) {
        previous.after(article);
      }
      previous = article;
    }
    pendingEmpty.hidden = snap.pending.length > 0;
    recentRows.replaceChildren(...snap.recent.map(newRecent));
    tick();
  }

  function showError(article, message) {
    const error = article.querySelector(".error");
    error.textContent = message;
    error.hidden = !message;
  }

  function showRecorded(article, message) {
    const recorded = article.querySelector(".recorded");
    recorded.textContent = message;
    recorded.hidden = !message;
  }

  async function decide(article, action) {
    const payload = { note: article.querySelector(".note").value };
    if (action === "approve") {
      const text = article.querySelector(".validity").value.trim();
      payload.valid_for_minutes = /^-?\d+$/.test(text) ? Number(text) : text;
    }
    const buttons = article.querySelectorAll("button");
    buttons.forEach((b) => { b.disabled = true; });
    showError(article, "");
    showRecorded(article, "");
    try {
      const response = await fetch(`api/requests/${encodeURIComponent(article.dataset.id)}/${action}`, {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(payload),
      });
      if (response.ok) {
        const decided = await response.json();
        if (decided.status === "pending") {
          // A vote short of the quorum: the request waits for the other approvers.
          showRecorded(article, `Your approval is recorded: ${decided.approvals_needed} more needed.`);
          buttons.forEach((b) => { b.disabled = false; });
          return;
        }
        article.remove();
        pendingEmpty.hidden = pending.querySelector("article.request") !== null;
        return;
      }
      let detail = `${response.status} ${response.statusText}`;
      try {
        const body = await response.json();
        if (body.error && body.error.message) detail = body.error.message;
      } catch (_) { /* not an error response: keep the status line */ }
      showError(article, detail);
    } catch (err) {
      showError(article, `The provider did not answer: ${err.message}`);
    }
    buttons.forEach((b) => { b.disabled = false; });
  }

  pending.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-action]");
    if (!button) return;
    decide(button.closest("article.request"), button.dataset.action);
  });

  function setConnection(state, text) {
    connection.dataset.state = state;
    connection.textContent = text;
  }

  const events = new EventSource("events");
  events.addEventListener("snapshot", (event) => {
    apply(JSON.parse(event.data));
    setConnection("live", "Live: the list updates by itself.");
  });
  events.addEventListener("error", () => {
    if (events.readyState === EventSource.CLOSED) {
      setConnection("closed", "Disconnected: the session may have ended. Sign in again at /ui/.");
    } else {
      setConnection("reconnecting", "Reconnecting…");
    }
  });

  tick();
  setInterval(tick, 1000);
})();
