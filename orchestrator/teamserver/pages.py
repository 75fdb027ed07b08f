"""The web page of `orchestrate serve`: the runs list, a page per run and per fleet, with no front-end
build and no template engine. Rules and reasons:

- **The data needs the same token as the API.** The shells carry no data; the script keeps the
  token in `sessionStorage` and sends it as an `Authorization: Bearer` header with `fetch`, which
  a cross-site page cannot do (no cookie, so no CSRF). The fragments go through `_route` too.
- **Approve / Abort** are the POST routes, sent by `fetch` as JSON from the same origin (the
  guards refuse anything else); a viewer's page shows the buttons disabled, the server answers 403.
- **Live by polling** every second: EventSource cannot send an Authorization header.
- **Escaped and redacted**, with a strict Content-Security-Policy (no inline script, no framing).
- **The states come from the run's transition table** (`run_info.table_for` on its pinned
  runbook), in the order `plan` shows.
"""

from __future__ import annotations

import functools
import json
from datetime import UTC, datetime
from importlib import resources
from string import Template
from typing import Any

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from orchestrator.journal.base import RunRecord
from orchestrator.language.machine import Table
from orchestrator.language.runbook import load_runbook_checked
from orchestrator.service.activity import target_tag
from orchestrator.service.run_info import table_for
from orchestrator.service.signals import table_gates
from orchestrator.teamserver.auth import Principal
from orchestrator.teamserver.errors import ApiError
from orchestrator.teamserver.run_view import _e, _runner, _since, render_run
from orchestrator.teamserver.worker import pinned_sha
from orchestrator.util.exit_codes import ExitCode

#: Headers of every page and fragment.
PAGE_HEADERS = {
    "Content-Security-Policy": ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                                "img-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
}
STATIC = {"app.js": "text/javascript; charset=utf-8", "app.css": "text/css; charset=utf-8",
          "favicon.svg": "image/svg+xml"}

_SHELL = Template("""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>$title</title><link rel="icon" href="/ui/static/favicon.svg" type="image/svg+xml">
<link rel="stylesheet" href="/ui/static/app.css"></head>
<body data-page="$page" data-run="$run_id">
<header><a href="/ui" class="brand">orchestrate</a> <span class="who" id="who"></span>
<form id="token-form" class="token" hidden><label>Token <input id="token" type="password" autocomplete="off"
 placeholder="ORCHESTRATOR_SERVER_TOKEN or your own"></label> <button type="submit">Use</button></form>
<button id="forget" type="button" hidden>Forget token</button></header>
<main><h1>$heading</h1><p id="status" class="status" role="status"></p><div id="content"></div></main>
<script src="/ui/static/app.js"></script></body></html>
""")


def _page(page: str, title: str, heading: str, run_id: str = "") -> Response:
    body = _SHELL.substitute(page=_e(page), title=_e(title), heading=_e(heading), run_id=_e(run_id))
    return HTMLResponse(body, headers=PAGE_HEADERS)


async def runs_page(request: Request) -> Response:
    return _page("runs", "runs · orchestrate", "Runs")


async def run_page(request: Request) -> Response:
    run_id = request.path_params["run_id"]
    return _page("run", f"{run_id} · orchestrate", run_id, run_id)


async def fleet_page(request: Request) -> Response:
    name = request.path_params["runbook"]
    return _page("fleet", f"{name} · orchestrate", f"Fleet: {name}", name)


