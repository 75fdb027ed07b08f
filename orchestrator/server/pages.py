"""The web page of `orchestrate serve`: the runs list and a live page per run.

Shape (no front-end build, no template engine: `string.Template` and `html.escape`):

    GET /ui                          the runs list (a shell; no data, no token needed)
    GET /ui/runs/{id}                a run's page (a shell)
    GET /ui/static/{app.js,app.css}  the page's script and style (packaged files)
    GET /ui/fragments/runs           viewer   the runs table, server-rendered HTML
    GET /ui/fragments/runs/{id}      viewer   the run: where it is in the runbook's states, the
                                              evidence of each gate, the journal's timeline, buttons
    GET /whoami                      viewer   {"name", "role"}: the page shows buttons to operators only

Rules and reasons:
- **The data needs the same token as the API.** The shells carry no data; the script asks for the
  token once, keeps it in `sessionStorage` (gone with the tab) and sends it as an
  `Authorization: Bearer` header with `fetch`, which a cross-site page cannot do (no cookie, so no
  CSRF). The fragments go through the same `_route` role check as the JSON routes.
- **Approve / Abort** are the existing POST routes, sent by `fetch` with `Content-Type:
  application/json` from the same origin: the guards (orchestrator/server/guards.py) still refuse
  anything else. A viewer's page shows the buttons disabled, and the server answers 403 anyway.
- **Live by polling** (`fetch` every second): EventSource cannot send an Authorization header.
- **Escaped and redacted**: every value goes through `html.escape` after the worker's redactor;
  the pages send a strict Content-Security-Policy (scripts and styles from this server only, no
  inline script, no framing).
- **The states come from the run's transition table** (`runner.table_for` on its pinned runbook),
  never from a hand-kept list: the current state is highlighted in the same order `plan` shows.
"""

from __future__ import annotations

import functools
import html
from datetime import datetime, timezone
from importlib import resources
from string import Template
from typing import Any

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from orchestrator.machine import TERMINALS, Table
from orchestrator.runbook import load_runbook_checked
from orchestrator.runner import table_for
from orchestrator.server.auth import Principal

#: Headers of every page and fragment.
PAGE_HEADERS = {
    "Content-Security-Policy": ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                                "img-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
}
STATIC = {"app.js": "text/javascript; charset=utf-8", "app.css": "text/css; charset=utf-8"}

_SHELL = Template("""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>$title</title><link rel="stylesheet" href="/ui/static/app.css"></head>
<body data-page="$page" data-run="$run_id">
<header><a href="/ui" class="brand">orchestrate</a> <span class="who" id="who"></span>
<form id="token-form" class="token" hidden><label>Token <input id="token" type="password" autocomplete="off"
 placeholder="ORCHESTRATOR_SERVER_TOKEN or your own"></label> <button type="submit">Use</button></form>
<button id="forget" type="button" hidden>Forget token</button></header>
<main><h1>$heading</h1><p id="status" class="status" role="status"></p><div id="content"></div></main>
<script src="/ui/static/app.js"></script></body></html>
""")

_SECTION = {"preflight": "Preflight (changes nothing)", "forward": "Procedure",
            "remedy": "Remedy of the gate above (taken only on its log marker)", "rollback": "Rollback of a phase",
            "full_rollback": "Whole-host rollback"}


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _since(iso: str | None) -> str:
    if not iso:
        return ""
    try:
        at = datetime.fromisoformat(iso)
    except ValueError:
        return iso
    return at.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _page(request: Request, page: str, title: str, heading: str, run_id: str = "") -> Response:
    body = _SHELL.substitute(page=_e(page), title=_e(title), heading=_e(heading), run_id=_e(run_id))
    return HTMLResponse(body, headers=PAGE_HEADERS)


async def runs_page(request: Request) -> Response:
    return _page(request, "runs", "runs · orchestrate", "Runs")


async def run_page(request: Request) -> Response:
    run_id = request.path_params["run_id"]
    return _page(request, "run", f"{run_id} · orchestrate", run_id, run_id)


