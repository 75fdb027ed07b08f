"""The runbook's `analysis:` step (docs/runbook-language.md): compare replicas over a window of live
traffic, like Argo Rollouts' AnalysisTemplate and Kayenta's judge (candidate vs control per metric).
Each gate is judged on a 95 % interval, not a point (orchestrator/analysis/verdict.py): an interval
that straddles the bound, too little traffic or an unknown series is inconclusive, and never passes.
Metrics are the names of `metric_defs.METRICS`. Pure: the loader's part only.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from orchestrator.analysis.metric_defs import METRICS
from orchestrator.util.durations import format_duration, parse_duration


class _Strict(BaseModel):
    """The base of every runbook model (the language's too): unknown keys refused, frozen; the schema
    is built at first use, which resolves forward references (no model_rebuild)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


#: A duration as the runbooks write it (`5m`, `1h30m`, `30`: seconds), held in seconds.
Seconds = Annotated[float, BeforeValidator(parse_duration)]


def check_poll(prefix: str, window_name: str, window: float, poll: float, no: str) -> None:
    """A spec polls at all, and its window holds two scrapes at least (one gives `no` increase or rate);
    `prefix` is the spec's key as its errors name it (`quiet.`), empty for the analysis'."""
    if poll <= 0:
        raise ValueError(f"{prefix}poll must be longer than 0 s")
    if window < poll:
        the = prefix or "the "
        raise ValueError(f"{the}{window_name} ({format_duration(window)}) is shorter than {the}poll "
                         f"({format_duration(poll)}): it would hold one scrape, no {no}")


def check_replicas(here: str, field: str, names: Iterable[str], replicas: Collection[str]) -> None:
    """The loader's check that a spec names only replicas of the runbook."""
    for r in names:
        if r not in replicas:
            raise ValueError(f"{here}: {field} names {r!r}, not a replica of the runbook "
                             f"({', '.join(replicas) or 'none'})")


def _metric(v: str) -> str:
    if v not in METRICS:
        raise ValueError(f"unknown metric {v!r}: one of {', '.join(METRICS)}")
    return v


Metric = Annotated[str, AfterValidator(_metric)]


def bounds_text(lo: float | None, hi: float | None) -> str:
    """A gate's bound as the runbook and the readout say it: `within [a, b]`, `>= a` or `<= b`."""
    if lo is not None and hi is not None:
        return f"within [{lo:g}, {hi:g}]"
    return f">= {lo:g}" if lo is not None else f"<= {hi:g}"


def gate_text(metric: str, replicas: Sequence[str], lo: float | None, hi: float | None) -> str:
    """A gate as the plan and the readout name it: a ratio (candidate, control) or one replica's bound."""
    where = "/".join(replicas) if len(replicas) == 2 else f"of {replicas[0]}"
    return f"{metric} {where} {bounds_text(lo, hi)}"


class RatioGate(_Strict):
    """candidate's metric / control's metric within [min, max] (e.g. TPOT p50 at most 0.9x)."""

    metric: Metric
    candidate: str = Field(min_length=1)
    control: str | None = None
    min: float | None = None
    max: float | None = None

    @model_validator(mode="after")
    def _sound(self) -> RatioGate:
        if not self.control:
            raise ValueError(f"ratio of {self.metric} needs control: (the replica the candidate is compared with)")
        if self.control == self.candidate:
            raise ValueError(f"ratio of {self.metric} compares {self.candidate} with itself")
        if self.min is None and self.max is None:
            raise ValueError(f"ratio of {self.metric} needs min: or max: (a bound that bounds nothing is a typo)")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"ratio of {self.metric}: min is above max")
        return self


class BoundGate(_Strict):
    """One replica's metric at most (`max:`) or at least (`min:`) `value`."""

    metric: Metric
    replica: str = Field(min_length=1)
    value: float


class AnalysisGate(_Strict):
    ratio: RatioGate | None = None
    max: BoundGate | None = None
    min: BoundGate | None = None

    @model_validator(mode="after")
    def _one(self) -> AnalysisGate:
        given = [k for k in ("ratio", "max", "min") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"a gate is exactly one of ratio:, max:, min:, not {given or 'none'}")
        return self

    def metric(self) -> str:
        b = self.ratio or self.max or self.min
        assert b is not None
        return b.metric

    def replicas(self) -> list[str]:
        if self.ratio is not None:
            return [self.ratio.candidate, self.ratio.control or ""]
        b = self.max or self.min
        assert b is not None
        return [b.replica]

    def bounds(self) -> tuple[float | None, float | None]:
        """(lo, hi): the ratio's `min:` and `max:`, or the one replica's `min:` or `max:` value."""
        if self.ratio is not None:
            return self.ratio.min, self.ratio.max
        return (self.min.value if self.min else None), (self.max.value if self.max else None)

    def text(self) -> str:
        return gate_text(self.metric(), self.replicas(), *self.bounds())


