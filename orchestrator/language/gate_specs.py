"""The runbook's gates on things outside the engines (`env`, `manual`, `proxy_pool`, `pull_request`,
`http_json`, `query`, `attestation`, `image`): pure specs, the loader's part only (the handlers are
orchestrator/engine/steps/env.py, manual.py, external.py and query.py).

Text values may name `{host}`, `{tag}`, `{file}`, `{run_id}` and `{file_sha256}` (the sha256 of
the runbook's file at the run's tag, read from GitHub); anything else in braces is refused. In a
`query:`'s PromQL only braces holding a bare name are placeholders (`fill_query`).
"""

from __future__ import annotations

import re
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from orchestrator.analysis.spec import check_replicas
from orchestrator.language.step_specs import OptionalSeconds, Seconds, _Strict
from orchestrator.util.durations import format_duration

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PLACEHOLDERS = ("host", "tag", "file", "run_id", "file_sha256")
_BRACES = re.compile(r"\{([^{}]*)\}")


def check_placeholders(text: str, what: str) -> str:
    for name in _BRACES.findall(text):
        if name not in PLACEHOLDERS:
            raise ValueError(f"{what}: unknown placeholder {{{name}}} (one of {', '.join('{' + p + '}' for p in PLACEHOLDERS)})")
    return text


def fill(text: str, values: dict[str, str]) -> str:
    """`text` with its placeholders replaced (every one is known: the loader checked)."""
    return _BRACES.sub(lambda m: values.get(m.group(1), m.group(0)), text)


def json_at(payload: Any, path: str) -> Any:
    """The value at a dotted path (`a.b.0.c`: object keys, list indexes). KeyError naming the
    segment that is not there."""
    cur = payload
    for part in path.split("."):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.lstrip("-").isdigit() and -len(cur) <= int(part) < len(cur):
            cur = cur[int(part)]
        else:
            raise KeyError(part)
    return cur


def needs_file_sha(*texts: str) -> bool:
    return any("{file_sha256}" in t for t in texts)


