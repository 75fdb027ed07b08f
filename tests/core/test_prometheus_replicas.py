"""`source: prometheus` with per-replica label matchers (`prometheus.replicas`): a control that
lives on another host (gpu23 for a gpu02 canary), or several engines pooled as one control.
Load-time validation (one line), the offline inventory check, the query each replica gets, and the
simulator's query API holding every simulated host's engines."""

from __future__ import annotations

import copy

import pytest
from pydantic import ValidationError

from orchestrator.analysis.spec import AnalysisSpec
from orchestrator.language.runbook import parse_runbook
from orchestrator.metricproviders.prometheus_api import replica_query
from orchestrator.util.user_errors import UserError
from tests.core.test_analysis_spec import GOOD, with_analysis

R2 = 'host="gpu02", container_name="model-sg-glm53-w4afp8-tp4-r2"'
GPU23 = 'host="gpu23", container_name=~"model-sg-glm53-fp8-tp4-r[12]"'
GATES = [{"ratio": {"metric": "tpot_p50", "candidate": "r2", "control": "gpu23", "max": 0.9}},
         {"min": {"metric": "completion_rate", "replica": "r2", "value": 0.99}}]
PROM = {**{k: v for k, v in GOOD.items() if k not in ("relay", "gates")}, "source": "prometheus", "gates": GATES,
        "prometheus": {"selector": 'job="sglang"', "replicas": {"r2": R2, "gpu23": GPU23}}}


def _spec(**prometheus) -> AnalysisSpec:
    return AnalysisSpec.model_validate({**PROM, "prometheus": {**PROM["prometheus"], **prometheus}})


def test_a_control_on_another_host_loads_and_plan_says_each_replicas_matchers():
    rb = parse_runbook(with_analysis(PROM))
    st = next(s for s in rb.phases[0].steps if s.id == "canary-readout")
    assert st.analysis is not None and st.analysis.replicas() == ["r2", "gpu23"]
    text = st.analysis.describe()
    assert (f'from the inventory\'s Prometheus query API: r2 by {{{R2}, job="sglang"}}; '
            f'gpu23 by {{{GPU23}, job="sglang"}}') in text, text
    assert "tpot_p50 r2/gpu23 <= 0.9" in text


def test_each_replica_is_queried_by_its_own_matchers_and_the_shared_selector():
    q = _spec().prometheus
    assert q is not None and q.of("gpu23") == f'{GPU23}, job="sglang"'
    query = replica_query("gpu23", q.replica_label, q.selector, (q.replicas or {})["gpu23"])
    assert query.startswith('{__name__=~"') and query.endswith(f', {GPU23}, job="sglang"}}')
    assert 'replica="gpu23"' not in query  # the name is the runbook's, never a label value
    # without replicas: the replica label as before
    assert replica_query("r2", "replica", 'job="sglang"').endswith(', replica="r2", job="sglang"}')


@pytest.mark.parametrize(("over", "why"), [
    ({"replicas": {}}, "prometheus.replicas is empty"),
    ({"replicas": {"r2": "", "gpu23": GPU23}}, "prometheus.replicas.r2 is empty"),
    ({"replicas": {"r2": 'host="gpu02', "gpu23": GPU23}}, "prometheus.replicas.r2 'host=\"gpu02' is not a list of PromQL"),
    ({"replicas": {"r2": '__name__="x"', "gpu23": GPU23}}, "prometheus.replicas.r2 may not match __name__"),
    ({"replicas": {"R2": R2, "gpu23": GPU23}}, "'R2' is not a name"),
    ({"replicas": {"r2": R2, "gpu23": 'container_name="model-sg-glm53-w4afp8-tp4-r2", host="gpu02"'}},
     "prometheus.replicas.gpu23 and .r2 select the same series"),
    ({"replica_label": "replica"}, "replica_label: or replicas:"),
    ({"replicas": {"r2": R2}}, "reads gpu23, which prometheus.replicas does not select (selects: r2)"),
])
def test_a_bad_per_replica_selector_is_refused_in_one_line(over: dict, why: str):
    with pytest.raises(ValidationError) as e:
        _spec(**over)
    assert why in str(e.value), str(e.value)


def test_the_candidate_is_the_runbooks_own_a_control_may_live_elsewhere():
    # the control gpu23 is no replica of the runbook: named with its matchers, it is allowed
    parse_runbook(with_analysis(PROM))
    # a candidate is what the phase's rollback undoes: it must be the runbook's
    bad = copy.deepcopy(PROM)
    bad["gates"] = [{"ratio": {"metric": "tpot_p50", "candidate": "gpu23", "control": "r2", "max": 0.9}}]
    with pytest.raises(UserError, match="reads 'gpu23' as its candidate, not a replica of the runbook"):
        parse_runbook(with_analysis(bad))
    # without per-replica matchers, a name outside the runbook is refused as before
    plain = copy.deepcopy(PROM)
    del plain["prometheus"]["replicas"]
    with pytest.raises(UserError, match="reads 'gpu23' as its replica, not a replica of the runbook"):
        parse_runbook(with_analysis(plain))


def test_offline_a_host_the_inventory_does_not_list_is_refused():
    rb = parse_runbook(with_analysis(PROM))
    assert rb.inventory_problem("gpu02", ["gpu02", "gpu23"], has_prometheus=True) is None
    msg = rb.inventory_problem("gpu02", ["gpu02"], has_prometheus=True) or ""
    assert "reads a replica on host 'gpu23'" in msg and "which the inventory does not list (gpu02)" in msg, msg
    assert "\n" not in msg