async def static_file(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in STATIC:
        return Response("not found", status_code=404, media_type="text/plain")
    text = resources.files("orchestrator.teamserver").joinpath("static", name).read_text(encoding="utf-8")
    return Response(text, media_type=STATIC[name], headers={**PAGE_HEADERS, "Cache-Control": "no-cache"})


async def whoami(request: Request, principal: Principal) -> Response:
    return JSONResponse({"name": principal.name, "role": principal.role})


# -- fragments (server-rendered HTML, role viewer)


async def runs_fragment(request: Request, principal: Principal) -> Response:
    worker = request.app.state.worker

    def read() -> list[dict[str, Any]]:
        rows = worker.list_runs(None, 100)
        for r in rows:  # + who runs it now
            lease = None if r["terminal"] else worker.session.journal.current_lease(r["host"])
            r["runner"] = _runner(lease.owner) if lease is not None and lease.run_id == r["run_id"] else ""
        return worker.redactor.scrub_obj(rows)

    rows = await anyio.to_thread.run_sync(read)
    if not rows:
        return HTMLResponse('<p class="empty">No runs in the journal yet.</p>', headers=PAGE_HEADERS)
    out = ['<table class="runs"><thead><tr><th>run</th><th>host</th><th>kind</th><th>tag</th><th>state</th>'
           '<th>submitted by</th><th>runner</th><th>since</th></tr></thead><tbody>']
    # newest first: a DONE rollout with a later rollback of its host is not shown healthy (green)
    undone: dict[str, dict[str, Any]] = {}
    for r in rows:
        state = r["outcome"] or r["state"]
        cls = f"outcome-{r['outcome']}" if r["outcome"] else ("running" if r["runner"] else "interrupted")
        later = undone.get(r["host"])
        if r["kind"] == "rollback" and r["outcome"] != "ABORTED":  # an ABORTED rollback changed nothing
            undone.setdefault(r["host"], r)
        elif later is not None and r["outcome"] == "DONE":
            how = "rolled back" if later["outcome"] == "ROLLED_BACK" else f"then rollback {later['outcome'] or 'running'}"
            state, cls = f"DONE, {how}: {later['run_id']}", "superseded"
        out.append(f'<tr class="{_e(cls)}"><td><a href="/ui/runs/{_e(r["run_id"])}">{_e(r["run_id"])}</a></td>'
                   f'<td>{_e(r["host"])}</td><td>{_e(r["kind"])}</td><td>{_e(r["target_tag"])}</td>'
                   f'<td class="state">{_e(state)}</td><td>{_e(r["submitted_by"])}</td><td>{_e(r["runner"])}</td>'
                   f'<td>{_e(_since(r["created_at"]))}</td></tr>')
    out.append("</tbody></table>")
    fleets = sorted({r["runbook"] for r in rows if len(_hosts_of(r["runbook"])) > 1})
    if fleets:
        out.append('<p class="fleets">Fleets: ' + ", ".join(
            f'<a href="/ui/fleet/{_e(name)}">{_e(name)}</a> ({_e(", ".join(_hosts_of(name)))})' for name in fleets)
            + "</p>")
    return HTMLResponse("".join(out), headers=PAGE_HEADERS)


@functools.lru_cache(maxsize=64)
def _hosts_of(runbook: str) -> tuple[str, ...]:
    try:
        return tuple(load_runbook_checked(runbook)[0].hosts)
    except Exception:  # noqa: BLE001 - a runbook this server does not have
        return ()


@functools.lru_cache(maxsize=64)
def _table(runbook: str, sha: str | None, kind: str, context_json: str) -> Table | None:
    try:
        rb, _ = load_runbook_checked(runbook, sha)
    except Exception:  # noqa: BLE001 - the page still shows the journal without the runbook
        return None
    now = datetime.now(UTC)
    run = RunRecord("", "", runbook, None, kind, "", False, None, None, json.loads(context_json), now, now, None)
    try:
        return table_for(run, rb)
    except Exception:  # noqa: BLE001  # a page renders without the step list rather than fail on a runbook it cannot compile
        return None


async def run_fragment(request: Request, principal: Principal) -> Response:
    worker = request.app.state.worker
    run_id = request.path_params["run_id"]

    def read() -> tuple[dict[str, Any], Table | None, set[str]]:
        detail = worker.run_detail(run_id)
        run = worker.session.journal.get_run(run_id)
        # the run's transition table from its pinned runbook (None if this server cannot load it)
        keep = {k: run.context.get(k) for k in ("start_phase", "replicas") if run.context.get(k) is not None}
        table = _table(run.runbook, pinned_sha(run), run.kind, json.dumps(keep, sort_keys=True))
        detail["history"] = worker.history(run)
        detail["now"] = datetime.now(UTC).isoformat()
        detail["target_tag"] = target_tag(run)
        return worker.redactor.scrub_obj(detail), table, set() if table is None else table_gates(table)

    detail, table, gates = await anyio.to_thread.run_sync(read)
    detail = request.app.state.public_obj(detail)  # no journal location, no state path
    return HTMLResponse(render_run(detail, table, gates, operator=principal.may("operator")), headers=PAGE_HEADERS)


async def fleet_fragment(request: Request, principal: Principal) -> Response:
    """A fleet run's page: the runbook's hosts in order (the order `rollout --hosts` takes them),
    each host's latest run of this runbook (and `?tag=`), and which host the fleet is at."""
    worker = request.app.state.worker
    name = request.path_params["runbook"]
    tag = request.query_params.get("tag") or None

    def read() -> tuple[list[str], list[dict[str, Any]]]:
        try:
            rb, _ = load_runbook_checked(name)
        except Exception:  # noqa: BLE001 - an unknown runbook name is the caller's mistake
            raise ApiError(404, f"no runbook {name[:60]!r} on this server", ExitCode.BAD_INPUT) from None
        journal = worker.session.journal
        rows = []
        for host in rb.hosts:
            latest = next((r for r in journal.list_runs(host=host, limit=50)
                           if r.runbook == name and r.kind == "rollout" and (tag is None or r.tag == tag)), None)
            lease = journal.current_lease(host) if latest is not None and not latest.terminal else None
            rows.append({"host": host, "run_id": latest.run_id if latest else "", "tag": latest.tag if latest else "",
                         "state": latest.state if latest else "", "outcome": latest.outcome if latest else "",
                         "terminal": latest.terminal if latest else False,
                         "running": bool(lease is not None and latest is not None and lease.run_id == latest.run_id),
                         "updated": latest.updated_at.isoformat() if latest else ""})
        return list(rb.hosts), worker.redactor.scrub_obj(rows)

    hosts, rows = await anyio.to_thread.run_sync(read)
    at = next((r["host"] for r in rows if r["run_id"] and not r["terminal"]), None)
    if at is None:
        at = next((r["host"] for r in rows if r["outcome"] and r["outcome"] != "DONE"), None)
    done = sum(1 for r in rows if r["outcome"] == "DONE")
    out = [f'<section class="fleet"><p class="fleet-summary">{done} of {len(hosts)} hosts DONE'
           + (f"; the fleet is at <b>{_e(at)}</b>" if at else "") + "</p><ol class=\"fleet-hosts\">"]
    for r in rows:
        how = (f"outcome-{r['outcome']}" if r["outcome"] else ("running" if r["running"] else "interrupted")
               if r["run_id"] else "not-started")
        cls = "host" + (" at" if r["host"] == at else "") + " " + how
        what = r["outcome"] or (r["state"] + (" (running)" if r["running"] else " (no runner: resume it)")
                                if r["run_id"] else "not started")
        link = f'<a href="/ui/runs/{_e(r["run_id"])}">{_e(r["run_id"])}</a>' if r["run_id"] else ""
        out.append(f'<li class="{_e(cls)}" data-host="{_e(r["host"])}"><b>{_e(r["host"])}</b> '
                   f'<span class="state">{_e(what)}</span> {_e(r["tag"] or "")} {link}</li>')
    out.append("</ol></section>")
    return HTMLResponse("".join(out), headers=PAGE_HEADERS)
