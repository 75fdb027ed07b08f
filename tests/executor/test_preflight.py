"""Preflight: masked credentials in the env map, and host-state placement.

Mutation list (each guard was disabled in the source, the test run and seen failing, the source
restored):
- rule 13 steps/checks.py:env_map_check, `if masked: return fail(...)` removed ->
          test_masked_credentials_abort_the_rollout_before_anything_is_sent fails (the run goes on
          and sends dry runs and downs); runtime.py:EnvReader.ensure_env, `if masked: raise MaskedEnv`
          removed -> test_masked_credentials_read_on_resume_halt_and_send_nothing fails (RETRY).
- rule 14 steps/checks.py:host_state_check, `if state.action == "done": return skip(...)`
          removed -> test_host_at_target_is_done_with_nothing_to_do fails (ABORTED); the loop refusing
          beside another run of the host that has not ended removed ->
          test_host_at_target_beside_an_interrupted_run_is_refused_naming_it fails (DONE);
          `if (wanted or first) == target` -> `if True` -> test_part_way_host_without_continue_*
          fails (OK); the `--continue` command dropped from the part-way message -> same test
          fails; `diff = ...` -> `diff = ""` -> test_unrecognised_host_is_refused_with_the_difference fails.
"""

from __future__ import annotations

import pytest

from fakes import ENV, NEW_R2, OLD_R2, R1, RB, SHARED, SIDECARS, TAG, Rig, ctx_at, host_before
from orchestrator.hosts.envmap import EnvMap

# -- rule 13 --------------------------------------------------------------------------------------

@pytest.mark.parametrize("masked", ["***", "<redacted>", ""], ids=["stars", "redacted", "empty"])
async def test_masked_credentials_abort_the_rollout_before_anything_is_sent(masked):
    rig = Rig(env=(EnvMap({**ENV, "HF_TOKEN": masked}),))
    host_before(rig.compose)
    final = await rig.run_to_end()
    assert final.outcome == "ABORTED"
    assert final.state == "ABORTED" and "HF_TOKEN" in final.message and "masked" in final.message
    assert rig.compose.calls == [] and rig.effects() == []
    assert [t.from_state for t in rig.journal.transitions(rig.run.run_id)] == ["preflight.read-env"]


async def test_masked_credentials_read_on_resume_halt_and_send_nothing():
    rig = Rig(state="r2.dry-run", ctx=ctx_at(), env=(ENV, EnvMap({**ENV, "PROXY_TOKEN": "***"})))
    rig.compose.run(R1)
    assert [e for e, _, _ in await rig.step()] == ["ok"]
    rig.resume()  # the dashboard now serves a map copied from a redacted view
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("halt", "HALTED")
    assert "PROXY_TOKEN" in note
    assert rig.compose.sent("up") == []


# -- rule 14 --------------------------------------------------------------------------------------

def place(rig: Rig, *, old_r2: str | None, new_r2: str | None, r1: str | None, shared: str = "old") -> None:
    """What the host runs: per engine None (absent), "old" (previous file) or "new" (the target)."""
    def put(svc: str, what: str | None) -> None:
        if what == "old":
            rig.compose.run(svc)
        elif what == "new":
            rig.compose.run(svc, file=RB.file, tag=TAG)

    put(OLD_R2, old_r2)
    put(NEW_R2, new_r2)
    put(R1, r1)
    for svc in (*SIDECARS, *SHARED):
        put(svc, shared)


async def placement(start_phase: str | None = None, **host: str | None) -> tuple[Rig, list[tuple[str, str, str]]]:
    ctx = ctx_at(start_phase=start_phase)
    rig = Rig(state="preflight.host-state", ctx=ctx, start_phase=start_phase)
    place(rig, **host)
    before = {s: c.id for s, c in rig.compose.host.items()}
    steps = await rig.step()
    assert {s: c.id for s, c in rig.compose.host.items()} == before  # placement changes nothing
    assert {v for v, _, _ in rig.compose.calls} <= {"dry_run"}
    return rig, steps


async def test_host_before_the_rollout_runs_from_the_start():
    rig, [(event, note, to)] = await placement(old_r2="old", new_r2=None, r1="old")
    assert (event, to) == ("ok", "preflight.before-state"), note
    assert rig.ctx.placement.state == "before"


