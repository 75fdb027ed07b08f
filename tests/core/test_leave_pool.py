"""The live leave-pool guard's rules (orchestrator/engine/leave_pool.py) and the scoped approvals
(orchestrator/engine/rules/approval_scope.py), with fake peers and journals. End-to-end: tests/attack/."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from orchestrator.engine import leave_pool
from orchestrator.hosts.clients.errors import TransportError
from orchestrator.hosts.clients.model_proxy import Presence
from orchestrator.language.runbook import load_runbook
from orchestrator.util.user_errors import Refused, UserError

BASE = load_runbook("base-glm53-w4afp8")
ADDR = {h: f"10.0.0.{i}:8000" for i, h in enumerate(BASE.hosts)}


class Peer:
    def __init__(self, name: str, out: set[str] = frozenset(), fails: set[str] = frozenset()) -> None:
        self.name, self.out, self.fails = name, {ADDR[h] for h in out}, {ADDR[h] for h in fails}

    async def presence(self, address: str, domain: str) -> Presence:
        if address in self.fails:
            raise TransportError("model-proxy", "GET /presence: no answer within 10 s")
        return Presence(address not in self.out, True)


class Journal:
    def __init__(self, runs: dict[str, list] | None = None, effects: dict[str, list] | None = None) -> None:
        self.runs, self.fx = runs or {}, effects or {}

    def list_runs(self, host: str, limit: int = 50) -> list:
        return self.runs.get(host, [])

    def effects(self, run_id: str) -> list:
        return self.fx.get(run_id, [])


def _run(run_id: str, outcome: str | None, runbook: str = BASE.name) -> SimpleNamespace:
    return SimpleNamespace(run_id=run_id, outcome=outcome, terminal=outcome is not None, runbook=runbook,
                           kind="rollout", state="drain.drain")


def _drain(services: tuple[str, ...] = ("model-proxy-registrar",)) -> SimpleNamespace:
    return SimpleNamespace(kind="compose_down", request={"request": {"services": list(services)}})


def refusal(peers, journal=None, host="gpu03", addresses=ADDR):
    return asyncio.run(leave_pool.tier_refusal(journal=journal or Journal(), rb=BASE, host=host, peers=peers,
                                               addresses=addresses))


def test_the_registrar_is_what_takes_a_base_host_out_of_the_pool():
    assert leave_pool.leave_pool_services(BASE) == {"model-proxy-registrar"}
    assert leave_pool.leave_pool_services(load_runbook("gpu02-glm53-w4afp8-long-context")) == set()  # capacity: host


def test_every_other_host_listed_on_every_peer_lets_the_host_leave():
    assert refusal([Peer("peer-a"), Peer("peer-b")]) is None


def test_another_host_out_of_the_pool_on_one_peer_refuses_naming_it():
    out, why = refusal([Peer("peer-a"), Peer("peer-b", out={"gpu04"})])
    assert out == "gpu04" and "peer-b" in why


def test_a_peer_that_cannot_be_asked_counts_as_a_refusal():
    out, why = refusal([Peer("peer-a", fails={"gpu23"}), Peer("peer-b")])
    assert out == "gpu23" and "could not be asked" in why


def test_another_host_with_an_unfinished_run_refuses():
    out, why = refusal([Peer("peer-a"), Peer("peer-b")], Journal({"gpu04": [_run("gpu04-r", None)]}))
    assert out == "gpu04" and "gpu04-r" in why


def test_a_host_the_inventory_does_not_know_refuses():
    out, _ = refusal([Peer("peer-a")], addresses={h: a for h, a in ADDR.items() if h != "gpu23"})
    assert out == "gpu23"


def test_a_run_halted_after_its_drain_refuses_another_hosts_rollback_until_it_is_rolled_back():
    j = Journal({"gpu04": [_run("gpu04-h", "HALTED")]}, {"gpu04-h": [_drain()]})
    with pytest.raises(Refused) as exc:
        leave_pool.refuse_tier_halted(j, BASE, "gpu03")
    assert "gpu04" in str(exc.value) and "orchestrate rollback gpu04" in str(exc.value) and "\n" not in str(exc.value)
    leave_pool.refuse_tier_halted(j, BASE, "gpu04")  # its own rollback only brings it back
    j.runs["gpu04"].insert(0, _run("gpu04-rb", "ROLLED_BACK"))  # rolled back: in the pool again
    leave_pool.refuse_tier_halted(j, BASE, "gpu03")


def test_a_run_halted_before_any_drain_is_not_outside_the_pool():
    j = Journal({"gpu04": [_run("gpu04-h", "HALTED")]}, {"gpu04-h": [_drain(("glm53-soak-relay",))]})
    leave_pool.refuse_tier_halted(j, BASE, "gpu03")


def test_approve_without_a_gate_names_the_gate_the_run_waits_at():
    from orchestrator.engine.rules.approval_scope import waiting_gate

    gates = {"*", "r2.soak"}
    assert waiting_gate(SimpleNamespace(run_id="x", state="r2.soak"), gates) == "r2.soak"
    with pytest.raises(UserError) as exc:
        waiting_gate(SimpleNamespace(run_id="x", state="r2.cold-start"), gates)
    assert not isinstance(exc.value, Refused) and "r2.cold-start" in str(exc.value)
