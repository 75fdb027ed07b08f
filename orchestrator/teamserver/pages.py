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
  runbook), in the order `plan` shows; the run's fragment (`render_run`) is rendered here too.
"""

from __future__ import annotations

import functools
import html
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from importlib import resources
from string import Template
from typing import Any

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from orchestrator.journal.audit import SAY, when
from orchestrator.journal.base import RunRecord
from orchestrator.journal.owner import describe_owner
from orchestrator.language.machine import TERMINALS, Table
from orchestrator.language.runbook import load_runbook_checked
from orchestrator.service.activity import target_tag
from orchestrator.service.run_info import table_for
from orchestrator.service.signals import table_gates
from orchestrator.teamserver.auth import Principal
from orchestrator.teamserver.errors import ApiError
from orchestrator.teamserver.worker import Worker, pinned_sha, step_durations, step_kind
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


def shell(page: str, heading: str) -> Callable[[Request], Awaitable[Response]]:
    """The route of a page's shell: `heading` names the path's one parameter (if any) `{}`."""

    async def handler(request: Request) -> Response:
        key = next(iter(request.path_params.values()), "")
        body = _SHELL.substitute(page=_e(page), title=_e(f"{key or page} · orchestrate"),
                                 heading=_e(heading.format(key)), run_id=_e(key))
        return HTMLResponse(body, headers=PAGE_HEADERS)

    return handler


async def static_file(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in STATIC:
        return Response("not found", status_code=404, media_type="text/plain")
    text = resources.files("orchestrator.teamserver").joinpath("static", name).read_text(encoding="utf-8")
    return Response(text, media_type=STATIC[name], headers={**PAGE_HEADERS, "Cache-Control": "no-cache"})


async def whoami(request: Request, principal: Principal, worker: Worker) -> Response:
    return JSONResponse({"name": principal.name, "role": principal.role})


# -- fragments (server-rendered HTML, role viewer)


async def runs_fragment(request: Request, principal: Principal, worker: Worker) -> Response:
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


async def run_fragment(request: Request, principal: Principal, worker: Worker) -> Response:
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


async def fleet_fragment(request: Request, principal: Principal, worker: Worker) -> Response:
    """A fleet run's page: the runbook's hosts in order (the order `rollout --hosts` takes them),
    each host's latest run of this runbook (and `?tag=`), and which host the fleet is at."""
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


# -- the run's fragment (`render_run`): every value escaped (`_e`) after the worker's redactor


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _since(iso: str | None) -> str:
    at = _at(iso)
    return when(at) if at is not None else iso or ""


def _runner(owner: str | None) -> str:
    """A lease owner as a person reads it (`pid 4242 on vm`), never the raw `host:pid:boot:start`."""
    return describe_owner(owner) if owner else ""  # an owner it cannot parse is shown as it is


def _fill(text: str, d: dict[str, Any]) -> str:
    """A runbook text with `{host}`, `{run_id}`, `{tag}` filled in (others left as written)."""
    values = {"host": d.get("host") or "", "run_id": d.get("run_id") or "", "tag": d.get("tag") or ""}

    class Keep(dict):  # type: ignore[type-arg]  # format_map takes any mapping; this one keeps unknown fields as written
        def __missing__(self, key: str) -> str:
            return "{" + key + "}"

    try:
        return text.format_map(Keep(values))
    except (ValueError, IndexError, AttributeError):
        return text


def _at(iso: str | None) -> datetime | None:
    if not iso:
        return None
    try:
        return datetime.fromisoformat(iso)
    except ValueError:
        return None