async def test_host_at_target_is_done_with_nothing_to_do():
    rig, [(event, note, to)] = await placement(old_r2=None, new_r2="new", r1="new", shared="new")
    assert (event, to) == ("skip", "DONE"), note
    final = rig.record()
    assert final.outcome == "DONE" and "nothing to do" in final.message
    assert rig.compose.sent("dry_run") and not rig.compose.sent("up") and not rig.compose.sent("down")


async def test_host_at_target_beside_an_interrupted_run_is_refused_naming_it():
    """Ctrl-C during a soak leaves the host at the target and the run interrupted: a new rollout
    must not end DONE "nothing to do" in its place (its soak and approval never passed)."""
    from orchestrator.journal.sqlite import SqliteJournal

    journal = SqliteJournal(":memory:")
    earlier = journal.create_run(host="gpu02", runbook=RB.name, tag=TAG, kind="rollout", state="r1.soak", context={})
    rig = Rig(state="preflight.host-state", ctx=ctx_at(), journal=journal)
    place(rig, old_r2=None, new_r2="new", r1="new", shared="new")
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("fail", "ABORTED")
    assert earlier.run_id in note and f"orchestrate resume {earlier.run_id}" in note and "r1.soak" in note
    assert not rig.compose.sent("up") and not rig.compose.sent("down")


async def test_part_way_host_without_continue_is_refused_naming_the_command():
    rig, [(event, note, to)] = await placement(old_r2=None, new_r2="new", r1="old")
    assert (event, to) == ("fail", "ABORTED")
    assert "r2-moved" in note and "Nothing was changed" in note
    assert f"orchestrate rollout gpu02 --tag {TAG} --continue" in note
    assert "--continue" in rig.record().message


async def test_part_way_host_with_continue_at_its_phase_goes_on():
    rig, [(event, note, to)] = await placement(start_phase="r1", old_r2=None, new_r2="new", r1="old")
    assert (event, to) == ("ok", "preflight.before-state"), note


async def test_unrecognised_host_is_refused_with_the_difference():
    # both r2 engines run: no declared state has that
    rig, [(event, note, to)] = await placement(old_r2="old", new_r2="new", r1="old")
    assert (event, to) == ("fail", "ABORTED")
    assert "does not recognise" in note and "Nothing was changed" in note
    assert "nearest is before" in note and f"{NEW_R2}: expected absent, runs new" in note


# -- the orchestrator's own tag check (compose-manager's age gate is off in production) -----------
# Mutation list: tag_age_check / Preflight.check_tag_age
#   - the `except GitHubUnreachable` branch returning FAIL unless skipped (test_unreachable_github_*)
#   - `return False, ... {res.reason}` for a tag that is not ok (test_a_young_tag_*)


class _GitHub:
    def __init__(self, result=None, exc=None):
        self.result, self.exc, self.calls = result, exc, []

    async def check_tag(self, repo, tag, *, min_age_hours, now):
        self.calls.append((repo, tag, min_age_hours))
        if self.exc is not None:
            raise self.exc
        return self.result


async def _tag_age(rig_kw, github):
    from orchestrator.engine.context import RunContext
    from tests.executor.fakes import Rig

    rig = Rig(state="preflight.tag-age", ctx=RunContext(**rig_kw))
    rig.use(github=github)
    rig.entry_github = True
    return await rig.step(1)


async def test_unreachable_github_refuses_unless_skipped():
    from orchestrator.hosts.clients.github import GitHubUnreachable

    gh = _GitHub(exc=GitHubUnreachable("github", "rate limited"))
    (ev, note, to), = await _tag_age({}, gh)
    assert (ev, to) == ("fail", "ABORTED") and "--skip-tag-age-check" in note
    (ev, note, to), = await _tag_age({"skip_tag_age_check": True}, _GitHub(exc=GitHubUnreachable("github", "down")))
    assert ev == "ok"


async def test_a_young_tag_is_refused_and_an_old_merged_one_passes():
    from orchestrator.hosts.clients.github import TagCheck

    (ev, note, to), = await _tag_age({}, _GitHub(TagCheck(ok=False, reason="its commit is 3 h old, less than 48 h")))
    assert (ev, to) == ("fail", "ABORTED") and "3 h old" in note
    gh = _GitHub(TagCheck(ok=True, commit="abc123"))
    (ev, note, to), = await _tag_age({}, gh)
    assert ev == "ok" and gh.calls[0][2] == 48
