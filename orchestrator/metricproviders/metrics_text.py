"""Prometheus text exposition -> samples, read with prometheus_client's own parser (pure). A text
the parser refuses is a `MetricsTextError` with its reason, never a silent empty answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


class MetricsTextError(ValueError):
    pass


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def samples(text: str, name: str) -> list[Sample]:
    """Every sample named `name` (or of the family `name`, without its `_total`/`_count` suffixes)."""
    out: list[Sample] = []
    try:
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if s.name == name or (fam.name == name and s.name in (name, name + "_total")):
                    out.append(Sample(s.name, dict(s.labels), float(s.value)))
    except Exception as exc:  # the parser raises ValueError/IndexError/TypeError on bad input
        raise MetricsTextError(f"the /metrics text does not parse: {type(exc).__name__}: {exc}") from None
    return out


def total(text: str, name: str) -> float | None:
    """The sum over every label set of `name`, or None when the metric is absent."""
    found = samples(text, name)
    return sum(s.value for s in found) if found else None
