"""The run's fragment of the run page (`render_run`), every value escaped (`_e`) after the worker's
redactor, its states from the run's transition table (pages.py `_table`); and the formatting
helpers pages.py uses too.
"""

from __future__ import annotations

import html
from datetime import UTC, datetime
from typing import Any

from orchestrator.journal.audit import SAY, when
from orchestrator.journal.owner import describe_owner
from orchestrator.language.machine import TERMINALS, Table
from orchestrator.teamserver.worker import step_durations, step_kind


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
