"""The run page in a real headless Chromium (Debian's, through playwright), against the simulator.

list -> run page -> live updates during a simulated cold start -> Approve -> the run goes on to
DONE; Abort -> ROLLED_BACK; a wrong token is refused; a viewer's buttons do nothing (403).
Skipped only when Chromium or playwright is not there or Chromium cannot start.
`ORCHESTRATOR_SCREENSHOT=path` also saves the run page waiting at its approval gate
(docs/run-page.png was made so)."""

from __future__ import annotations

import os
import re
import shutil
import threading

import pytest
from ports import free_port
from waiting import wait_until

from helpers_server import sim_settings, wait_for
from orchestrator.teamserver.app import create_app
from orchestrator.teamserver.auth import add_token

pytestmark = pytest.mark.e2e

SPEED = 1000.0
COLD_START_S = 45 * 60.0  # 2.7 s real: long enough to watch the page follow it
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[test]')")
    if CHROMIUM is None:
        pytest.skip("no chromium on PATH (apt-get install chromium)")
    pw = sync_api.sync_playwright().start()
    try:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-dev-shm-usage"])
    except Exception as exc:  # noqa: BLE001 - the one reason to skip: Chromium cannot start here
        pw.stop()
        pytest.skip(f"Chromium cannot start: {type(exc).__name__}: {str(exc)[:200]}")
    yield b
    b.close()
    pw.stop()


@pytest.fixture
def served(tmp_path):
    """A real uvicorn server on loopback running the app against a simulated gpu02."""
    sim = pytest.importorskip("orchestrator_sim", exc_type=ImportError)
    import uvicorn

    from orchestrator.hosts.clients.retry import RetryPolicy
    from orchestrator.service.session import Session
    from orchestrator.util.clock import ScaledClock

    fleet = sim.SimFleet(sim.SimConfig(speed=SPEED, cold_start_s=COLD_START_S))
    fleet.__enter__()
    settings = sim_settings(fleet, tmp_path / "state")
    tokens = tmp_path / "tokens.yaml"
    names = {"alice": add_token(tokens, "alice", "operator"), "grafana": add_token(tokens, "grafana", "viewer")}
    app = create_app(settings, tokens_file=tokens, adopt=False, session_factory=lambda s: Session.open(
        s, clock=ScaledClock(SPEED), retry=RetryPolicy(deadline_s=900, busy_wait_s=5)))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, "uvicorn to start")
    yield f"http://127.0.0.1:{port}", names, fleet
    server.should_exit = True
    thread.join(20)
    fleet.__exit__(None, None, None)


def submit(base: str, token: str) -> str:
    import httpx

    r = httpx.post(base + "/runs", headers={"Authorization": f"Bearer {token}"}, timeout=30,
                   json={"action": "rollout", "host": "gpu02", "tag": "v0.0.300", "yes": False, "soak": "0"})
    assert r.status_code == 202, r.text
    return r.json()["run_id"]


def enter_token(page, token: str) -> None:
    page.fill("#token", token)
    page.click("#token-form button[type=submit]")


def current(page) -> str | None:
    el = page.query_selector("li.state.current")
    return el.get_attribute("data-state") if el else None


def test_list_run_page_live_approve_then_abort(browser, served):
    base, tokens, fleet = served
    ctx = browser.new_context()
    page = ctx.new_page()
    page.on("dialog", lambda d: d.accept())  # Abort's confirm()
    run_id = submit(base, tokens["alice"])

    page.goto(base + "/ui")
    page.wait_for_selector("#token-form:not([hidden])")
    enter_token(page, tokens["alice"])
    page.wait_for_selector(f'a[href="/ui/runs/{run_id}"]')
    assert "alice (operator)" in page.inner_text("#who")
    page.click(f'a[href="/ui/runs/{run_id}"]')
    page.wait_for_url(f"**/ui/runs/{run_id}")

    # live: the page follows the run through r2's cold start without a reload (token kept per tab)
    seen: list[str] = []

    def at_the_approval() -> bool:
        state, waiting = snapshot(page)
        if state and (not seen or seen[-1] != state):
            seen.append(state)
        return "orchestrate approve" in waiting

    wait_until(at_the_approval, "the page to show the run waiting for its approval", timeout=120)
    assert "r2.cold-start" in seen and seen[-1] == "r2.soak", seen
    assert len(seen) >= 3, seen
    if os.environ.get("ORCHESTRATOR_SCREENSHOT"):
        page.screenshot(path=os.environ["ORCHESTRATOR_SCREENSHOT"], full_page=False)
    assert page.inner_text("#approve").startswith("Approve r2.soak")
    assert "Evidence of each gate" in page.inner_text("#content")

    page.click("#approve")
    page.wait_for_selector('dd[data-field="state"].outcome-DONE', timeout=120_000)
    assert page.is_disabled("#approve") and page.is_disabled("#abort")
    assert page.query_selector('li.terminal.current[data-state="DONE"]')

    ctx.close()


