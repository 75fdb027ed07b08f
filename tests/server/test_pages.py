"""The web page of `orchestrate serve` (orchestrator/teamserver/pages.py), over the ASGI app.

The browser half (the script, live updates, buttons) is tests/server/test_browser.py."""

from __future__ import annotations

import re
from datetime import UTC

import pytest
from starlette.testclient import TestClient

from helpers_server import AUTH, BASE_URL, TOKEN, sim_session_factory, sim_settings, wait_for
from orchestrator.teamserver.app import create_app
from orchestrator.teamserver.auth import add_token

FAST = {"action": "rollout", "host": "gpu02", "tag": "v0.0.300", "yes": False, "soak": "0"}


def test_shells_carry_no_data_and_a_strict_policy(settings):
    app = create_app(settings, token=TOKEN)
    with TestClient(app, base_url=BASE_URL) as c:
        for path in ("/ui", "/ui/runs/gpu02-x<script>"):
            r = c.get(path)
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
            csp = r.headers["content-security-policy"]
            assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
            assert "<script>" not in r.text.replace('<script src="/ui/static/app.js"></script>', "")
        assert "gpu02-x&lt;script&gt;" in c.get("/ui/runs/gpu02-x<script>").text
        assert c.get("/ui/static/app.js").headers["content-type"].startswith("text/javascript")
        assert c.get("/ui/static/../app.py").status_code == 404
        assert c.get("/", follow_redirects=False).headers["location"] == "/ui"