class EnvSpec(_Strict):
    """`env: {host: this, absent: [KEY], equals: {KEY: value}, within: 0s}`."""

    #: `this` (the run's host) or another inventory host's name (its env map on the dashboard)
    host: str = Field(default="this", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    absent: list[str] = Field(default_factory=lambda: [])
    equals: dict[str, str] = Field(default_factory=lambda: {})
    #: polled until it holds (0: checked once)
    within: Seconds = 0.0

    @model_validator(mode="after")
    def _sound(self) -> EnvSpec:
        if not self.absent and not self.equals:
            raise ValueError("an env check needs absent: or equals: (it would check nothing)")
        for k in [*self.absent, *self.equals]:
            if not _KEY.match(k):
                raise ValueError(f"env key {k!r} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)")
        both = set(self.absent) & set(self.equals)
        if both:
            raise ValueError(f"env key {sorted(both)[0]!r} cannot be both absent and equal to a value")
        for k, v in self.equals.items():
            check_placeholders(v, f"env.equals.{k}")
        return self

    def text(self) -> str:
        who = "this host's" if self.host == "this" else f"{self.host}'s"
        parts = [f"{k} absent" for k in self.absent] + [f"{k} = {v!r}" for k, v in self.equals.items()]
        return (f"{who} env map (dashboard): {', '.join(parts)}"
                + (f", polled up to {format_duration(self.within)}" if self.within else ""))


class ManualVerify(_Strict):
    env: EnvSpec


class ManualSpec(_Strict):
    """`manual: {edit: "...", verify: {env: {...}}}`: a human's edit, approved, then verified."""

    #: what the human must do, in words (where and what): printed, journaled, shown by `plan`
    edit: str = Field(min_length=1)
    verify: ManualVerify

    _e = field_validator("edit")(classmethod(lambda cls, v: check_placeholders(v, "manual.edit")))

    def text(self) -> str:
        return (f"MANUAL EDIT by a human: {self.edit}; then `orchestrate approve RUN_ID --gate <this state>` (or --yes); "
                f"then verified: {self.verify.env.text()}")


class ProxyPoolSpec(_Strict):
    """`proxy_pool: {port: 8000, token_variable: PROXY_TOKEN, contains: [r2], lacks: [r1], within: 5m}`."""

    port: int = Field(gt=0, lt=65536)
    token_variable: str = Field(default="PROXY_TOKEN", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    #: replicas one of whose engines the pool must list healthy
    contains: list[str] = Field(default_factory=lambda: [])
    #: replicas none of whose engines the pool may list
    lacks: list[str] = Field(default_factory=lambda: [])
    within: Seconds = 0.0

    @model_validator(mode="after")
    def _sound(self) -> ProxyPoolSpec:
        if not self.contains and not self.lacks:
            raise ValueError("a proxy_pool gate needs contains: or lacks: (it would check nothing)")
        if set(self.contains) & set(self.lacks):
            raise ValueError("a replica cannot be both contained in and lacking from the proxy's pool")
        return self

    def text(self) -> str:
        parts = [f"lists {r} healthy" for r in self.contains] + [f"does not list {r}" for r in self.lacks]
        return (f"the host's own proxy (GET /backends/list on :{self.port}) {' and '.join(parts)}"
                + (f" within {format_duration(self.within)}" if self.within else ""))


class PullRequestSpec(_Strict):
    """`pull_request: {merged: true, checks: green, required: [validate]}` for the run's tag."""

    merged: bool = True
    checks: Literal["green", "ignore"] = "green"
    #: check runs that must be there (and green): a renamed or skipped CI job is not green
    required: list[str] = Field(default_factory=lambda: [])

    @model_validator(mode="after")
    def _sound(self) -> PullRequestSpec:
        if not self.merged and self.checks == "ignore":
            raise ValueError("a pull_request gate with merged: false and checks: ignore checks nothing")
        if self.required and self.checks == "ignore":
            raise ValueError("required: check runs need checks: green")
        return self

    def text(self) -> str:
        parts = ["the tag's commit comes from a PR merged to main"] if self.merged else ["the tag's commit has a PR"]
        if self.checks == "green":
            parts.append("every CI check run of the PR's head completed green (success, neutral or skipped)"
                         + (f", including {', '.join(self.required)}" if self.required else ""))
        return "GitHub: " + "; ".join(parts)


class HttpJsonSpec(_Strict):
    """`http_json: {url: ..., path: a.b.0.c, equals: v | contains: v, token_variable: X, within: 2m}`."""

    url: str
    path: str = Field(min_length=1)
    equals: str | int | float | bool | None = None
    contains: str | None = None
    #: the env-map variable holding a bearer token for the URL (none: no Authorization header)
    token_variable: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    within: Seconds = 0.0

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        check_placeholders(v, "http_json.url")
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"http_json.url {v!r} must be an http(s) URL")
        return v

    @model_validator(mode="after")
    def _sound(self) -> HttpJsonSpec:
        given = [k for k in ("equals", "contains") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"http_json needs exactly one of equals:, contains:, not {given or 'none'}")
        if "" in self.path.split("."):
            raise ValueError(f"http_json.path {self.path!r} has an empty segment")
        for v in (self.equals, self.contains):
            if isinstance(v, str):
                check_placeholders(v, "http_json expected value")
        return self

    def text(self) -> str:
        want = f"equals {self.equals!r}" if self.equals is not None else f"contains {self.contains!r}"
        return (f"GET {self.url} (read-only): the JSON at {self.path} {want}"
                + (f", polled up to {format_duration(self.within)}" if self.within else ""))


#: In `query.promql` a placeholder is a pair of braces holding a bare name (`{host}`): PromQL never
#: writes one (its braces hold label matchers, `{replica="r2"}`, or nothing), so every other pair of
#: braces is PromQL, sent as written.
_QUERY_PLACEHOLDER = re.compile(r"\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}")


def fill_query(promql: str, values: dict[str, str]) -> str:
    """`promql` with its placeholders (bare names in braces) replaced; label matchers untouched."""
    return _QUERY_PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), promql)


def query_number(v: float) -> str:
    """A bound or a value as a person reads it: integers whole (bytes, MiB, XID codes), with digit
    groups when large; others as %g."""
    if v == int(v) and abs(v) < 1e18:
        return f"{int(v):,}".replace(",", "_") if abs(v) >= 100_000 else str(int(v))
    return f"{v:g}"


