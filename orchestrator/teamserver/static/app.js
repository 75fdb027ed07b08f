// The page of `orchestrate serve` (orchestrator/teamserver/pages.py). No build step, no framework.
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
  let lastResult = { text: "", cls: "", state: "" };

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
    if (r.status === 401) {
      const had = token() !== "";
      if (had) sessionStorage.removeItem(KEY);
      askToken(had ? "The server refused that token: check it (ORCHESTRATOR_SERVER_TOKEN or your own from `orchestrate serve token add`) and enter it again."
                   : "Enter your token to see the runs.");
      return null;
    }
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
    const url = page === "run" ? "/ui/fragments/runs/" + encodeURIComponent(runId)
      : page === "fleet" ? "/ui/fragments/fleet/" + encodeURIComponent(runId) + location.search : "/ui/fragments/runs";
    const r = await get(url);
    if (!r) return;
    // server-rendered, escaped HTML of this same origin
    const focused = document.activeElement && document.activeElement.id;
    content.innerHTML = await r.text();
    // the answer to the last action (and its colour) outlives the refresh, until the run ends
    const run = content.querySelector(".run");
    if (run && run.dataset.terminal === "1" && lastResult.state !== run.dataset.outcome) lastResult = { text: "", cls: "", state: run.dataset.outcome };
    const again = document.getElementById("action-result");
    if (again) { again.textContent = lastResult.text; again.className = lastResult.cls; }
    if (focused && document.getElementById(focused)) document.getElementById(focused).focus();
    wire();
    say("updated " + new Date().toLocaleTimeString(), "ok");
    body.dataset.loaded = "1";
  }

  async function post(path, payload) {
    const r = await fetch(path, {
      method: "POST", credentials: "omit", cache: "no-store",
      headers: headers({ "Content-Type": "application/json" }), body: JSON.stringify(payload),
    });
    let answer = {};
    try { answer = await r.json(); } catch (e) { /* not JSON */ }
    lastResult = {
      text: r.ok ? (answer.message || "done: " + path.split("/").pop()) : ("refused (" + r.status + "): " + (answer.error || "")),
      cls: r.ok ? "ok" : "error", state: "",
    };
    await refresh();
  }

  function wire() {
    const base = "/runs/" + encodeURIComponent(runId);
    const approve = document.getElementById("approve");
    const abort = document.getElementById("abort");
    const pause = document.getElementById("pause");
    const cont = document.getElementById("continue");
    // Approve names the gate the run waits at (never "*"): the server refuses any other from a page
    if (approve) approve.onclick = () => {
      const gate = approve.dataset.gate;
      if (!gate) return;
      if (window.confirm("Approve " + gate + " of " + runId + "? The run goes on past this gate.")) post(base + "/approve", { gate: gate, at_gate: true });
    };
    if (abort) abort.onclick = () => {
      if (window.confirm("Abort " + runId + "? The current phase's rollback runs.")) post(base + "/abort", {});
    };
    if (pause) pause.onclick = () => {
      if (window.confirm("Pause " + runId + "? The runner stops before its next safe step and waits for Continue.")) post(base + "/pause", {});
    };
    if (cont) cont.onclick = () => post(base + "/continue", {});
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