class AnalysisRelay(_Strict):
    """The soak relay's per-replica routes: replica -> port, and the env-map variable of its token."""

    token_variable: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    ports: dict[str, int] = Field(min_length=1)

    @field_validator("ports")
    @classmethod
    def _ports(cls, v: dict[str, int]) -> dict[str, int]:
        if any(not 0 < p < 65536 for p in v.values()):
            raise ValueError("a relay port is within 1..65535")
        if len(set(v.values())) != len(v):
            raise ValueError("two replicas share a relay port (each route reaches one engine)")
        return v


class DcgmRoute(_Strict):
    """The soak-relay port whose route reaches DCGM's exporter (device memory, per GPU); its token is
    `relay.token_variable`'s. A replica's GPUs are the runbook's `replica_gpus`."""

    port: int = Field(gt=0, lt=65536)


#: one PromQL label matcher (`name="value"`, `!=`, `=~`, `!~`); a selector is a comma-separated list
_MATCHER = r'\s*[A-Za-z_][A-Za-z0-9_]*\s*(?:=~|!~|!=|=)\s*"(?:[^"\\\n]|\\.)*"\s*'
_SELECTOR = re.compile(rf"^(?:{_MATCHER}(?:,{_MATCHER})*,?\s*)?$")


def _matchers(where: str, v: str) -> str:
    """`v` as a list of PromQL label matchers (stripped), else one line naming `where`."""
    if not _SELECTOR.match(v):
        raise ValueError(f"{where} {v!r} is not a list of PromQL label matchers "
                         '(name="value", name=~"regex", name!="value", comma-separated)')
    if re.search(r'(?:^|,)\s*__name__\s*[=!]', v):
        raise ValueError(f"{where} may not match __name__ (the analysis names its series)")
    return v.strip().rstrip(",")


#: the host a selector's `host="..."` matcher names (the collector's scrape label: `host: ${CVM_HOST}`)
HOST_MATCHER = re.compile(r'(?:^|,)\s*host\s*=\s*"([^"\\]*)"')


