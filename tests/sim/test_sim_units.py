"""Small pure pieces of the simulator: interpolation, the budget rule, docker's formats, the
compose model read from the fixture files."""

from __future__ import annotations

import pytest

from orchestrator_sim.compose_manager.interpolation import InterpolationError, Interpolator, interpolate
from orchestrator_sim.compose_manager.repo import (
    BASE_CANONICAL_FILE,
    PREVIOUS_FILE,
    TARGET_FILE,
    SimRepository,
    load_compose,
    parse_duration,
)
from orchestrator_sim.host.docker_format import human_duration, labels_string
from orchestrator_sim.host.hicache_budget import GIB, BudgetError, resolve_budget

ENV = {
    "PROXY_TOKEN": "p",
    "HOST_IP": "203.0.113.2",
    "ENV": "prod",
    "CVM_HOST": "h",
    "CVM_NAME": "gpu02",
    "MODEL_PROXY_TOKEN": "m",
    "HUGGING_FACE_HUB_TOKEN": "hf",
    "MONITORING_INGEST_TOKEN": "t",
    "CLOUD_API_USAGE_TOKEN": "c",
    "FUSION_ENABLED": "false",
    "FUSION_INTERNAL_BEARER_TOKEN": "f",
    "WEB_CONTEXT_SEARCH_URL": "u",
    "WEB_CONTEXT_SEARCH_API_KEY": "k",
}


@pytest.mark.parametrize(
    "text, env, expected",
    [
        ("${GLM53_HICACHE_RAM_BUDGET:-406GiB}", {}, "406GiB"),
        ("${GLM53_HICACHE_RAM_BUDGET:-406GiB}", {"GLM53_HICACHE_RAM_BUDGET": ""}, "406GiB"),
        ("${GLM53_HICACHE_RAM_BUDGET-406GiB}", {"GLM53_HICACHE_RAM_BUDGET": ""}, ""),
        ("${GLM53_HICACHE_RAM_BUDGET:-406GiB}", {"GLM53_HICACHE_RAM_BUDGET": "80%"}, "80%"),
        ("$${X} $$HOME ${A:-${B:-deep}}", {}, "${X} $HOME deep"),
        ("${A:+set}|${B:+set}", {"A": "1", "B": ""}, "set|"),
        ("$HOST_IP:8444", {"HOST_IP": "203.0.113.2"}, "203.0.113.2:8444"),
    ],
)
def test_interpolation(text: str, env: dict, expected: str) -> None:
    assert interpolate(text, env) == expected


def test_interpolation_required_and_unset() -> None:
    with pytest.raises(InterpolationError, match="required variable PROXY_TOKEN is missing a value: needed"):
        interpolate("${PROXY_TOKEN:?needed}", {})
    i = Interpolator({})
    assert i.text("a${MISSING}b") == "ab" and i.unset == {"MISSING"}


def test_budget_rule() -> None:
    b = resolve_budget("406GiB", 1223 * GIB)
    assert (b.replica_bytes, b.rank_bytes, b.fits) == (435939180544, 108984795136, True)
    assert resolve_budget("80%", 1312760446975).rank_bytes == 262552089395
    assert resolve_budget("650GiB", 1223 * GIB).fits
    assert not resolve_budget("650GiB", 1223 * GIB - 650 * GIB).fits
    assert resolve_budget("406GB", 10**15).rank_bytes == 101500000000
    with pytest.raises(BudgetError):
        resolve_budget("lots", GIB)


def test_docker_durations_and_labels() -> None:
    assert [human_duration(s) for s in (0.5, 1, 5, 61, 150, 3600, 7200, 3 * 86400, 29 * 86400)] == [
        "Less than a second",
        "1 second",
        "5 seconds",
        "About a minute",
        "2 minutes",
        "About an hour",
        "2 hours",
        "3 days",
        "4 weeks",
    ]
    assert labels_string({"b": "2", "a": "x,y"}) == "a=x,y,b=2"
    assert parse_duration("5m") == 300 and parse_duration("1m30s") == 90 and parse_duration(None) == 10


def test_fixture_files_carry_the_rollout_facts() -> None:
    repo = SimRepository.load()
    # the base tier's canonical FP8 file (#293's merge) sits at every tag besides gpu02's files
    assert set(repo.tag("v0.0.290").files) == {PREVIOUS_FILE, BASE_CANONICAL_FILE}
    assert set(repo.tag("v0.0.300").files) == {PREVIOUS_FILE, TARGET_FILE, BASE_CANONICAL_FILE}
    assert repo.tag("v0.0.300").age_hours > 72 and repo.tag("v0.0.290").age_hours >= 24 * 29
    canary = load_compose(
        repo.file_text("v0.0.290", PREVIOUS_FILE), ENV, path=PREVIOUS_FILE, tag="v0.0.290", commit="c"
    )
    target = load_compose(repo.file_text("v0.0.300", TARGET_FILE), ENV, path=TARGET_FILE, tag="v0.0.300", commit="c")
    assert canary.unset_variables == () and target.unset_variables == ()
    assert canary.proxy_pool() == ["model-sg-glm53-w4afp8-tp4-r1", "model-sg-glm53-fp8-tp4-r2"]
    assert target.proxy_pool() == ["model-sg-glm53-w4afp8-tp4-r1", "model-sg-glm53-w4afp8-tp4-r2"]
    assert canary.relay_routes() == {8008: "model-sg-glm53-w4afp8-tp4-r1", 8009: "model-sg-glm53-fp8-tp4-r2"}
    assert target.relay_routes() == {8008: "model-sg-glm53-w4afp8-tp4-r1", 8009: "model-sg-glm53-w4afp8-tp4-r2"}
    engines = {n: s for n, s in target.services.items() if s.is_engine}
    assert set(engines) == {"model-sg-glm53-w4afp8-tp4-r1", "model-sg-glm53-w4afp8-tp4-r2"}
    for name, slot, port in [
        ("model-sg-glm53-w4afp8-tp4-r1", "r1", "29510"),
        ("model-sg-glm53-w4afp8-tp4-r2", "r2", "29511"),
    ]:
        s = engines[name]
        assert s.slot == slot and f"--dist-init-addr 127.0.0.1:{port}" in s.command
        assert s.environment["SGLANG_HICACHE_RAM_BUDGET"] == "406GiB" and s.stop_grace_s == 300
        assert s.depends_on == {"model-downloader": "service_completed_successfully"}
        assert "fde25985aea3" in s.image
    assert canary.services["model-sg-glm53-fp8-tp4-r2"].environment["SGLANG_HICACHE_RAM_BUDGET"] == "80%"
    assert not canary.services["model-sg-glm53-w4afp8-tp4-r1"].is_hicache
    assert target.services["glm53-soak-relay"].profiles == ("verification",)
    assert "model-downloader" in target.default_services() and canary.default_services() == []
    text = repo.file_text("v0.0.300", TARGET_FILE)
    assert "SGLANG_HICACHE_RAM_BUDGET=${GLM53_HICACHE_RAM_BUDGET:-406GiB}" in text
    assert "tp2" not in "".join(target.services) and "GLM53_R2_HICACHE_RAM_BUDGET" not in text