async def static_file(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in STATIC:
        return Response("not found", status_code=404, media_type="text/plain")
    text = resources.files("orchestrator.server").joinpath("static", name).read_text(encoding="utf-8")
    return Response(text, media_type=STATIC[name], headers={**PAGE_HEADERS, "Cache-Control": "no-cache"})


async def whoami(request: Request, principal: Principal) -> Response:
    return JSONResponse({"name": principal.name, "role": principal.role})


# -- fragments (server-rendered HTML, role viewer)


def _who(worker: Any, run_id: str) -> str:
    """Who submitted the run, as far as this server knows (the journal keeps no submitter)."""
    mine = worker.runs.get(run_id)
    return (mine.by or "") if mine is not None else ""


async def runs_fragment(request: Request, principal: Principal) -> Response:
    worker = request.app.state.worker

    def read() -> list[dict[str, Any]]:
        rows = []
        for r in worker.session.journal.list_runs(limit=100):
            lease = None if r.terminal else worker.session.journal.current_lease(r.host)
            rows.append({"run_id": r.run_id, "host": r.host, "kind": r.kind, "tag": r.tag, "state": r.state,
                         "outcome": r.outcome, "who": _who(worker, r.run_id),
                         "runner": lease.owner if lease is not None and lease.run_id == r.run_id else "",
                         "since": r.created_at.isoformat(), "updated": r.updated_at.isoformat()})
        return worker.redactor.scrub_obj(rows)

    rows = await anyio.to_thread.run_sync(read)
    if not rows:
        return HTMLResponse('<p class="empty">No runs in the journal yet.</p>', headers=PAGE_HEADERS)
    out = ['<table class="runs"><thead><tr><th>run</th><th>host</th><th>kind</th><th>tag</th><th>state</th>'
           '<th>who</th><th>since</th></tr></thead><tbody>']
    for r in rows:
        state = r["outcome"] or r["state"]
        cls = f"outcome-{r['outcome']}" if r["outcome"] else ("running" if r["runner"] else "interrupted")
        who = r["who"] or (f"runner {r['runner']}" if r["runner"] else "")
        out.append(f'<tr class="{_e(cls)}"><td><a href="/ui/runs/{_e(r["run_id"])}">{_e(r["run_id"])}</a></td>'
                   f'<td>{_e(r["host"])}</td><td>{_e(r["kind"])}</td><td>{_e(r["tag"])}</td>'
                   f'<td class="state">{_e(state)}</td><td>{_e(who)}</td><td>{_e(_since(r["since"]))}</td></tr>')
    out.append("</tbody></table>")
    return HTMLResponse("".join(out), headers=PAGE_HEADERS)


@functools.lru_cache(maxsize=64)
def _table(runbook: str, sha: str | None, kind: str, context_json: str) -> Table | None:
    import json

    from orchestrator.journal.base import RunRecord

    try:
        rb, _ = load_runbook_checked(runbook, sha)
    except Exception:  # noqa: BLE001 - the page still shows the journal without the runbook
        return None
    now = datetime.now(timezone.utc)
    run = RunRecord("", "", runbook, None, kind, "", False, None, None, json.loads(context_json), now, now, None)
    try:
        return table_for(run, rb)
    except Exception:  # noqa: BLE001
        return None


def run_table(run: Any) -> Table | None:
    """The run's transition table from its pinned runbook (None if this server cannot load it)."""
    import json

    ident = run.context.get("runbook_identity") or {}
    sha = ident.get("sha256") if isinstance(ident, dict) else None
    keep = {k: run.context.get(k) for k in ("start_phase", "replicas") if run.context.get(k) is not None}
    return _table(run.runbook, sha, run.kind, json.dumps(keep, sort_keys=True))


async def run_fragment(request: Request, principal: Principal) -> Response:
    worker = request.app.state.worker
    run_id = request.path_params["run_id"]

    def read() -> tuple[dict[str, Any], Table | None, set[str]]:
        detail = worker.run_detail(run_id)
        run = worker.session.journal.get_run(run_id)
        table = run_table(run)
        gates = set()
        if table is not None:
            gates = {s for s, n in table.nodes.items() if n.step is not None and n.step.kind == "soak"
                     and n.step.soak is not None and n.step.soak.approval}
        detail["submitted_by"] = _who(worker, run_id)
        return worker.redactor.scrub_obj(detail), table, gates

    detail, table, gates = await anyio.to_thread.run_sync(read)
    return HTMLResponse(render_run(detail, table, gates, operator=principal.may("operator")), headers=PAGE_HEADERS)


def render_run(d: dict[str, Any], table: Table | None, gates: set[str], *, operator: bool) -> str:
    """The run's fragment: summary, buttons, states (current highlighted), evidence, timeline."""
    state, outcome = d["state"], d.get("outcome")
    w = d.get("worker") or {}
    lease = d.get("lease") or {}
    out = ['<section class="summary"><dl>']
    for k, v in (("host", d["host"]), ("kind", d["kind"]), ("tag", d.get("tag")), ("runbook", d.get("runbook")),
                 ("state", outcome or state), ("who", d.get("submitted_by") or ""),
                 ("runner", lease.get("owner") or ("none (resume it)" if not d["terminal"] else "")),
                 ("since", _since(d.get("created_at"))), ("updated", _since(d.get("updated_at")))):
        cls = f' class="outcome-{_e(outcome)}"' if k == "state" and outcome else ""
        out.append(f"<dt>{_e(k)}</dt><dd{cls} data-field=\"{_e(k)}\">{_e(v)}</dd>")
    out.append("</dl>")
    if w.get("waiting") and not d["terminal"]:
        out.append(f'<p class="waiting">waiting for: {_e(w["waiting"])}</p>')
    if d.get("message"):
        out.append(f'<p class="message">{_e(d["message"])}</p>')
    if d.get("abort_requested") and not d["terminal"]:
        out.append('<p class="waiting">abort requested: the runner takes the rollback at its next check</p>')
    # buttons: live only for an operator on a run that has not ended
    live = operator and not d["terminal"]
    gate = state if state in gates else "*"
    approved = set(d.get("approvals") or [])
    off = "" if live else " disabled"
    title = "" if operator else ' title="viewers cannot approve or abort"'
    out.append(f'<div class="actions"><button id="approve" data-gate="{_e(gate)}"{off}{title}>Approve'
               f'{" " + _e(gate) if gate != "*" else ""}</button>'
               f'<button id="abort" class="danger"{off}{title}>Abort</button>'
               f'<span id="action-result" role="status"></span></div></section>')

    # states, from the run's table
    visited = {t["from"] for t in d.get("transitions") or []}
    passed = {t["from"] for t in d.get("transitions") or [] if t["event"] in ("ok", "skip")}
    out.append('<section class="states"><h2>Steps</h2>')
    if table is None:
        out.append("<p>This server cannot load the run's runbook: the journal's transitions are below.</p>")
    else:
        section = None
        for sid in table.order:
            node = table.nodes[sid]
            if node.section != section:
                if section is not None:
                    out.append("</ol>")
                section = node.section
                out.append(f"<h3>{_e(_SECTION.get(section, section))}</h3><ol>")
            cls = ["state", node.section]
            if sid == state and not d["terminal"]:
                cls.append("current")
            elif sid in passed:
                cls.append("passed")
            elif sid in visited:
                cls.append("failed")
            say = node.step.say if node.step is not None else (node.halt_message or "")
            mark = " (approval)" if sid in gates else ""
            aria = ' aria-current="step"' if "current" in cls else ""
            out.append(f'<li class="{" ".join(cls)}" data-state="{_e(sid)}"{aria}>'
                       f"<code>{_e(sid)}</code>{_e(mark)} <span>{_e(say)}</span></li>")
        out.append("</ol><h3>End</h3><ol>")
        for t in TERMINALS:
            cls = "terminal" + (" current" if t == outcome else "")
            out.append(f'<li class="{cls} outcome-{t}" data-state="{t}">{t}</li>')
        out.append("</ol>")
    out.append("</section>")

    # evidence: each gate's note (the latest transition out of it)
    notes: dict[str, dict[str, Any]] = {}
    for t in d.get("transitions") or []:
        if t.get("note"):
            notes[t["from"]] = t
    out.append('<section class="evidence"><h2>Evidence of each gate</h2>')
    if notes:
        out.append("<dl>")
        for sid, t in notes.items():
            out.append(f'<dt><code>{_e(sid)}</code> <span class="ev ev-{_e(t["event"])}">{_e(t["event"])}</span></dt>'
                       f"<dd>{_e(t['note'])}</dd>")
        out.append("</dl>")
    else:
        out.append("<p>No gate has passed yet.</p>")
    out.append("</section>")

    # the journal's transitions as a timeline
    out.append('<section class="timeline"><h2>Timeline (journal)</h2><ol>')
    for t in d.get("transitions") or []:
        out.append(f'<li><time>{_e(_since(t["at"]))}</time> <code>{_e(t["from"])}</code> '
                   f'<span class="ev ev-{_e(t["event"])}">{_e(t["event"])}</span> &rarr; <code>{_e(t["to"])}</code></li>')
    if not d.get("transitions"):
        out.append("<li>no transition yet</li>")
    out.append("</ol></section>")
    return "".join(out)


__all__ = ["runs_page", "run_page", "static_file", "whoami", "runs_fragment", "run_fragment", "render_run", "PAGE_HEADERS"]