class QuerySpec(_Strict):
    """A PromQL instant query (with `range:`, a range query over that much time before now) against
    the inventory's `prometheus_url`: every value of every series (every point) must lie within [min,
    max]. An empty answer is "no data", a failure: a series that is not there proves nothing."""

    promql: str = Field(min_length=1)
    min: float | None = None
    max: float | None = None
    #: a range query over this much time before now (None: an instant query)
    range: OptionalSeconds = None
    #: the resolution of a range query
    step: OptionalSeconds = None
    #: what the value is, in words, for plan text and the run's messages (e.g. "free bytes on the cache volume")
    what: str | None = None
    within: Seconds = 0.0

    @field_validator("min", "max", mode="before")
    @classmethod
    def _number(cls, v: object) -> object:
        if isinstance(v, bool) or (v is not None and not isinstance(v, int | float)):
            raise ValueError(f"a query bound is a number, not {v!r} (250 GiB: 268435456000)")
        return v

    @field_validator("promql")
    @classmethod
    def _promql(cls, v: str) -> str:
        for m in _QUERY_PLACEHOLDER.finditer(v):
            if m.group(1) not in PLACEHOLDERS:
                raise ValueError(f"query.promql: unknown placeholder {{{m.group(1)}}} (one of "
                                 f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)}; braces holding label matchers "
                                 f"are PromQL and are sent as written)")
        return v

    @model_validator(mode="after")
    def _sound(self) -> QuerySpec:
        if self.min is None and self.max is None:
            raise ValueError("a query gate needs min: or max: (a bound that bounds nothing is a typo)")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError("query: min is above max")
        if self.range is None and self.step is not None:
            raise ValueError("query.step belongs to a range query (set range:)")
        if self.range is not None:
            if self.range <= 0:
                raise ValueError("query.range must be longer than 0 s")
            if self.step is not None and not 0 < self.step <= self.range:
                raise ValueError("query.step must be longer than 0 s and at most the range")
        return self

    def range_step(self) -> float:
        """A range query's resolution: `step`, else a sixtieth of the range (at least 15 s)."""
        assert self.range is not None
        return self.step if self.step is not None else max(15.0, self.range / 60)

    def bound_text(self) -> str:
        what = self.what or "the value"
        if self.min is not None and self.max is not None:
            return f"{query_number(self.min)} <= {what} <= {query_number(self.max)}"
        if self.min is not None:
            return f"{what} >= {query_number(self.min)}"
        assert self.max is not None
        return f"{what} <= {query_number(self.max)}"

    def text(self) -> str:
        how = ("GET /api/v1/query (instant)" if self.range is None else
               f"GET /api/v1/query_range over the last {format_duration(self.range)} every {format_duration(self.range_step())}")
        every = "every series" if self.range is None else "every point of every series"
        return (f"the inventory's Prometheus query API, {how}: {self.promql}: {every} has {self.bound_text()}; "
                f"it fails on a value outside that, on no data (an empty answer) and on an unreadable answer"
                + (f", polled up to {format_duration(self.within)}" if self.within else ""))


class AttestationSpec(_Strict):
    """`attestation: {services: [svc]}`: what compose-manager attests for these services."""

    services: list[str] = Field(min_length=1)

    def text(self) -> str:
        return ("compose-manager's attestation report (GET /v1/attestation/report with a fresh 32-byte nonce): the nonce is "
                "echoed, actions_hash is the sha256 of its actions and opens report_data, and the last compose_up of "
                f"{', '.join(self.services)} names the run's tag, the runbook's file and that file's sha256 at the tag (GitHub)")


class ImageSpec(_Strict):
    """`image: {service: svc, digest: "sha256:8ff1a487b98a"}` or `image: {service: svc, replica: r2}` (the
    digest prefix is then `replica_values.<replica>.engine_image`): the running container's image is
    pinned by that digest (docker/ps's Image `repo@sha256:<hex>`), not a tag that may have moved."""

    service: str = Field(min_length=1)
    digest: str | None = Field(default=None, pattern=r"^(sha256:)?[0-9a-f]{12,64}$")
    replica: str | None = None

    @model_validator(mode="after")
    def _one(self) -> ImageSpec:
        if (self.digest is None) == (self.replica is None):
            raise ValueError("an image gate needs exactly one of digest: or replica: (its replica_values.engine_image)")
        return self

    def text(self, replica_values: dict[str, dict[str, str]]) -> str:
        want = self.digest or (f"{replica_values.get(self.replica or '', {}).get('engine_image', '?')} "
                               f"(replica_values.{self.replica}.engine_image)")
        return f"docker/ps: {self.service} runs an image pinned by digest sha256:{want.removeprefix('sha256:')}"


def check_against_runbook(here: str, spec: object, replicas: dict[str, list[str]],
                          values: dict[str, dict[str, str]]) -> None:
    """The loader's cross-checks of these gates against the runbook (one line, naming the field)."""
    if isinstance(spec, ProxyPoolSpec):
        check_replicas(here, "proxy_pool", [*spec.contains, *spec.lacks], replicas)
    if isinstance(spec, ImageSpec) and spec.replica is not None:
        engine_image = values.get(spec.replica, {}).get("engine_image")
        if not engine_image or not re.fullmatch(r"(sha256:)?[0-9a-f]{12,64}", engine_image):
            raise ValueError(f"{here}: image.replica {spec.replica!r} needs replica_values.{spec.replica}.engine_image "
                             f"(a digest prefix of 12 to 64 hex digits)")
    env = spec.verify.env if isinstance(spec, ManualSpec) else spec if isinstance(spec, EnvSpec) else None
    if env is not None and env.host == "others":
        raise ValueError(f"{here}: env.host is this or one host's name, not others")