def test_abort_from_the_page_rolls_back(browser, served):
    base, tokens, _ = served
    run_id = submit(base, tokens["alice"])
    ctx = browser.new_context()
    page = ctx.new_page()
    page.on("dialog", lambda d: d.accept())  # Abort's confirm()
    page.goto(f"{base}/ui/runs/{run_id}")
    enter_token(page, tokens["alice"])
    page.wait_for_selector("p.waiting:has-text('orchestrate approve')", timeout=90_000)
    page.click("#abort")
    page.wait_for_selector('dd[data-field="state"].outcome-ROLLED_BACK', timeout=120_000)
    assert " abort " in page.inner_text(".timeline")
    assert page.query_selector('li.terminal.current[data-state="ROLLED_BACK"]')
    ctx.close()


def test_a_wrong_token_is_refused_and_a_viewer_cannot_act(browser, served):
    base, tokens, _ = served
    run_id = submit(base, tokens["alice"])
    ctx = browser.new_context()
    page = ctx.new_page()
    page.goto(f"{base}/ui/runs/{run_id}")
    page.wait_for_selector("#token-form:not([hidden])")
    enter_token(page, "not-the-token-" + "x" * 30)
    page.wait_for_selector("#status.error:has-text('refused')")
    assert not page.query_selector("#approve")  # nothing shown without a valid token

    enter_token(page, tokens["grafana"])
    page.wait_for_selector("#approve")
    assert "grafana (viewer)" in page.inner_text("#who")
    assert page.is_disabled("#approve") and page.is_disabled("#abort")
    # forcing the request from the page anyway: the server says 403
    status = page.evaluate("""async (id) => (await fetch('/runs/' + id + '/abort', {method: 'POST',
        headers: {'Authorization': 'Bearer ' + sessionStorage.getItem('orchestrator-token'),
                  'Content-Type': 'application/json'}, body: '{}'})).status""", run_id)
    assert status == 403
    ctx.close()


def snapshot(page) -> tuple[str | None, str]:
    """One look at the page (it is replaced every second): the current state and the waiting line."""
    return page.evaluate("""() => [
        (document.querySelector('li.state.current') || {dataset: {}}).dataset.state || null,
        (document.querySelector('p.waiting') || {}).textContent || '']""")


def refreshed(page, times: int = 2) -> None:
    """Wait until the page fetched its fragment `times` more times (it refreshes every second): what
    it shows after that is what the server said after the wait began."""
    for _ in range(times):
        page.wait_for_event("response", lambda r: "/ui/fragments/" in r.url, timeout=60_000)


def test_approve_is_only_for_the_gate_the_run_waits_at(browser, served):
    """Issue 21 case 3: on 77b15ae Approve was live in every state and sent `*`: clicked during
    r2's cold start it approved r2.soak ahead, and the run passed the soak without stopping."""
    base, tokens, _ = served
    run_id = submit(base, tokens["alice"])
    ctx = browser.new_context()
    page = ctx.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.accept()))
    page.goto(f"{base}/ui/runs/{run_id}")
    enter_token(page, tokens["alice"])
    page.wait_for_selector('li.state.current[data-state="r2.cold-start"]', timeout=90_000)
    assert page.is_disabled("#approve")  # not at an approval gate: nothing to approve
    assert page.get_attribute("#approve", "data-gate") == ""
    # forced from the page anyway: a wildcard is refused, and so is a gate not reached yet
    forced = page.evaluate("""async (id) => {
        const send = async (body) => (await fetch('/runs/' + id + '/approve', {method: 'POST',
            headers: {'Authorization': 'Bearer ' + sessionStorage.getItem('orchestrator-token'),
                      'Content-Type': 'application/json'}, body: JSON.stringify(body)})).status;
        return [await send({gate: '*'}), await send({gate: 'r2.soak'})];
    }""", run_id)
    assert forced == [400, 409], forced
    # the run stops at r2.soak and waits for a human; only now is Approve live, naming the gate
    page.wait_for_selector("p.waiting:has-text('orchestrate approve')", timeout=90_000)
    state, _ = snapshot(page)
    assert state == "r2.soak"
    assert not page.is_disabled("#approve") and page.inner_text("#approve") == "Approve r2.soak"
    page.click("#approve")
    page.wait_for_selector('dd[data-field="state"].outcome-DONE', timeout=120_000)
    assert dialogs and "Approve r2.soak" in dialogs[0]  # a confirmation first
    audit = page.inner_text("section.audit")
    assert "alice approved r2.soak" in audit and "alice submitted" in audit
    # the DONE message is green, not the amber warning box; the host's replicas are both new
    colour = page.evaluate("() => getComputedStyle(document.querySelector('p.message')).backgroundColor")
    assert colour == "rgb(218, 251, 225)", colour
    assert "new serving" in page.inner_text('li.replica[data-replica="r1"]')
    assert "new serving" in page.inner_text('li.replica[data-replica="r2"]')
    assert page.query_selector("section.canary") and page.query_selector("li.state .took")
    # the fleet page of the runbook: its one host, DONE
    page.goto(f"{base}/ui/fleet/gpu02-glm53-w4afp8-long-context")
    page.wait_for_selector('li.host[data-host="gpu02"].outcome-DONE')
    assert "1 of 1 hosts DONE" in page.inner_text(".fleet-summary")
    ctx.close()


