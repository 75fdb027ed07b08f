// The page of `orchestrate serve` (orchestrator/server/pages.py). No build step, no framework.
// The token is asked for once and kept in sessionStorage (this tab only); every request sends it
// as an Authorization header, so a cross-site page can neither read these pages nor act (no cookie).
"use strict";
(function () {
  const KEY = "orchestrator-token";
  const body = document.body;
  const page = body.dataset.page;
  const runId = body.dataset.run;
  const statusEl = document.getElementById("status");
  const content = document.getElementById("content");
  const form = document.getElementById("token-form");
  const forget = document.getElementById("forget");
  let timer = null;

  function token() { return sessionStorage.getItem(KEY) || ""; }
  function headers(extra) {
    const h = Object.assign({}, extra || {});
    if (token()) h["Authorization"] = "Bearer " + token();
    return h;
  }
  function say(text, cls) { statusEl.textContent = text; statusEl.className = "status " + (cls || ""); }
  function askToken(why) {
    form.hidden = false; forget.hidden = true;
    say(why, "error");
    stop();
    document.getElementById("token").focus();
  }
  function stop() { if (timer) { clearInterval(timer); timer = null; } }

  async function get(url) {
    const r = await fetch(url, { headers: headers(), credentials: "omit", cache: "no-store" });
    if (r.status === 401) { askToken("Enter your token (the server refused this one or none was given)."); return null; }
    if (!r.ok) {
      let msg = r.status + "";
      try { msg = (await r.json()).error || msg; } catch (e) { /* not JSON */ }
      say(msg, "error");
      return null;
    }
    return r;
  }

  async function whoami() {
    const r = await get("/whoami");
    if (!r) return false;
    const me = await r.json();
    document.getElementById("who").textContent = me.name + " (" + me.role + ")";
    form.hidden = true; forget.hidden = false;
    return true;
  }

  async function refresh() {
    const url = page === "run" ? "/ui/fragments/runs/" + encodeURIComponent(runId) : "/ui/fragments/runs";
    const r = await get(url);
    if (!r) return;
    // server-rendered, escaped HTML of this same origin
    const focused = document.activeElement && document.activeElement.id;
    const result = document.getElementById("action-result");
    const kept = result ? result.textContent : "";
    content.innerHTML = await r.text();
    const again = document.getElementById("action-result");
    if (again) again.textContent = kept;
    if (focused && document.getElementById(focused)) document.getElementById(focused).focus();
    wire();
    say("updated " + new Date().toLocaleTimeString(), "ok");
    body.dataset.loaded = "1";
  }

  async function post(path, payload) {
    const out = document.getElementById("action-result");
    const r = await fetch(path, {
      method: "POST", credentials: "omit", cache: "no-store",
      headers: headers({ "Content-Type": "application/json" }), body: JSON.stringify(payload),
    });
    let answer = {};
    try { answer = await r.json(); } catch (e) { /* not JSON */ }
    if (out) {
      out.textContent = r.ok ? (answer.message || "done: " + path.split("/").pop()) : ("refused (" + r.status + "): " + (answer.error || ""));
      out.className = r.ok ? "ok" : "error";
    }
    await refresh();
  }

  function wire() {
    const approve = document.getElementById("approve");
    const abort = document.getElementById("abort");
    if (approve) approve.onclick = () => post("/runs/" + encodeURIComponent(runId) + "/approve", { gate: approve.dataset.gate || "*" });
    if (abort) abort.onclick = () => {
      if (window.confirm("Abort " + runId + "? The current phase's rollback runs.")) post("/runs/" + encodeURIComponent(runId) + "/abort", {});
    };
  }

  async function start() {
    if (!(await whoami())) return;
    await refresh();
    stop();
    timer = setInterval(refresh, 1000);
  }

  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const value = document.getElementById("token").value.trim();
    if (value) sessionStorage.setItem(KEY, value);
    document.getElementById("token").value = "";
    start();
  });
  forget.addEventListener("click", () => { sessionStorage.removeItem(KEY); location.reload(); });
  start();
})();
