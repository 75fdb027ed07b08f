"""`labels:` an engine's log tags (`com.datadoghq.ad.logs`), `nearai.otel.<key>` labels and one
metric's labels carry its replica's `replica_values`. Every mismatch is reported, not only the first.
"""

from __future__ import annotations

import json

from orchestrator.engine.steps.base import Activities, Node, Step, StepOutcome, error_text, fail, ok, register
from orchestrator.hosts.parsers.docker_ps import by_service
from orchestrator.language.step_specs import LabelsSpec
from orchestrator.metricproviders.metrics_text import MetricsTextError, samples

LOG_LABEL = "com.datadoghq.ad.logs"


def log_tags(labels: dict[str, str]) -> dict[str, list[str]]:
    """The datadog log label's `key:value` tags -> key -> values (a malformed label has none)."""
    try:
        configs = json.loads(labels.get(LOG_LABEL, "") or "[]")
    except ValueError:
        return {}
    out: dict[str, list[str]] = {}
    for cfg in configs if isinstance(configs, list) else []:
        for tag in (cfg.get("tags") or []) if isinstance(cfg, dict) else []:
            if isinstance(tag, str) and ":" in tag:
                k, v = tag.split(":", 1)
                out.setdefault(k, []).append(v)
    return out


@register("labels")
async def telemetry_labels(rt: Activities, node: Node, step: Step) -> StepOutcome:
    lb = step.spec(LabelsSpec)
    vals = rt.rb.replica_values[lb.replica]
    c = by_service(await rt.ps()).get(lb.service)
    if c is None:
        return fail(f"{lb.service} is not in docker/ps: no labels to check")
    problems: list[str] = []
    tags = log_tags(c.labels)
    for k in lb.log_tags:
        if vals[k] not in tags.get(k, []):
            problems.append(f"log tag {k}: want {vals[k]}, found {', '.join(tags.get(k, [])) or 'none'}")
    for k in lb.otel_labels:
        got = c.labels.get(f"nearai.otel.{k}")
        if got != vals[k]:
            problems.append(f"label nearai.otel.{k}: want {vals[k]}, found {got if got is not None else 'none'}")
    if lb.metric_labels and lb.relay is not None:
        env = await rt.ensure_env()
        client = rt.relay_client(lb.relay.port, env.get(lb.relay.token_variable, ""))
        try:
            found = samples(await client.metrics_text(), lb.metric)
        except MetricsTextError as exc:
            return fail(f"relay :{lb.relay.port}: {exc}")
        except Exception as exc:  # the relay's client errors, named in the note
            return fail(f"relay :{lb.relay.port}: {rt.scrub(error_text(exc))}")
        if not found:
            problems.append(f"{lb.metric} is not exposed through :{lb.relay.port}")
        for k in lb.metric_labels:
            bad = sorted({s.labels.get(k, "none") for s in found if s.labels.get(k) != vals[k]})
            if bad:
                problems.append(f"metric label {k}: want {vals[k]}, found {', '.join(bad)}")
    if problems:
        return fail(f"{lb.service} telemetry does not match {lb.replica}'s values: " + rt.scrub("; ".join(problems)))
    return ok(f"{lb.service} carries {lb.replica}'s " + ", ".join(sorted({*lb.log_tags, *lb.otel_labels, *lb.metric_labels})))