def _dur(seconds: float | None) -> str:
    if seconds is None:
        return ""
    seconds = int(max(0, seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


_SECTION = {"preflight": "Preflight (changes nothing)", "forward": "Procedure",
            "remedy": "Remedy of the gate above (taken only on its log marker)", "rollback": "Rollback of a phase",
            "full_rollback": "Whole-host rollback"}


def _phase(table: Table, phase: Any, section: str, down_file: str | None = None) -> tuple[Any, Any, Any, list[str]]:
    """(replica, its down state, its ready state, all states) of a phase's `section` (`down_file`:
    only a down of that file counts)."""
    nodes = [n for n in (table.nodes[s] for s in table.order) if n.phase == phase and n.section == section]
    steps = [(n.id, n.step) for n in nodes if n.step is not None]
    down = next((i for i, st in steps if st.kind == "down" and (
        down_file is None or (st.down is not None and st.down.file == down_file))), None)
    ready = next((i for i, st in steps if st.kind == "logs"), None)
    return next((n.replica for n in nodes if n.replica), None), down, ready, [n.id for n in nodes]


def _replicas(d: dict[str, Any], table: Table, passed: set[str]) -> list[tuple[str, str, str]]:
    """Each forward phase's replica as the journal tells it: (phase, picture class, words)."""
    out: list[tuple[str, str, str]] = []
    state, outcome = d["state"], d.get("outcome")
    for phase in table.phase_starts:
        replica, down, ready, ids = _phase(table, phase, "forward")
        if replica is None:
            continue  # a phase of no one replica (reconcile: the shared services)
        if outcome == "DONE":
            pic = ("new-serving", "new serving")
        elif outcome in ("ROLLED_BACK", "ABORTED"):
            pic = ("old-serving", "old serving (as before the run)") if down in passed or outcome == "ROLLED_BACK" \
                else ("old-serving", "old serving, untouched")
        elif outcome == "HALTED":
            pic = ("unknown", "unknown: look at the host (the run's message says what runs now)")
        elif state in ids:
            i = ids.index(state)
            if ready in passed:
                pic = ("new-serving", "new serving")
            elif down is not None and state == down:
                pic = ("stopping", "old stopping")
            elif down is not None and ids.index(down) < i and (ready is None or i <= ids.index(ready)):
                pic = ("cold-starting", "new cold-starting" if state == ready else "down: new one starting")
            else:
                pic = ("old-serving", "old serving")
        elif ready is not None and ready in passed:
            pic = ("new-serving", "new serving")
        elif table.nodes.get(state) is not None and table.nodes[state].section in ("rollback", "full_rollback"):
            pic = ("stopping", "in rollback") if table.nodes[state].phase == phase else ("old-serving", "not yet touched")
        else:
            pic = ("old-serving", "old serving")
        out.append((str(replica), pic[0], pic[1]))
    return out


def _rollback_replicas(d: dict[str, Any], table: Table, passed: set[str]) -> list[tuple[str, str, str]]:
    """A rollback run's replicas as the journal tells it, one per phase of its safe order: the new
    engine until the phase stops it, then the previous one starting, then serving."""
    out: list[tuple[str, str, str]] = []
    state, outcome = d["state"], d.get("outcome")
    phases = list(dict.fromkeys(n.phase for n in (table.nodes[s] for s in table.order)
                                if n.section == "full_rollback" and n.replica))
    for phase in phases:
        replica, down, ready, ids = _phase(table, phase, "full_rollback", down_file="new")
        if outcome == "ROLLED_BACK" or (ready is not None and ready in passed):
            pic = ("old-serving", "previous serving (rolled back)")
        elif outcome == "HALTED":
            pic = ("unknown", "unknown: look at the host (the run's message says what runs now)")
        elif outcome is not None:
            pic = ("new-serving", "new serving, untouched") if down not in passed else ("unknown", "unknown: look at the host")
        elif state in ids:
            i = ids.index(state)
            if down is not None and state == down:
                pic = ("stopping", "new stopping")
            elif down is not None and ids.index(down) < i:
                pic = ("cold-starting", "previous cold-starting" if state == ready else "down: previous one starting")
            else:
                pic = ("new-serving", "new serving, its rollback starting")
        else:
            pic = ("new-serving", "new serving, not yet rolled back")
        out.append((str(replica), pic[0], pic[1]))
    return out


def _still_waiting(w: dict[str, Any]) -> str | None:
    """What the current step waits for, from the runner's last heartbeat since the step started
    (a cold start: `what, 25 min 16 s / 50 min`), when no gate said it (`waiting`)."""
    beat = None
    for e in w.get("events") or []:
        if e.get("event") == "step_started":
            beat = None
        elif e.get("event") == "heartbeat":
            beat = e
    if beat is None:
        return None
    limit = f" / {_dur(beat['timeout'])}" if beat.get("timeout") else ""
    more = f"; waiting for {beat['awaiting']}" if beat.get("awaiting") else ""
    return f"{beat.get('what')}, {_dur(beat.get('elapsed'))}{limit}{more}"


def render_run(d: dict[str, Any], table: Table | None, gates: set[str], *, operator: bool) -> str:
    """The run's fragment: summary, who did what, buttons, the host's picture, states (current
    highlighted, with durations and the expected remaining time), evidence, log tail, timeline."""
    state, outcome, terminal = d["state"], d.get("outcome"), d["terminal"]
    transitions = d.get("transitions") or []
    w = d.get("worker") or {}
    lease = d.get("lease") or {}
    who = d.get("who") or {}
    paused = d.get("paused")
    sub = who.get("submitted") or {}
    out = [f'<div class="run" data-terminal="{"1" if terminal else "0"}" data-outcome="{_e(outcome or "")}">'
           '<section class="summary"><dl>']
    # a rollback's tag is the one it goes back to (as `orchestrate runs` shows it), then the one it leaves
    tag = d.get("tag")
    if d["kind"] == "rollback" and d.get("target_tag") and d.get("target_tag") != tag:
        tag = f"{d['target_tag']} (back from {tag})"
    for k, v in (("host", d["host"]), ("kind", d["kind"]), ("tag", tag), ("runbook", d.get("runbook")),
                 ("state", outcome or state),
                 ("submitted by", f"{sub.get('by')} at {_since(sub.get('at'))}" if sub else "not journaled"),
                 ("runner", _runner(lease.get("owner")) or ("none (resume it)" if not terminal else "")),
                 ("since", _since(d.get("created_at"))), ("updated", _since(d.get("updated_at")))):
        cls = f' class="outcome-{_e(outcome)}"' if k == "state" and outcome else ""
        out.append(f"<dt>{_e(k)}</dt><dd{cls} data-field=\"{_e(k.split()[0])}\">{_e(v)}</dd>")
    out.append("</dl>")
    if paused and not terminal:
        out.append(f'<p class="paused" id="paused">paused by {_e(paused["by"])} at {_e(_since(paused["at"]))}: the '
                   f"runner stops before its next safe step (never between a down and its replacement's readiness) "
                   f"and waits for Continue (`orchestrate continue {_e(d['run_id'])}`)</p>")
    waiting = w.get("waiting") or _still_waiting(w)
    if waiting and not terminal:
        out.append(f'<p class="waiting">waiting for: {_e(waiting)}</p>')
    if d.get("message"):
        out.append(f'<p class="message outcome-{_e(outcome or "running")}">{_e(d["message"])}</p>')
    if w.get("error") and not terminal:
        out.append(f'<p class="message outcome-HALTED" id="worker-error">this server: {_e(w["error"])}</p>')
    if d.get("abort_requested") and not terminal:
        ab = who.get("aborted") or {}
        by = f" by {ab.get('by')} at {_since(ab.get('at'))}" if ab else ""
        out.append(f'<p class="waiting">abort requested{_e(by)}: the runner takes the rollback at its next check</p>')
    # buttons: live only for an operator on a run that has not ended; Approve only at an approval gate
    at_gate = state in gates and not terminal
    title = "" if operator else ' title="viewers cannot act on a run"'

    def button(bid: str, label: str, live: bool, why: str, extra: str = "", cls: str = "") -> str:
        off = "" if (operator and live) else " disabled"
        tip = title or (f' title="{_e(why)}"' if not live else "")
        return f'<button id="{bid}"{cls}{extra}{off}{tip}>{_e(label)}</button>'

    out.append('<div class="actions">')
    out.append(button("approve", f"Approve {state}" if at_gate else "Approve", at_gate,
                      "the run is not waiting at an approval gate", extra=f' data-gate="{_e(state if at_gate else "")}"'))
    out.append(button("pause", "Pause", not terminal and not paused, "the run has ended" if terminal else "already paused"))
    out.append(button("continue", "Continue", not terminal and bool(paused), "the run is not paused"))
    out.append(button("abort", "Abort", not terminal, "the run has ended", cls=' class="danger"'))
    out.append('<span id="action-result" role="status"></span></div></section>')

    # who did what (the journal's audit list)
    out.append('<section class="audit"><h2>Who did what</h2><ol>')
    for e in d.get("audit") or []:
        detail = f" {e['detail']}" if e.get("detail") and e["action"] != "submitted" else ""
        words = "(the runner) paused before" if e["action"] == "pause_honoured" else SAY.get(e["action"], e["action"])
        out.append(f'<li data-action="{_e(e["action"])}"><time>{_e(_since(e["at"]))}</time> '
                   f'<b>{_e(e["by"])}</b> {_e(words)}{_e(detail)}</li>')
    if not d.get("audit"):
        out.append("<li>nothing journaled yet</li>")
    out.append("</ol></section>")

    visited = {t["from"] for t in transitions}
    passed = {t["from"] for t in transitions if t["event"] in ("ok", "skip")}
    durations = step_durations(_at(d.get("created_at")), ((t["from"], _at(t["at"])) for t in transitions))
    hist = d.get("history") or {}
    median: dict[str, float] = hist.get("median") or {}
    last = _at(transitions[-1].get("at") if transitions else d.get("created_at"))
    now = _at(d.get("now")) or datetime.now(UTC)
    in_state = (now - last).total_seconds() if last is not None and not terminal else None

    # the host, per replica (as the journal tells it)
    pictures = (_replicas(d, table, passed) if table.phase_starts else _rollback_replicas(d, table, passed)) \
        if table is not None else []
    if pictures:
        assert table is not None
        out.append('<section class="host"><h2>The host</h2><ul class="replicas">')
        for replica, cls, words in pictures:
            out.append(f'<li class="replica {cls}" data-replica="{_e(replica)}"><b>{_e(replica)}</b> {_e(words)}</li>')
        out.append("</ul>")
        peers = [t for t in transitions if t.get("note") and step_kind(table, t["from"]) == "verify"]
        if peers:
            out.append(f'<p class="peers">the peers\' view (last check, {_e(peers[-1]["from"])}): {_e(peers[-1]["note"])}</p>')
        out.append('<p class="note">from the journal and this server\'s view of the run, not a live read of the host</p>')
        out.append("</section>")

    # states, from the run's table, with their durations and the expected remaining time
    out.append('<section class="states"><h2>Steps</h2>')
    if table is None:
        out.append("<p>This server cannot load the run's runbook: the journal's transitions are below.</p>")
    else:
        if not terminal and median:
            remaining = 0.0
            counting = False
            for sid in table.order:
                node = table.nodes[sid]
                if node.section not in ("preflight", "forward"):
                    continue
                if sid == state:
                    counting = True
                    remaining += max(0.0, median.get(sid, 0.0) - (in_state or 0.0))
                elif counting and sid not in passed:
                    remaining += median.get(sid, 0.0)
            if counting:
                out.append(f'<p class="eta" id="eta">expected remaining: about {_e(_dur(remaining))} '
                           f'(median of {int(hist.get("runs") or 0)} earlier DONE runs of this runbook)</p>')
        section = None
        for sid in table.order:
            node = table.nodes[sid]
            if node.section != section:
                if section is not None:
                    out.append("</ol>")
                section = node.section
                out.append(f"<h3>{_e(_SECTION.get(section, section))}</h3><ol>")
            cls = ["state", node.section]
            if sid == state and not terminal:
                cls.append("current")
            elif sid in passed:
                cls.append("passed")
            elif sid in visited:
                cls.append("failed")
            say = node.step.say if node.step is not None else (node.halt_message or "")
            mark = " (approval)" if sid in gates else ""
            if node.step is not None and getattr(node.step, "observe", False):
                mark += " (observe only)"
            took = durations.get(sid)
            if sid == state and not terminal and in_state is not None:
                took = (took or 0.0) + in_state
            typical = median.get(sid)
            timing = f'<span class="took">{_e(_dur(took))}</span>' if took is not None else ""
            if typical is not None and (sid == state or sid not in visited):
                timing += f'<span class="typical">usually {_e(_dur(typical))}</span>'
            aria = ' aria-current="step"' if "current" in cls else ""
            out.append(f'<li class="{" ".join(cls)}" data-state="{_e(sid)}"{aria}>'
                       f"<code>{_e(sid)}</code>{_e(mark)} <span>{_e(_fill(say, d))}</span>{timing}</li>")
        out.append("</ol><h3>End</h3><ol>")
        for t in TERMINALS:
            cls = "terminal" + (" current" if t == outcome else "")
            out.append(f'<li class="{cls} outcome-{t}" data-state="{t}">{t}</li>')
        out.append("</ol>")
    out.append("</section>")

    # the followed log (redacted), while this server runs the run
    tail = w.get("tail") or []
    if tail:
        out.append('<section class="tail"><h2>Log the run follows (last lines, redacted)</h2><pre>')
        out.append("\n".join(f"{_e(x.get('service'))} | {_e(x.get('line'))}" for x in tail[-20:]))
        out.append("</pre></section>")

    # the canary's readout: what the direct checks and the metrics through the soak relay said
    if table is not None:
        canary = [t for t in transitions if t.get("note") and step_kind(table, t["from"]) in ("relay", "metrics", "analysis")]
        if canary:
            out.append('<section class="canary"><h2>Canary readout (direct checks through the soak relay)</h2><dl>')
            for t in canary:
                note = t["note"]
                # an analysis' readout is a table: kept monospaced, its columns aligned
                body = (f'<pre class="readout">{_e(note[note.index("canary readout:"):])}</pre>'
                        if "canary readout:" in note else _e(note))
                out.append(f'<dt><code>{_e(t["from"])}</code> <span class="ev ev-{_e(t["event"])}">{_e(t["event"])}'
                           f'</span></dt><dd>{body}</dd>')
            out.append("</dl></section>")

    # evidence: each gate's note (the latest transition out of it)
    notes = {t["from"]: t for t in transitions if t.get("note")}
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
    for t in transitions:
        out.append(f'<li><time>{_e(_since(t["at"]))}</time> <code>{_e(t["from"])}</code> '
                   f'<span class="ev ev-{_e(t["event"])}">{_e(t["event"])}</span> &rarr; <code>{_e(t["to"])}</code></li>')
    if not transitions:
        out.append("<li>no transition yet</li>")
    out.append("</ol></section></div>")
    return "".join(out)
