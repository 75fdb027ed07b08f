"""The simulator keeps docker compose's and 8e07c35's behaviour where the deployed fleet showed it
differs from our assumptions (compose-manager-as-deployed.md, "What docker compose underneath
does"): a change of inline `configs:` content alone recreates nothing (docker/compose#11900) unless
the request forces a recreate of exactly that service; a nonce that is not 32 bytes is refused."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from orchestrator_sim.compose_manager.repo import inline_config_changes_ignored
from orchestrator_sim.host.containers import COMPOSE_VERSION
from orchestrator_sim.testing import CANARY, NEW_TAG, OLD_R2, OLD_TAG, RELAY, TARGET
from orchestrator_sim.testing import SimDriver as Sim

NEW_RELAY_R2 = "model-sg-glm53-w4afp8-tp4-r2"


def _routes(sim: Sim) -> dict[int, str]:
    with sim.host._lock:
        return dict(sim.host._containers[RELAY].relay_routes)


def test_the_host_reports_its_compose_release_and_that_release_ignores_inline_config_changes(sim: Sim) -> None:
    assert f"com.docker.compose.version={COMPOSE_VERSION}" in sim.ps()[RELAY]["Labels"]
    assert inline_config_changes_ignored(COMPOSE_VERSION)
    assert inline_config_changes_ignored("2.38.2")  # docker/compose#13045
    assert not inline_config_changes_ignored("2.20.0")  # before inline `content:` configs existed


def test_a_config_only_change_is_unchanged_and_not_recreated(sim: Sim) -> None:
    """The soak relay differs between the canary file and the long-context file only in its inline
    nginx config (:8009 -> the new r2): compose plans nothing and the up leaves the old relay."""
    before = sim.ps()[RELAY]["ID"]
    assert _routes(sim)[8009] == OLD_R2
    dry = sim.up(NEW_TAG, TARGET, [RELAY], dry_run=True)
    assert dry.ok and dry.plan is not None
    assert dry.plan["plan"]["unchanged"] == [f"Container {RELAY}"] and not dry.plan["plan"]["recreate"]
    assert not [line for line in dry.lines if "Recreate" in line]
    applied = sim.up(NEW_TAG, TARGET, [RELAY], dry_run=False)
    assert applied.ok
    assert sim.ps()[RELAY]["ID"] == before
    assert _routes(sim)[8009] == OLD_R2  # the config did not take


def test_a_scoped_force_recreate_takes_the_new_config(sim: Sim) -> None:
    before = sim.ps()[RELAY]["ID"]
    dry = sim.up(NEW_TAG, TARGET, [RELAY], dry_run=True, force_recreate=True)
    assert dry.ok and dry.plan is not None and dry.plan["plan"]["recreate"] == [f"Container {RELAY}"]
    applied = sim.up(NEW_TAG, TARGET, [RELAY], dry_run=False, force_recreate=True)
    assert applied.ok
    assert sim.ps()[RELAY]["ID"] != before
    assert _routes(sim)[8009] == NEW_RELAY_R2


def test_force_recreate_applies_to_the_named_services_not_their_dependencies(sim: Sim) -> None:
    """`up --force-recreate svc`: compose recreates svc; a dependency is recreated only if it
    diverged (the default of --always-recreate-deps off)."""
    dry = sim.up(OLD_TAG, CANARY, ["proxy-glm53"], dry_run=True, force_recreate=True)
    assert dry.ok and dry.plan is not None
    assert dry.plan["plan"]["recreate"] == ["Container proxy-glm53"]


def test_the_old_assumption_is_a_setting(make_sim: Callable[..., Sim]) -> None:
    sim = make_sim(inline_configs_ignored=False)
    dry = sim.up(NEW_TAG, TARGET, [RELAY], dry_run=True)
    assert dry.ok and dry.plan is not None and dry.plan["plan"]["recreate"] == [f"Container {RELAY}"]


@pytest.mark.parametrize(
    ("nonce", "error"),
    [("ab" * 16, "nonce must be exactly 32 bytes"), ("ab" * 33, "nonce must be exactly 32 bytes"),
     ("abc", "nonce must be hex-encoded"), ("xyz", "nonce must be hex-encoded")],
)
def test_a_nonce_that_is_not_32_bytes_is_refused_as_8e07c35_refuses_it(sim: Sim, nonce: str, error: str) -> None:
    r = sim.client.get(sim.urls.compose_manager + "/v1/attestation/report", params={"nonce": nonce})
    assert (r.status_code, r.json()) == (400, {"status": "error", "error": error})
    ok = sim.client.get(sim.urls.compose_manager + "/v1/attestation/report", params={"nonce": "ab" * 32})
    assert ok.status_code == 200 and ok.json()["nonce"] == "ab" * 32