class PrometheusQuery(_Strict):
    """`source: prometheus`: each replica's SGLang series read from the inventory's query API
    (`prometheus_url`) as `{__name__=~"...", <replica_label>="<replica>", <selector>}`
    (metricproviders/prometheus_api.py). With `replicas:`, each name a gate reads has its own label
    matchers instead: a control may then live on another host, or pool several engines."""

    #: the label whose value is the runbook's replica name (r1, r2) on every SGLang series
    replica_label: str = Field(default="replica", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    #: more label matchers ANDed into every query, e.g. `job="sglang", instance=~"gpu02.*"`
    selector: str = ""
    #: name -> its own label matchers (the names the gates read; replaces `replica_label`)
    replicas: dict[str, str] | None = None

    @field_validator("selector")
    @classmethod
    def _selector(cls, v: str) -> str:
        return _matchers("prometheus.selector", v)

    @field_validator("replicas")
    @classmethod
    def _replicas(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        if v is None:
            return v
        if not v:
            raise ValueError("prometheus.replicas is empty: name each replica the gates read, or leave it out")
        out: dict[str, str] = {}
        for name, sel in v.items():
            if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", name):
                raise ValueError(f"prometheus.replicas: {name!r} is not a name (lower-case letters, digits, '-')")
            out[name] = _matchers(f"prometheus.replicas.{name}", sel)
            if not out[name]:
                raise ValueError(f"prometheus.replicas.{name} is empty: it would read every engine the API holds, summed")
        seen: dict[str, str] = {}
        for name, sel in out.items():
            key = ",".join(sorted(m.strip() for m in sel.split(",")))
            if key in seen:
                raise ValueError(f"prometheus.replicas.{name} and .{seen[key]} select the same series: "
                                 f"a ratio of one engine with itself")
            seen[key] = name
        return out

    @model_validator(mode="after")
    def _one_way(self) -> PrometheusQuery:
        if self.replicas is not None and "replica_label" in self.model_fields_set:
            raise ValueError("prometheus: replica_label: or replicas: (each replica's own matchers), not both")
        return self

    def of(self, replica: str) -> str:
        """The label matchers that pick `replica`'s series, `selector:` included."""
        own = (self.replicas or {}).get(replica)
        own = own if own is not None else f'{self.replica_label}="{replica}"'
        return f"{own}, {self.selector}" if self.selector else own

    def hosts(self) -> list[str]:
        """The hosts the per-replica matchers name with `host="..."` (the inventory must list them)."""
        return sorted({h for sel in (self.replicas or {}).values() for h in HOST_MATCHER.findall(sel)})


class AnalysisSpec(_Strict):
    window: Seconds
    poll: Seconds
    min_samples: int = Field(ge=1)
    not_enough_traffic: Literal["halt", "fail"] = "halt"
    #: where each replica's series come from: its relay route (default) or a Prometheus query API
    source: Literal["relay", "prometheus"] = "relay"
    relay: AnalysisRelay | None = None
    prometheus: PrometheusQuery | None = None
    dcgm: DcgmRoute | None = None
    gates: list[AnalysisGate] = Field(min_length=1)

    @model_validator(mode="after")
    def _sound(self) -> AnalysisSpec:
        check_poll("", "window", self.window, self.poll, "increase")
        if self.source == "prometheus":
            return self._prometheus_sound()
        if self.relay is None:
            raise ValueError("an analysis reads its replicas through relay: {token_variable, ports} "
                             "(or says source: prometheus)")
        if self.prometheus is not None:
            raise ValueError("prometheus: is read only with source: prometheus")
        if self.dcgm is not None and self.dcgm.port in self.relay.ports.values():
            raise ValueError(f"dcgm.port {self.dcgm.port} is also a replica's relay port (each route reaches one backend)")
        for g in self.gates:
            metric = g.metric()
            if METRICS[metric].origin == "dcgm" and self.dcgm is None:
                raise ValueError(f"gate {g.text()!r} reads {metric} from DCGM's exporter: the analysis needs "
                                 f"dcgm: {{port: N}} (the relay route that reaches it)")
            for r in g.replicas():
                if r not in self.relay.ports:
                    raise ValueError(f"gate {g.text()!r} reads {r}, which relay.ports does not route "
                                     f"(routes: {', '.join(self.relay.ports)})")
        return self

    def _prometheus_sound(self) -> AnalysisSpec:
        if self.relay is not None or self.dcgm is not None:
            raise ValueError("source: prometheus reads every series from the query API: drop relay: and dcgm:")
        for g in self.gates:
            if METRICS[g.metric()].origin == "dcgm":
                raise ValueError(f"gate {g.text()!r} reads DCGM's device memory, which source: prometheus does not "
                                 f"map yet: use source: relay with dcgm: {{port: N}}")
        if self.prometheus is None:
            object.__setattr__(self, "prometheus", PrometheusQuery())
        assert self.prometheus is not None
        if self.prometheus.replicas is not None:
            for g in self.gates:
                for r in g.replicas():
                    if r not in self.prometheus.replicas:
                        raise ValueError(f"gate {g.text()!r} reads {r}, which prometheus.replicas does not select "
                                         f"(selects: {', '.join(self.prometheus.replicas)})")
        return self

    def where(self) -> str:
        """Where the scrapes come from, in words (plan, the heartbeat)."""
        if self.source == "prometheus":
            assert self.prometheus is not None
            q = self.prometheus
            if q.replicas is not None:
                return "from the inventory's Prometheus query API: " + "; ".join(
                    f"{r} by {{{q.of(r)}}}" for r in self.replicas())
            sel = f", {q.selector}" if q.selector else ""
            return (f"from the inventory's Prometheus query API by {q.replica_label}=<replica>{sel}")
        assert self.relay is not None
        return ("through relay :" + "/:".join(str(self.relay.ports[r]) for r in self.replicas())
                + (f", DCGM through :{self.dcgm.port}" if self.dcgm is not None else ""))

    def replicas(self) -> list[str]:
        """Every replica a gate reads, candidates first (the readout's column order)."""
        out = list(dict.fromkeys(r for g in self.gates for r in g.replicas()))
        cands = [g.ratio.candidate for g in self.gates if g.ratio is not None]
        return sorted(out, key=lambda r: (r not in cands, out.index(r)))

    def describe(self) -> str:
        return (f"analysis over {format_duration(self.window)} (a scrape of {', '.join(self.replicas())} every "
                f"{format_duration(self.poll)} " + self.where()
                + f"; each gate needs {self.min_samples} samples per replica): "
                + "; ".join(g.text() for g in self.gates)
                + ". Each gate is judged on a 95 % interval (a bootstrap over the scrape intervals): wholly outside "
                + "its bound fails the phase; straddling it, too little traffic or an unknown series is inconclusive "
                + f"and {'halts for a human' if self.not_enough_traffic == 'halt' else 'fails the phase'}")


def check_against_runbook(here: str, spec: AnalysisSpec, replicas: dict[str, list[str]],
                          gpus: dict[str, list[int]]) -> None:
    """The loader's cross-checks: every replica the analysis routes is one of the runbook's; a DCGM
    gate's replica has GPUs in `replica_gpus` (its device memory is the lowest of theirs)."""
    for g in spec.gates:
        if METRICS[g.metric()].origin == "dcgm":
            for r in g.replicas():
                if r not in gpus:
                    raise ValueError(f"{here}: gate {g.text()!r} reads {r}'s GPUs from DCGM, but replica_gpus "
                                     f"does not list {r}'s GPUs")
    if replicas and spec.relay is None:
        # a name of prometheus.replicas may be a control outside the runbook (another host's engine);
        # the candidate of a ratio is always the runbook's own: it is what the phase's rollback undoes
        own = spec.prometheus.replicas if spec.prometheus is not None and spec.prometheus.replicas is not None else {}
        for g in spec.gates:
            cand = g.ratio.candidate if g.ratio is not None else None
            for r in g.replicas():
                if r not in replicas and (r == cand or r not in own):
                    raise ValueError(f"{here}: an analysis gate reads {r!r} as its "
                                     f"{'candidate' if r == cand else 'replica'}, not a replica of the runbook "
                                     f"({', '.join(replicas)})"
                                     + ("" if r == cand else ": name it under prometheus.replicas with its matchers"))
    if replicas and spec.relay is not None:
        check_replicas(here, "analysis.relay.ports", spec.relay.ports, replicas)