def test_pause_holds_the_run_at_a_safe_step_and_continue_goes_on(browser, served, monkeypatch):
    from orchestrator.journal.sql import SqlJournal

    looks: list[str] = []  # each look of the paused runner (in this process) at its pause
    real_paused = SqlJournal.paused

    def paused(journal, run_id):
        looks.append(run_id)
        return real_paused(journal, run_id)

    monkeypatch.setattr(SqlJournal, "paused", paused)
    base, tokens, fleet = served
    run_id = submit(base, tokens["alice"])
    ctx = browser.new_context()
    page = ctx.new_page()
    page.on("dialog", lambda d: d.accept())
    page.goto(f"{base}/ui/runs/{run_id}")
    enter_token(page, tokens["alice"])
    page.wait_for_selector("#pause:not([disabled])", timeout=30_000)
    page.click("#pause")
    page.wait_for_selector("p.paused:has-text('paused by alice')", timeout=30_000)
    page.wait_for_selector("p.waiting:has-text('paused by alice before')", timeout=90_000)
    held, waiting = snapshot(page)
    # a safe point: never between r2's down and its replacement's readiness
    assert held not in ("r2.dry-run", "r2.apply", "r2.cold-start"), held
    assert f"orchestrate continue {run_id}" in waiting
    # 50 simulated minutes and three looks of the runner at its pause later, and after the page
    # refreshed since: the run has not moved
    paused_at, looked = fleet.now(), len(looks)
    wait_until(lambda: fleet.now() >= paused_at + 3000 and len(looks) >= looked + 3,
               "50 simulated minutes and three polls of the paused runner")
    refreshed(page)
    assert snapshot(page)[0] == held
    assert not page.is_disabled("#continue") and page.is_disabled("#pause")
    page.click("#continue")
    page.wait_for_selector("p.waiting:has-text('orchestrate approve')", timeout=120_000)
    audit = page.inner_text("section.audit")
    assert "alice asked to pause" in audit and "alice continued" in audit and f"paused before {held}" in audit
    ctx.close()


def test_the_page_after_an_abort_says_who_and_keeps_no_stale_line(browser, served):
    base, tokens, _ = served
    run_id = submit(base, tokens["alice"])
    ctx = browser.new_context()
    page = ctx.new_page()
    missing: list[str] = []
    page.on("response", lambda r: missing.append(r.url) if r.status == 404 else None)
    page.on("dialog", lambda d: d.accept())
    page.goto(f"{base}/ui/runs/{run_id}")
    enter_token(page, tokens["alice"])
    page.wait_for_selector("p.waiting:has-text('orchestrate approve')", timeout=90_000)
    runner = page.inner_text('dd[data-field="runner"]')
    assert runner and not re.search(r":\d+:[0-9a-f-]{30,}", runner), runner  # not the raw pid:boot-uuid
    assert "{host}" not in page.inner_text("#content") and "{run_id}" not in page.inner_text("#content")
    page.click("#abort")
    page.wait_for_selector("#action-result.ok", timeout=30_000)
    text = page.inner_text("#action-result")
    refreshed(page)  # the answer keeps its text and its colour while the run goes on
    if page.get_attribute(".run", "data-terminal") == "0":
        assert page.get_attribute("#action-result", "class") == "ok" and page.inner_text("#action-result") == text
    page.wait_for_selector('dd[data-field="state"].outcome-ROLLED_BACK', timeout=120_000)
    refreshed(page)
    content = page.inner_text("#content")
    assert "takes the rollback at its next check" not in content  # nothing stale once the run has ended
    assert "alice asked to abort" in page.inner_text("p.message")  # who, in the run's own message
    assert "alice asked to abort" in page.inner_text("section.audit")
    assert not missing, missing  # the favicon too
    ctx.close()


def test_a_wrong_token_is_told_apart_from_the_first_prompt(browser, served):
    base, tokens, _ = served
    ctx = browser.new_context()
    page = ctx.new_page()
    page.goto(f"{base}/ui")
    page.wait_for_selector("#token-form:not([hidden])")
    first = page.inner_text("#status")
    enter_token(page, "not-the-token-" + "y" * 30)
    page.wait_for_selector("#status.error:has-text('refused that token')")
    assert page.inner_text("#status") != first
    ctx.close()
