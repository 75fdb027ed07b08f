"""Capacity owned by the fleet (`capacity: fleet`, the base tier): the stop guard asks for the
drain, and the capacity guard (`presence: {hosts: others}`) asks the peers about the other hosts.

Mutation list (each guard was disabled in the source, the test run and seen failing, the source
restored):
- runtime.py:StopGuard.stop_guard, the `if self.rb.capacity == "fleet"` block removed -> the
  host rule judges: test_fleet_down_once_drained_is_sent_though_no_other_replica_serves fails
  (HALT: no other replica serves);
- same block, `if not listed: continue` made unconditional -> test_fleet_down_while_still_listed
  _halts_and_sends_nothing and test_fleet_down_when_a_peer_cannot_be_asked_halts fail;
- runtime.py:Neighbours.still_listed, the `except ClientError` branch made to `continue` ->
  test_fleet_down_when_a_peer_cannot_be_asked_halts fails;
- steps/presence.py:presence, the `unknown` refusal removed -> test_capacity_guard_fails_for_a
  _host_the_inventory_does_not_know fails (a KeyError, not a named refusal);
- steps/presence.py:presence, `targets` for `others` replaced by this host's address ->
  test_capacity_guard_fails_while_another_host_is_unhealthy fails.
"""

from __future__ import annotations

from fakes import OLD_R2, R1, RB, FakePeer, Rig, ctx_at, engine_log
from orchestrator.hosts.clients.errors import ClientError
from orchestrator.language.runbook import load_runbook

FLEET_RB = RB.model_copy(update={"capacity": "fleet"})
BASE = load_runbook("base-glm53-w4afp8")
ADDR = {"gpu03": "203.0.113.3:8444", "gpu04": "203.0.113.4:8444", "gpu23": "203.0.113.23:8444"}


def at_stop_old(peer_lists, *, r1_ready: bool = False) -> Rig:
    """r2's first step on a host whose capacity is the fleet's; r1 does not serve (cold start)."""
    rig = Rig(state="r2.stop-old", ctx=ctx_at(), rb=FLEET_RB)
    rig.use(peers=[FakePeer("peer-a", peer_lists), FakePeer("peer-b", peer_lists)])
    rig.compose.run(OLD_R2, log=engine_log())
    rig.compose.run(R1, log=engine_log(ready=r1_ready))
    return rig


async def test_fleet_down_once_drained_is_sent_though_no_other_replica_serves():
    rig = at_stop_old(lambda addr, domain: (False, False))
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("ok", "r2.dry-run"), note
    assert [r.services for r in rig.compose.sent("down")] == [(OLD_R2,)]


async def test_fleet_down_while_still_listed_halts_and_sends_nothing():
    # r1 serves too: under the fleet rule that is no reason to stop a host the proxy still routes to
    rig = at_stop_old(lambda addr, domain: (domain == RB.domains.base, True), r1_ready=True)
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("halt", "HALTED")
    assert f"refusing to stop {OLD_R2}" in note and "not drained" in note and RB.domains.base in note
    assert rig.compose.calls == [] and rig.effects() == []


async def test_fleet_down_when_a_peer_cannot_be_asked_halts():
    rig = at_stop_old(lambda addr, domain: (False, False))
    rig.clients.peers[1].error = ClientError("model-proxy peer-b", "connection refused")
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("halt", "HALTED")
    assert "peer-b could not be asked" in note
    assert rig.compose.sent("down") == []


async def test_fleet_down_of_an_engine_that_does_not_serve_needs_no_drain():
    rig = at_stop_old(lambda addr, domain: (True, True))
    rig.compose.host[OLD_R2].log = engine_log(ready=False)
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("ok", "r2.dry-run"), note


def capacity_rig(lists, addresses=ADDR) -> Rig:
    rig = Rig(state="preflight.capacity", rb=BASE, host="gpu03")
    rig.use(peers=[FakePeer("peer-a", lists), FakePeer("peer-b", lists)], addresses=dict(addresses))
    return rig


async def test_capacity_guard_passes_when_every_other_host_is_listed_healthy():
    asked = []

    def lists(addr, domain):
        asked.append(addr)
        return domain == BASE.domains.base, True

    rig = capacity_rig(lists)
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("ok", "preflight.base-listed"), note
    assert set(asked) == {ADDR["gpu04"], ADDR["gpu23"]}  # never this host: it is the one leaving


async def test_capacity_guard_fails_while_another_host_is_unhealthy():
    rig = capacity_rig(lambda addr, domain: (domain == BASE.domains.base, addr != ADDR["gpu23"]))
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("fail", "ABORTED")
    assert "gpu23" in note and "healthy" in note
    assert rig.compose.calls == []


