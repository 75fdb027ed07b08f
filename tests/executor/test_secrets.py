"""Nothing the executor journals, logs or reports holds an env-map value or a token.

Two whole runs on the fake host where compose-manager's streams and the engines' logs echo secret
values (sglang prints its server_args, api_key included): a rollout that ends DONE, and one whose
cold start fails on a forbidden line quoting a secret and rolls back. Then every row of every
journal table, every structlog event and every progress event is scanned for every value the run's
redactor must hide (`EnvMap.redaction_values()`). The journal stores what it is given (it has no
redactor), so the executor's own scrubbing is what is tested.

Mutation list (each guard was disabled in the source, the test run and seen failing, the source
restored):
- rule 16 runtime.py:ComposeCalls.mutate, `[self.scrub(x) for x in res.lines[-30:]]` -> the raw lines ->
          test_nothing_journaled_or_logged_holds_a_secret[rollout] fails (effect outcomes);
          runtime.py:RunJournal.record_outcome, `scrubbed` -> `outcome` -> same
          test fails (dry-run effects);
          steps/gates.py:cold_start `rt.scrub(res.line)` AND loop.py:Executor._transition
          `self.redactor.scrub(outcome.note)` both removed -> [failed-cold-start] fails (transition
          note and run message). Either one alone is covered by the other (two layers): removing
          only one does NOT fail that test, by design; loop.py:Executor._transition's scrub alone
          is pinned by test_a_failed_dry_run_quoting_a_secret_is_journaled_scrubbed (dry_run
          quotes the stream's last lines unscrubbed and relies on it).
"""

from __future__ import annotations

import pytest
import structlog

from fakes import ENV, NEW_R2, R1, RB, SECRETS, Rig, ctx_at, engine_log, host_before
from orchestrator.hosts.clients.compose_manager import StreamOutcome


def secret_engine_log(svc: str) -> list[str]:
    if not RB.replica_of(svc):
        return ["started"]
    return engine_log(api_key=SECRETS["PROXY_TOKEN"])


def failing_engine_log(svc: str) -> list[str]:
    if svc == NEW_R2:
        lines = engine_log(ready=False, api_key=SECRETS["PROXY_TOKEN"])
        return lines[:3] + [f"[TP1] NCCL error: unhandled system error (auth={SECRETS['DB_PASSWORD']})"]
    return secret_engine_log(svc)


@pytest.mark.parametrize("boot,outcome", [(secret_engine_log, "DONE"), (failing_engine_log, "ROLLED_BACK")],
                         ids=["rollout", "failed-cold-start"])
async def test_nothing_journaled_or_logged_holds_a_secret(boot, outcome):
    rig = Rig()
    host_before(rig.compose)
    rig.compose.boot = boot
    rig.compose.extra_lines = [f"#0 pulling with HF_TOKEN={SECRETS['HF_TOKEN']} and {ENV['LONG_LABEL']}"]
    with structlog.testing.capture_logs() as logs:
        final = await rig.run_to_end()
    assert final.outcome == outcome, final.message
    if outcome == "ROLLED_BACK":
        assert "NCCL error" in final.message and "auth=***" in final.message  # the line is quoted, scrubbed
    assert rig.compose.sent("up") and rig.compose.sent("down")

    secrets = ENV.redaction_values()
    assert set(SECRETS.values()) <= secrets
    rows = "\n".join(rig.journal._conn.iterdump())  # every row of every table
    assert "compose_up" in rows and "***" in rows  # the scan sees the effects, and something was scrubbed
    texts = {"journal": rows, "logs": repr(logs), "progress": repr(rig.progress.events)}
    leaks = {(where, s) for where, text in texts.items() for s in secrets if s in text}
    assert not leaks


async def test_a_failed_dry_run_quoting_a_secret_is_journaled_scrubbed():
    rig = Rig(state="r2.dry-run", ctx=ctx_at())
    rig.compose.run(R1)
    line = f"error: invalid credentials HF_TOKEN={SECRETS['HF_TOKEN']}"
    rig.compose.on_send = lambda verb, req, env: StreamOutcome("failure", 1, [line])
    with structlog.testing.capture_logs() as logs:
        [(event, _, to)] = await rig.step()
    [tr] = rig.journal.transitions(rig.run.run_id)
    assert event == "fail" and "HF_TOKEN=***" in tr.note
    rows = "\n".join(rig.journal._conn.iterdump())
    assert "HF_TOKEN=***" in rows
    for text in (rows, repr(logs), repr(rig.progress.events)):
        assert SECRETS["HF_TOKEN"] not in text