def test_fragments_need_a_token(settings):
    app = create_app(settings, token=TOKEN)
    with TestClient(app, base_url=BASE_URL) as c:
        assert c.get("/ui/fragments/runs").status_code == 401
        assert c.get("/ui/fragments/runs", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert c.get("/whoami").status_code == 401
        assert c.get("/whoami", headers=AUTH).json() == {"name": "shared-token", "role": "operator"} or \
            c.get("/whoami", headers=AUTH).json()["role"] == "operator"
        r = c.get("/ui/fragments/runs", headers=AUTH)
        assert r.status_code == 200 and "No runs" in r.text


@pytest.mark.e2e
def test_a_run_page_shows_states_evidence_timeline_and_buttons_by_role(sim_fleet, tmp_path):
    fleet = sim_fleet()
    settings = sim_settings(fleet, tmp_path / "state")
    tokens = tmp_path / "tokens.yaml"
    op, viewer = add_token(tokens, "alice", "operator"), add_token(tokens, "grafana", "viewer")
    app = create_app(settings, tokens_file=tokens, session_factory=sim_session_factory)
    A, V = {"Authorization": f"Bearer {op}"}, {"Authorization": f"Bearer {viewer}"}
    with TestClient(app, base_url=BASE_URL) as c:
        run_id = c.post("/runs", json=FAST, headers=A).json()["run_id"]
        page = wait_for(lambda: (t := c.get(f"/ui/fragments/runs/{run_id}", headers=A).text)
                        and "waiting for: soak 0 s, then `orchestrate approve" in t and t, "the approval gate")
        assert 'class="state forward current" data-state="r2.soak"' in page
        assert re.search(r'<button id="approve" data-gate="r2.soak">Approve r2.soak<', page)  # live for an operator
        assert '<li class="state preflight passed" data-state="preflight.read-env"' in page
        assert "Evidence of each gate" in page and "Timeline (journal)" in page
        # the canary's readout: r2's direct checks and metrics through the soak relay :8009
        assert "Canary readout" in page and "<code>r2.relay-checks</code>" in page
        assert '<li class="replica new-serving" data-replica="r2"><b>r2</b> new serving' in page
        assert page.count('<li class="state') == len(re.findall(r'data-state="[a-z0-9.-]+"', page))
        assert ">alice<" in page  # who submitted it
        listing = c.get("/ui/fragments/runs", headers=V).text
        assert f'href="/ui/runs/{run_id}"' in listing and ">gpu02<" in listing and ">v0.0.300<" in listing
        vpage = c.get(f"/ui/fragments/runs/{run_id}", headers=V).text
        assert '<button id="approve" data-gate="r2.soak" disabled' in vpage and '<button id="abort" class="danger" disabled' in vpage
        assert c.post(f"/runs/{run_id}/approve", json={"gate": "r2.soak"}, headers=V).status_code == 403
        assert c.post(f"/runs/{run_id}/approve", json={"gate": "r2.soak"}, headers=A).status_code == 200
        done = wait_for(lambda: (t := c.get(f"/ui/fragments/runs/{run_id}", headers=A).text)
                        and 'class="outcome-DONE" data-field="state">DONE' in t and t, "the run to end")
        assert '<button id="approve" data-gate="" disabled' in done  # a finished run has no live buttons
        for b in ("pause", "continue", "abort"):
            assert re.search(f'<button id="{b}"[^>]* disabled', done), b
        # who did what, from the journal: the submitter and the approver, with their times
        assert re.search(r'data-field="submitted">alice at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC<', done)
        assert '<li data-action="approved">' in done and "<b>alice</b> approved r2.soak" in done
        assert '<li data-action="submitted">' in done
        assert 'class="message outcome-DONE"' in done  # not the amber warning box
        for secret in settings.tokens() + [op, viewer]:
            assert secret not in done and secret not in listing


def test_a_fleet_page_lists_the_runbooks_hosts_in_order_and_where_the_fleet_is(settings):
    from orchestrator.journal import SqliteJournal

    app = create_app(settings, token=TOKEN, adopt=False)
    with TestClient(app, base_url=BASE_URL) as c:
        j = SqliteJournal(settings.journal_location())
        done = j.create_run(host="gpu03", runbook="base-glm53-w4afp8", tag="v0.0.300", kind="rollout", state="INIT",
                            context={})
        lease, _ = j.acquire_lease("gpu03", done.run_id, "x:1", 60)
        j.record_transition(lease, done.run_id, "INIT", "ok", "DONE", terminal=True, outcome="DONE", message="ok")
        j.release(lease)
        now = j.create_run(host="gpu04", runbook="base-glm53-w4afp8", tag="v0.0.300", kind="rollout",
                           state="r1.cold-start", context={})
        j.close()
        assert "<title>base-glm53-w4afp8 · orchestrate</title>" in c.get("/ui/fleet/base-glm53-w4afp8").text
        assert c.get("/ui/fragments/fleet/base-glm53-w4afp8").status_code == 401
        page = c.get("/ui/fragments/fleet/base-glm53-w4afp8?tag=v0.0.300", headers=AUTH).text
        hosts = re.findall(r'data-host="([a-z0-9]+)"', page)
        assert hosts == ["gpu03", "gpu04", "gpu23"]
        assert "1 of 3 hosts DONE; the fleet is at <b>gpu04</b>" in page
        assert f'href="/ui/runs/{now.run_id}"' in page and "r1.cold-start (no runner: resume it)" in page
        assert re.search(r'class="host not-started" data-host="gpu23"', page)
        listing = c.get("/ui/fragments/runs", headers=AUTH).text
        assert 'href="/ui/fleet/base-glm53-w4afp8"' in listing
        assert c.get("/ui/fragments/fleet/nope", headers=AUTH).status_code == 404


def test_the_run_fragment_shows_durations_expected_remaining_the_host_and_a_pause():
    """render_run on a run at r2.cold-start with two earlier DONE runs' medians: the time each
    step took, how long the rest usually takes, the replicas as the journal tells it, a pause."""
    from datetime import datetime, timedelta

    from orchestrator.journal.base import RunRecord
    from orchestrator.language.runbook import load_runbook
    from orchestrator.service.run_info import table_for
    from orchestrator.service.signals import table_gates
    from orchestrator.teamserver.pages import render_run

    t0 = datetime(2026, 12, 1, 22, 0, tzinfo=UTC)
    rb = load_runbook("gpu02-glm53-w4afp8-long-context")
    run = RunRecord("r", "gpu02", rb.name, "v0.0.300", "rollout", "r2.cold-start", False, None, None, {}, t0, t0, None)
    table = table_for(run, rb)
    order = [s for s in table.order if table.nodes[s].section in ("preflight", "forward")]
    before = order[:order.index("r2.cold-start")]
    transitions = [{"seq": i + 1, "from": s, "event": "ok", "to": order[i + 1], "at": (t0 + timedelta(minutes=i + 1)).isoformat(),
                    "note": None} for i, s in enumerate(before)]
    last = t0 + timedelta(minutes=len(before))
    median = {s: 60.0 for s in order}
    median["r2.cold-start"] = 3000.0
    d = {"run_id": "r", "host": "gpu02", "kind": "rollout", "tag": "v0.0.300", "runbook": rb.name, "state": "r2.cold-start",
         "outcome": None, "message": None, "terminal": False, "created_at": t0.isoformat(), "updated_at": last.isoformat(),
         "transitions": transitions, "lease": {"owner": "vm:4242:5666e2d6-80e6-4a0f-acf9-b3dfd106d08b:57680"},
         "audit": [{"action": "paused", "by": "carol", "at": last.isoformat(), "detail": None}],
         "who": {"submitted": {"by": "alice", "at": t0.isoformat(), "detail": None}},
         "paused": {"action": "paused", "by": "carol", "at": last.isoformat(), "detail": None},
         "history": {"runs": 2, "median": median}, "now": (last + timedelta(minutes=10)).isoformat(),
         "worker": {"tail": [{"service": "model-sg-glm53-w4afp8-tp4-r2", "line": "[TP0] loading weights 40%"}]}}
    html = render_run(d, table, table_gates(table), operator=True)
    assert re.search(r'data-state="r2.cold-start"[^>]*>.*?<span class="took">10 min 00 s</span>'
                     r'<span class="typical">usually 50 min 00 s</span>', html)
    assert '<span class="took">1 min 00 s</span>' in html  # a passed step's own time
    left = 3000 - 600 + 60 * (len(order) - len(before) - 1)
    assert f"expected remaining: about {left // 3600} h {left % 3600 // 60:02d} min" in html
    assert "median of 2 earlier DONE runs" in html
    assert '<li class="replica cold-starting" data-replica="r2"><b>r2</b> new cold-starting' in html
    assert '<li class="replica old-serving" data-replica="r1"><b>r1</b> old serving' in html
    assert "paused by carol" in html and re.search(r'<button id="continue">Continue', html)
    assert re.search(r'<button id="pause"[^>]* disabled', html)
    assert re.search(r'<button id="approve" data-gate="" disabled', html)  # not at an approval gate
    assert "[TP0] loading weights 40%" in html
    assert "5666e2d6" not in html and "pid 4242" in html  # the runner, readable


def test_halt_texts_on_the_page_name_the_host_and_the_run():
    """A rollback that hands over with a message (base runbook: `{host}`, `{tag}`) is shown filled in."""
    from datetime import datetime

    from orchestrator.journal.base import RunRecord
    from orchestrator.language.runbook import load_runbook
    from orchestrator.service.run_info import table_for
    from orchestrator.teamserver.pages import render_run

    t0 = datetime(2026, 12, 1, 22, 0, tzinfo=UTC)
    rb = load_runbook("base-glm53-w4afp8")
    run = RunRecord("gpu03-x", "gpu03", rb.name, "v0.0.300", "rollout", "INIT", False, None, None, {}, t0, t0, None)
    table = table_for(run, rb)
    assert any(n.step is None and n.halt_message and "{host}" in n.halt_message for n in table.nodes.values())
    d = {"run_id": "gpu03-x", "host": "gpu03", "kind": "rollout", "tag": "v0.0.300", "runbook": rb.name,
         "state": table.start, "outcome": None, "message": None, "terminal": False, "created_at": t0.isoformat(),
         "updated_at": t0.isoformat(), "transitions": []}
    html = render_run(d, table, set(), operator=False)
    assert "{host}" not in html and "{tag}" not in html and "{run_id}" not in html
    assert "pre-staged on gpu03" in html and "orchestrate rollout gpu03 --tag v0.0.300" in html


def test_a_canary_readout_is_shown_monospaced_on_the_run_page():
    """Issue 23: the analysis step's readout (its transition note) is shown in a <pre> table."""
    from datetime import datetime

    from orchestrator.journal.base import RunRecord
    from orchestrator.language.runbook import load_runbook
    from orchestrator.service.run_info import table_for
    from orchestrator.service.signals import table_gates
    from orchestrator.teamserver.pages import render_run

    t0 = datetime(2026, 12, 1, 22, 0, tzinfo=UTC)
    rb = load_runbook("gpu02-glm53-w4afp8-qsplit-canary")
    run = RunRecord("r", "gpu02", rb.name, "v0.0.305", "rollout", "ROLLED_BACK", True, "ROLLED_BACK", None, {}, t0, t0, None)
    table = table_for(run, rb)
    note = ("canary readout: FAIL over 30 min, r2: 62 scrapes, r1: 62 scrapes\n"
            "metric                     r2            r1            observed      bound          verdict\n"
            "min_free_device_memory_gb  1.5 GB (n=31)  3.7 GB (n=31)  r2 1.5 GB  r2 >= 6  FAIL")
    d = {"run_id": "r", "host": "gpu02", "kind": "rollout", "tag": "v0.0.305", "runbook": rb.name, "state": "ROLLED_BACK",
         "outcome": "ROLLED_BACK", "message": "rolled back", "terminal": True, "created_at": t0.isoformat(),
         "updated_at": t0.isoformat(), "now": t0.isoformat(),
         "transitions": [{"seq": 1, "from": "canary.readout", "event": "fail", "to": "canary.rollback.relay-stop",
                          "at": t0.isoformat(), "note": note}]}
    html = render_run(d, table, table_gates(table), operator=False)
    assert '<pre class="readout">canary readout: FAIL over 30 min' in html
    assert "min_free_device_memory_gb  1.5 GB (n=31)" in html


def test_the_approve_button_is_live_at_every_step_the_api_accepts_an_approve_for():
    """A `manual:` step (a human's edit, approved by name) is an approval gate on the run page as in
    the API (service.signals.run_gates): the page's Approve is live there."""
    from datetime import datetime

    from orchestrator.journal.base import RunRecord
    from orchestrator.language.runbook import load_runbook
    from orchestrator.service.run_info import table_for
    from orchestrator.service.signals import run_gates, table_gates
    from orchestrator.teamserver.pages import render_run

    t0 = datetime(2026, 12, 1, 22, 0, tzinfo=UTC)
    rb = load_runbook("gpu02-glm53-2xtp2-memopt-canary")
    run = RunRecord("r", "gpu02", rb.name, "v0.0.332", "rollout", "canary.pool-override", False, None, None, {}, t0, t0, None)
    table = table_for(run, rb)
    assert table_gates(table) | {"*"} == run_gates(run, lambda: rb)
    d = {"run_id": "r", "host": "gpu02", "kind": "rollout", "tag": "v0.0.332", "runbook": rb.name,
         "state": "canary.pool-override", "outcome": None, "message": None, "terminal": False, "created_at": t0.isoformat(),
         "updated_at": t0.isoformat(), "now": t0.isoformat(), "transitions": []}
    html = render_run(d, table, table_gates(table), operator=True)
    button = re.search(r'<button id="approve"[^>]*>[^<]*</button>', html)
    assert button and "disabled" not in button.group(0) and "Approve canary.pool-override" in button.group(0), html
