"""The invariant checker on synthetic call records (no servers needed)."""

from __future__ import annotations

import itertools
from typing import Any

from orchestrator_sim import RecordedCall, SlotChange, check_invariants, no_call_after
from orchestrator_sim.record.calls import fingerprint
from orchestrator_sim.testing import CANARY, NEW_R2, NEW_TAG, OLD_R2, OLD_TAG, TARGET

ENV = {"HOST_IP": "203.0.113.2", "PROXY_TOKEN": "s3cret-proxy-token", "CVM_NAME": "gpu02"}


class Calls:
    def __init__(self) -> None:
        self.calls: list[RecordedCall] = []
        self._seq = itertools.count(1)
        self._t = itertools.count(0, 10)

    def add(
        self,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        status: int = 200,
        outcome: str = "done:ok",
        effects: list[str] | None = None,
        server: str = "compose-manager",
        method: str = "POST",
    ) -> RecordedCall:
        call = RecordedCall(
            seq=next(self._seq),
            at=float(next(self._t)),
            server=server,
            method=method,
            path=path,
            body=body,
            status=status,
            outcome=outcome,
            effects=effects or [],
        )
        self.calls.append(call)
        return call

    def up(
        self,
        dry_run: bool,
        services: list[str] | None = None,
        env: dict[str, str] | None = None,
        tag: str = NEW_TAG,
        file: str = TARGET,
        **kw: Any,
    ) -> RecordedCall:
        body = {
            "tag": tag,
            "file": file,
            "project": "work",
            "services": [NEW_R2] if services is None else services,
            "env": dict(ENV) if env is None else env,
            "force_recreate": False,
            "dry_run": dry_run,
            **kw.pop("body", {}),
        }
        return self.add("/compose/up", body, **kw)

    def down(self, services: list[str], **kw: Any) -> RecordedCall:
        body = {"tag": OLD_TAG, "file": CANARY, "project": "work", "services": services, "env": dict(ENV)}
        return self.add("/compose/down", body, **kw)

    def ps(self) -> RecordedCall:
        return self.add("/docker/ps", None, method="GET", outcome="http 200")

    def check(self, **kw: Any) -> list[str]:
        return check_invariants(self.calls, dashboard_env=ENV, **kw)


def test_the_safe_sequence_passes() -> None:
    c = Calls()
    c.ps()
    c.down([OLD_R2])
    c.up(True)
    c.ps()
    c.up(False)
    assert c.check() == []


def test_an_apply_without_a_dry_run() -> None:
    c = Calls()
    c.up(False)
    [problem] = c.check()
    assert "call #1 (compose/up" in problem and "not preceded by a successful dry run" in problem


def test_a_dry_run_of_another_request_does_not_count() -> None:
    for different in ({"services": ["nginx"]}, {"tag": OLD_TAG}, {"env": {**ENV, "CVM_NAME": "x"}}):
        c = Calls()
        c.up(True, **different)
        c.up(False)
        assert any("not preceded by a successful dry run" in p for p in c.check()), different


def test_a_failed_dry_run_does_not_count() -> None:
    c = Calls()
    c.up(True, outcome="done:failed(1)")
    c.up(False)
    assert any("not preceded" in p for p in c.check())


def test_a_mutating_call_between_dry_run_and_apply() -> None:
    c = Calls()
    c.up(True)
    c.down(["glm53-soak-relay"])
    c.up(False)
    assert any("call #3" in p and "not preceded" in p for p in c.check())


def test_rejected_calls_in_between_are_harmless() -> None:
    c = Calls()
    c.up(True)
    c.up(False, status=409, outcome="http 409")  # busy: docker never ran
    c.up(False)
    assert c.check() == []


def test_a_cut_apply_needs_a_new_dry_run() -> None:
    c = Calls()
    c.up(True)
    c.up(False, outcome="cut:before-effect")
    c.up(False)
    assert [p for p in c.check() if "not preceded" in p] and "call #3" in c.check()[0]


def test_empty_services_and_force_recreate() -> None:
    c = Calls()
    c.up(True, services=[])
    c.down([])
    c.up(True, body={"force_recreate": True})
    problems = c.check()
    assert sum("empty services list" in p for p in problems) == 2
    assert any("call #3" in p and "force_recreate" in p for p in problems)


def test_force_recreate_is_allowed_only_on_requests_naming_no_engine() -> None:
    c = Calls()
    c.up(True, services=["glm53-soak-relay"], body={"force_recreate": True})
    c.up(False, services=["glm53-soak-relay"], body={"force_recreate": True})
    assert not [p for p in c.check() if "force_recreate" in p]
    c.up(True, services=["glm53-soak-relay", NEW_R2], body={"force_recreate": True})
    assert [p for p in c.check() if "force_recreate" in p and NEW_R2 in p]


def test_env_map_not_passed_whole_names_keys_never_values() -> None:
    c = Calls()
    partial = {k: v for k, v in ENV.items() if k != "PROXY_TOKEN"}
    c.up(True, env=partial)
    c.up(True, env={**ENV, "EXTRA": "x"})
    c.up(True, env={**ENV, "PROXY_TOKEN": "another-value"})
    problems = c.check()
    assert any("missing PROXY_TOKEN" in p for p in problems)
    assert any("extra EXTRA" in p for p in problems)
    assert any("changed PROXY_TOKEN" in p for p in problems)
    assert not any(v in p for p in problems for v in ("s3cret-proxy-token", "another-value"))


def test_fingerprinted_env_maps_from_calls_jsonl_compare_equal() -> None:
    c = Calls()
    c.up(True, env={k: fingerprint(v) for k, v in ENV.items()})
    c.up(False, env={k: fingerprint(v) for k, v in ENV.items()})
    assert c.check() == []


def test_orphan_removals_are_listed() -> None:
    c = Calls()
    c.up(True)
    c.up(False, effects=[f"orphan-removed:{OLD_R2}"])
    [problem] = c.check()
    assert OLD_R2 in problem and "orphan" in problem


def test_both_slots_down_is_flagged_unless_allowed() -> None:
    initial = {"r1": True, "r2": True}
    changes = [
        SlotChange(100.0, "r2", False, OLD_R2),
        SlotChange(200.0, "r1", False, "r1"),
        SlotChange(260.0, "r1", True, "r1"),
        SlotChange(900.0, "r2", True, NEW_R2),
    ]
    problems = check_invariants([], timeline=(initial, changes))
    assert problems == ["both replica slots were not serving from t=200s to t=260s"]
    assert check_invariants([], timeline=(initial, changes), allow_outage=True) == []
    fine = [
        SlotChange(100.0, "r2", False, OLD_R2),
        SlotChange(900.0, "r2", True, NEW_R2),
        SlotChange(1000.0, "r1", False, "r1"),
    ]
    assert check_invariants([], timeline=(initial, fine)) == []
    open_ended = changes[:2]
    assert check_invariants([], timeline=(initial, open_ended)) == [
        "both replica slots were not serving from t=200s to the end of the run"
    ]


def test_no_call_after() -> None:
    c = Calls()
    c.ps()
    c.ps()
    late = c.ps()
    [problem] = no_call_after(c.calls, 15.0)
    assert problem.startswith(f"call #{late.seq} ")
    assert len(c.check(no_call_after=5.0)) == 2
    assert c.check(no_call_after=100.0) == []