async def test_capacity_guard_fails_for_a_host_the_inventory_does_not_know():
    rig = capacity_rig(lambda addr, domain: (True, True), addresses={"gpu03": ADDR["gpu03"], "gpu04": ADDR["gpu04"]})
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("fail", "ABORTED")
    assert "gpu23 not in the inventory" in note


async def test_fleet_drain_is_judged_on_any_port_of_the_host():
    """The registrar registers HOST_IP:8000 while the inventory may name another port: a host
    listed on any port is not drained (runtime.py:Neighbours.still_listed asks with the bare host;
    with the inventory's `ip:port` this test fails: the down is sent)."""
    host = "10.0.0.2"  # fakes.ENTRY.model_proxy_address is 10.0.0.2:8000
    rig = at_stop_old(lambda addr, domain: (addr == host and domain == RB.domains.long, True))
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("halt", "HALTED"), note
    assert rig.compose.sent("down") == []


async def test_capacity_guard_refuses_while_another_host_of_the_tier_has_a_run_that_has_not_ended():
    """Two terminals, two base hosts: each run sees the other's (runs are created before their
    preflight), so they never leave the pool together (steps/presence.py:presence, the `busy`
    refusal removed -> this test fails: the guard passes)."""
    rig = capacity_rig(lambda addr, domain: (domain == BASE.domains.base, True))
    other = rig.journal.create_run(host="gpu04", runbook=BASE.name, tag="v2", kind="rollout", state="drain.drain", context={})
    [(event, note, to)] = await rig.step()
    assert (event, to) == ("fail", "ABORTED")
    assert "one host of the tier at a time" in note and other.run_id in note and "drain.drain" in note


async def _cache_step(weights):
    from orchestrator.hosts.parsers.compose_manager_reads import parse_host_cache

    rig = Rig(state="prestage.snapshot-cached", rb=BASE, host="gpu03")
    if weights is not None:
        async def host_cache():
            return parse_host_cache({"volumes": [], "weights": weights})
        rig.compose.host_cache = host_cache
    [(event, note, to)] = await rig.step()
    return rig, event, note, to


async def test_a_snapshot_missing_after_the_prestage_fails_before_the_host_is_touched():
    """steps/checks.py:cache_holds, `if missing: return fail(...)` removed -> this test fails."""
    rig, event, note, to = await _cache_step(["models--zai-org--GLM-5.3-Flash"])
    assert (event, to) == ("fail", "prestage.rollback.abort")
    assert "graphistry/GLM-5.3-Flash-W4AFP8" in note
    final = await rig.run_to_end()
    assert final.outcome == "ABORTED" and "could not be pre-staged" in final.message
    assert rig.compose.calls == []


async def test_a_cached_snapshot_passes_and_an_unanswered_cache_is_noted():
    _, event, note, to = await _cache_step(["models--graphistry--GLM-5.3-Flash-W4AFP8", "models--zai-org--GLM-5.3-Flash"])
    assert (event, to) == ("ok", "capacity.others-serve"), note
    _, event, note, to = await _cache_step(None)
    assert (event, to) == ("ok", "capacity.others-serve") and "not checked" in note


async def test_an_operator_abort_in_a_phase_that_changed_nothing_ends_aborted_saying_so():
    """loop.py:_final_message, `not operator_abort` removed -> the message is the capacity refusal's."""
    rig = Rig(state="capacity.others-serve", rb=BASE, host="gpu03")
    rig.journal.request_abort(rig.run.run_id, by="test")
    final = await rig.run_to_end()
    assert final.outcome == "ABORTED"
    assert "aborted by an operator" in final.message and "could not be confirmed" not in final.message
    assert rig.compose.calls == []


async def test_verify_tries_the_cache_hit_pair_as_often_as_the_runbook_says():
    """The base domain balances over several engines: a follow-up that lands elsewhere reports no
    cached tokens. `verify.attempts` (3 on the base tier) tries the pair again (steps/gates.py:
    verify, the loop cut to one try -> the first case fails)."""
    from orchestrator.hosts.clients.inference import CheckResult

    for misses, outcome in ((2, "ok"), (3, "fail")):
        rig = Rig(state="switch.verify", rb=BASE, host="gpu03")
        answers = [CheckResult(False, "cached_tokens = 0")] * misses + [CheckResult(True, "ok")]

        async def cache_hit_check(model, answers=answers):
            return answers.pop(0)

        rig.clients.inference.cache_hit_check = cache_hit_check
        [(event, note, to)] = await rig.step()
        assert event == outcome, note
        if outcome == "fail":
            assert "3 tries" in note and "cached_tokens = 0" in note
