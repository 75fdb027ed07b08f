"""What the runbook states about the new compose file, checked against the file as compose would
run it (interpolated with its defaults, or with the host's env map). Every fact comes from the
runbook, so a runbook that gains a replica, a relay port or a label gains its check:

- `replica_values`: each replica's engines carry them as `nearai.otel.<key>` labels, as `key:value`
  tags of their `com.datadoghq.ad.logs` label and as the collector's static scrape labels (where
  the file declares the key; a key a labels gate reads must be there); `engine_image` prefixes the
  engines' image digest;
- `weights`: each engine's `--model-path`, what the downloader the engines depend on fetches, and
  every `model_path` label, tag or scrape label name one of them;
- `replica_gpus`: each engine reserves exactly its replica's GPUs, none shared between replicas;
- every relay port a gate reads is published and routed to the gate's replica; engines whose
  metrics a gate reads run with `--enable-metrics`; `verify` with peers: a service registers the
  long domain;
- a one-shot or temporary service the runbook starts by name has a profile (else any up starts it);
- `expects:` (orchestrator.language.runbook_model.Expectation), entry by entry.

Each difference is a `Finding`: one line naming the file, service, key, value found, value expected
and the runbook line that relies on it. A value from the env map (it holds secrets) is never shown.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import yaml
from pydantic import BaseModel

from orchestrator.hosts.compose_file import ComposeFile, ComposeFileError, interpolate
from orchestrator.language.runbook_model import REPLICA_PREFIX, Expectation, Runbook
from orchestrator.language.steps import Step
from orchestrator.previews import compose_reading as reading
from orchestrator.previews.runbook_lines import RunbookLines

FROM_ENV = "(a value from the env map, not shown)"
LOG_LABEL = "com.datadoghq.ad.logs"
OTEL_PREFIX = "nearai.otel."


@dataclass(frozen=True)
class Finding:
    service: str
    key: str
    found: str
    expected: str
    relies: str
    why: str = ""

    def line(self, file: str) -> str:
        why = f"{self.why}; " if self.why else ""
        return (f"{file}: {self.service}: {self.key}: found {self.found}, expected {self.expected} "
                f"({why}relied on by {self.relies})")


class FactCheck:
    def __init__(self, rb: Runbook, cf: ComposeFile, env: Mapping[str, str], lines: RunbookLines) -> None:
        self.rb, self.cf, self.env, self.lines = rb, cf, env, lines
        self.findings: list[Finding] = []
        self.checks: list[str] = []

    # -- helpers -----------------------------------------------------------------------------

    def engines(self, replica: str) -> list[str]:
        return [e for e in self.rb.replicas.get(replica, []) if e in self.cf.services]

    def add(self, service: str, key: str, found: Any, expected: Any, relies: str, why: str = "") -> None:
        shown = _show(found)
        if any(len(v) >= 6 and v in shown for v in self.env.values()):
            shown = FROM_ENV  # the env map holds secrets: a value that carries one of its values is not shown
        self.findings.append(Finding(service, key, shown, _show(expected), relies, why))

    def shown(self, with_env: Any, without_env: Any) -> Any:
        """The value to print: never one the env map supplied."""
        return with_env if with_env == without_env else FROM_ENV

    def forward_steps(self) -> Iterator[tuple[str, str | None, Step]]:
        for st in self.rb.preflight:
            yield "preflight", None, st
        for ph in self.rb.phases:
            for st in ph.steps:
                yield ph.name, ph.replica, st

    def labels_steps(self, replica: str, key: str, kind: str) -> list[str]:
        return [self.lines.step(section, st.id, "labels") for section, _, st in self.forward_steps()
                if st.labels is not None and st.labels.replica == replica and key in getattr(st.labels, kind)]

    # -- the facts ---------------------------------------------------------------------------

    def run(self) -> None:
        # each fact returns what it checked, said only when it found nothing
        for fact in (self.replica_values, self.weights, self.gpus, self.relays, self.routing, self.profiles):
            before = len(self.findings)
            passed = fact()
            if passed and len(self.findings) == before:
                self.checks.append(passed)
        for i, ex in enumerate(self.rb.expects):
            self.expectation(i, ex)

    def replica_values(self) -> str | None:
        scrape = self.scrape_labels
        for replica, values in self.rb.replica_values.items():
            for engine in self.engines(replica):
                labels = reading.labels(self.cf, engine, self.env)
                tags = _log_tags(labels.get(LOG_LABEL, ""))
                for key, want in values.items():
                    otel = self.labels_steps(replica, key, "otel_labels")
                    got = labels.get(OTEL_PREFIX + key)
                    if (got is None and otel) or (got is not None and got != want):  # absent: only where a gate reads it
                        self.add(engine, f"label {OTEL_PREFIX}{key}", "(absent)" if got is None else got, want,
                                 (otel or [self.lines.at("replica_values", replica, key)])[0])
                    logs = self.labels_steps(replica, key, "log_tags")
                    where = (logs or [self.lines.at("replica_values", replica, key)])[0]
                    if key not in tags and logs:
                        self.add(engine, f"log tag {key}", "(absent)", want, where)
                    for got in tags.get(key, []):
                        if got != want:
                            self.add(engine, f"log tag {key}", got, want, where)
                    for job, job_labels in scrape.get(engine, []):
                        if key in job_labels and job_labels[key] != want:
                            self.add(engine, f"scrape label {key} (collector job {job})", job_labels[key], want,
                                     self.lines.at("replica_values", replica, key))
                want_image = values.get("engine_image")
                image = self.cf.services[engine].image or ""
                digest = image.partition("@sha256:")[2]
                if want_image and not digest.startswith(want_image):
                    self.add(engine, "image", image or "(none)", f"a digest starting {want_image} (engine_image)",
                             self.lines.at("replica_values", replica, "engine_image"))
        return "each replica's engines carry its replica_values (labels, log tags, scrape labels, image)" \
            if self.rb.replica_values else None

    @cached_property
    def scrape_labels(self) -> dict[str, list[tuple[str, dict[str, str]]]]:
        """service -> (job name, static labels) of every scrape job in the file's inline configs
        whose target is that service."""
        out: dict[str, list[tuple[str, dict[str, str]]]] = {}
        for name, content in self.cf.configs.items():
            if content is None or "scrape_configs" not in content:
                continue
            try:
                doc = yaml.safe_load(interpolate(content, self.env))
            except yaml.YAMLError:
                continue
            for job in _scrape_jobs(doc):
                for static in job.get("static_configs") or []:
                    if not isinstance(static, dict):
                        continue
                    labels = {str(k): str(v) for k, v in (static.get("labels") or {}).items()}
                    for target in static.get("targets") or []:
                        service = str(target).rsplit(":", 1)[0]
                        out.setdefault(service, []).append((str(job.get("job_name", name)), labels))
        return out

    def weights(self) -> str | None:
        if not self.rb.weights:
            return None
        where = self.lines.at("weights")
        want = " or ".join(self.rb.weights)
        engines = [e for r in self.rb.replicas for e in self.engines(r)]
        for engine in engines:
            argv = reading.argv(self.cf, engine, self.env)
            path = _flag(argv or [], "--model-path")
            if isinstance(path, str) and not any(_names_repo(path, w) for w in self.rb.weights):
                self.add(engine, "--model-path", path, f"a snapshot of {want}", where)
            elif path is None and argv is not None:
                self.add(engine, "--model-path", "(absent)", f"a snapshot of {want}", where)
        for dep in sorted(self.cf.dependencies_of(engines)) if engines else []:
            text = " ".join(reading.argv(self.cf, dep, self.env) or [])
            if "download" not in text:
                continue
            for w in self.rb.weights:
                if not _downloads(text, w):
                    self.add(dep, "command", "no download of it", f"a download of {w} (the engines depend on {dep})", where)
        scrape = self.scrape_labels
        for service in self.cf.services:
            labels = reading.labels(self.cf, service, self.env)
            found = [(f"label {OTEL_PREFIX}model_path", labels.get(OTEL_PREFIX + "model_path"))]
            found += [("log tag model_path", v) for v in _log_tags(labels.get(LOG_LABEL, "")).get("model_path", [])]
            found += [(f"scrape label model_path (collector job {job})", lab.get("model_path")) for job, lab in scrape.get(service, [])]
            for key, value in found:
                if value is not None and value not in self.rb.weights:
                    self.add(service, key, value, want, where)
        return f"weights: --model-path, the downloader and every model_path label name {want}"

    def gpus(self) -> str | None:
        if not self.rb.replica_gpus:
            return None
        held: dict[int, list[tuple[str, str]]] = {}
        for replica, gpus in self.rb.replica_gpus.items():
            for engine in self.engines(replica):
                ids = reading.device_ids(self.cf, engine)
                got = sorted(int(i) for i in ids if str(i).isdigit()) if ids is not None else None
                if got != sorted(gpus):
                    self.add(engine, "device_ids", "(none)" if ids is None else ",".join(ids),
                             ",".join(str(g) for g in gpus), self.lines.at("replica_gpus", replica))
                for g in got or []:
                    held.setdefault(g, []).append((replica, engine))
        for gpu, holders in sorted(held.items()):
            if len({r for r, _ in holders}) > 1:
                (_, first), *rest = holders
                for replica, engine in rest:
                    self.add(engine, "device_ids", f"GPU {gpu}, also reserved by {first}",
                             "no GPU shared between replicas", self.lines.at("replica_gpus", replica))
        return "each replica's engines reserve exactly its replica_gpus, none shared"

    def relays(self) -> str | None:
        ports: set[int] = set()
        metric_replicas: dict[str, str] = {}  # replica -> the runbook line of the first gate reading its metrics
        for section, phase_replica, st in self.forward_steps():
            for field in type(st).model_fields:
                spec = getattr(st, field)
                if field in ("remedy", "down", "dry_run", "up", "plan") or not isinstance(spec, BaseModel):
                    continue
                for port, replica in _relay_ports(spec, phase_replica, set(self.rb.replicas)):
                    ports.add(port)
                    relies = self.lines.step(section, st.id, field)
                    if field == "proxy_pool":  # the host's own proxy (its /backends/list): no replica's route
                        replica = None
                    elif replica and field != "relay":
                        # a `relay:` gate reads /health, /v1/models and a generation; every other gate
                        # that names a relay (metrics, labels, watch, quiet, soak, analysis) reads /metrics
                        metric_replicas.setdefault(replica, relies)
                    publishers = [s for s in self.cf.services if port in reading.published_ports(self.cf, s, self.env)]
                    if not publishers:
                        self.add("(any service)", f"ports :{port}", "not published", f"a service publishing :{port}", relies)
                    engines = self.engines(replica) if replica else []
                    for service in publishers if engines else []:
                        backend = _route_of(reading.config_text(self.cf, service, self.env), port)
                        if backend is not None and backend not in engines:
                            self.add(service, f"route of :{port}", backend, f"{' or '.join(engines)} (replica {replica})", relies)
        for replica, relies in metric_replicas.items():
            for engine in self.engines(replica):
                argv = reading.argv(self.cf, engine, self.env)
                if argv is not None and _flag(argv, "--enable-metrics") is None:
                    self.add(engine, "--enable-metrics", "(absent)", "present (a gate reads this engine's metrics)", relies)
        return (f"relay ports {', '.join(f':{p}' for p in sorted(ports))} published and routed to their replicas; "
                f"engines whose metrics a gate reads run with --enable-metrics") if ports else None

    def routing(self) -> str | None:
        for section, _, st in self.forward_steps():
            if st.verify is None or not st.verify.peers:
                continue
            domain = self.rb.domains.long
            if not any(domain in reading.config_text(self.cf, s, self.env) or domain in " ".join(reading.argv(self.cf, s, self.env) or [])
                       for s in self.cf.services):
                self.add("(any service)", "long-domain registration", "no service names " + domain,
                         f"a registrar registering {domain}", self.lines.step(section, st.id, "verify"))
            return f"a service of the file registers the long domain {domain} (verify)"
        return None

    def profiles(self) -> None:  # its findings only
        oneshots = {st.oneshot.service for _, _, st in self.forward_steps() if st.oneshot is not None}
        for ph in self.rb.phases:
            started: dict[str, Step] = {}
            for st in ph.steps:
                if st.up is not None and st.up.file == "new" and isinstance(st.up.services, list):
                    for s in st.up.services:
                        started.setdefault(s, st)
                if st.down is not None and st.down.file == "new" and isinstance(st.down.services, list):
                    for s in st.down.services:
                        if s in started or s in oneshots:
                            self._needs_profile(s, ph.name, started.get(s, st))
            for s in oneshots & set(started):
                self._needs_profile(s, ph.name, started[s])

    def _needs_profile(self, service: str, section: str, st: Step) -> None:
        if service not in self.cf.services or self.cf.services[service].profiles:
            return
        dependants = [s for s in self.cf.services if service in self.cf.services[s].depends_on]
        if dependants:
            return  # started with the services that depend on it: a profile would not hold it back
        key = (service, "profiles")
        if any((f.service, f.key) == key for f in self.findings):
            return
        self.add(service, "profiles", "(none)", "a profile (the runbook starts it by name; without one any up of the file starts it)",
                 self.lines.step(section, st.id, "up" if st.up is not None else None))

    def expectation(self, i: int, ex: Expectation) -> None:
        relies = self.lines.at("expects", i)
        if ex.relied_on_by is not None:
            cited = [self.lines.step(sec, st.id) for sec, _, st in self.forward_steps() if st.id == ex.relied_on_by]
            if not cited:
                self.add("(runbook)", f"expects[{i + 1}].relied_on_by", ex.relied_on_by, "the id of a forward step", relies)
            relies = cited[0] if cited else relies
        services: list[str] = []
        for name in ex.services:
            if name.startswith(REPLICA_PREFIX):
                services += self.engines(name[len(REPLICA_PREFIX):])
            elif name in self.cf.services:
                services.append(name)
            else:
                self.add(name, "service", "(not defined)", "defined", relies, ex.why)
        before = len(self.findings)
        seen: dict[str, dict[str, str]] = {f: {} for f in ex.distinct}
        for service in services:
            argv = reading.argv(self.cf, service, self.env) or []
            bare = reading.argv(self.cf, service, {}) or []
            for flag, want in ex.argv.items():
                got = _flag(argv, flag)
                shown = self.shown(got, _flag(bare, flag))
                if want is True and got is None:
                    self.add(service, flag, "(absent)", "present", relies, ex.why)
                elif want is False and got is not None:
                    self.add(service, flag, shown if got is not True else "present", "absent", relies, ex.why)
                elif isinstance(want, str) and got != want:
                    self.add(service, flag, "(absent)" if got is None else ("(no value)" if got is True else shown), want, relies, ex.why)
            for flag in ex.distinct:
                got = _flag(argv, flag)
                if isinstance(got, str):
                    other = next((s for s, v in seen[flag].items() if v == got), None)
                    if other is not None:
                        self.add(service, flag, f"{self.shown(got, _flag(bare, flag))}, as {other}", "a value of its own", relies, ex.why)
                    seen[flag][service] = got
            for name, wanted in ex.environment.items():
                env_got = reading.env_value(self.cf, service, name, self.env)
                shown = self.shown(env_got, reading.env_value(self.cf, service, name, {}))
                if wanted is None and env_got:
                    self.add(service, f"environment {name}", shown, "unset", relies, ex.why)
                elif wanted is not None and env_got != wanted:
                    self.add(service, f"environment {name}", "(unset)" if env_got is None else shown, wanted, relies, ex.why)
            for pattern in ex.environment_absent:
                for name in self.cf.services[service].environment:
                    if fnmatch.fnmatchcase(name, pattern) and (set_to := reading.env_value(self.cf, service, name, self.env)):
                        self.add(service, f"environment {name}", self.shown(set_to, reading.env_value(self.cf, service, name, {})),
                                 f"unset (nothing matching {pattern})", relies, ex.why)
            if ex.configs_contain:
                text = reading.config_text(self.cf, service, self.env)
                for want in ex.configs_contain:
                    if want not in text:
                        self.add(service, "configs content", "without it", f"to contain {want!r}", relies, ex.why)
            if ex.image is not None and self.cf.services[service].image != ex.image:
                self.add(service, "image", self.cf.services[service].image or "(none)", ex.image, relies, ex.why)
        if services and len(self.findings) == before:
            self.checks.append(f"expects[{i + 1}] holds for {', '.join(services)} ({ex.why})")


def check_facts(rb: Runbook, cf: ComposeFile, env: Mapping[str, str], lines: RunbookLines) -> tuple[list[str], list[Finding]]:
    fc = FactCheck(rb, cf, env, lines)
    try:
        fc.run()
    except ComposeFileError as exc:
        fc.findings.append(Finding("(file)", "parse", str(exc), "a file compose can read", lines.at("file")))
    return fc.checks, fc.findings


# --- reading the file ---------------------------------------------------------------------------


def _show(value: Any) -> str:
    return "(none)" if value is None else str(value)


def _flag(argv: list[str], flag: str) -> str | bool | None:
    """The value after `flag` (or of `flag=value`); True when the flag stands alone; None when absent."""
    for i, arg in enumerate(argv):
        if arg == flag:
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            return nxt if nxt is not None and not nxt.startswith("--") else True
        if arg.startswith(flag + "="):
            return arg[len(flag) + 1:]
    return None


def _downloads(command: str, repo: str) -> bool:
    """`command` fetches `repo` (`hf download REPO`, `huggingface-cli download REPO`,
    `snapshot_download(repo_id="REPO")`), not merely names it."""
    name = re.escape(repo)
    return re.search(rf"download\s+['\"]?{name}(?![\w./-])|repo_id\s*=\s*['\"]{name}['\"]", command) is not None


def _names_repo(path: str, repo: str) -> bool:
    org, _, name = repo.partition("/")
    return path == repo or f"models--{org}--{name}/" in path + "/" or path.rstrip("/").endswith("/" + repo)


def _log_tags(raw: str) -> dict[str, list[str]]:
    try:
        entries = json.loads(raw) if raw else []
    except ValueError:
        return {}
    out: dict[str, list[str]] = {}
    for entry in entries if isinstance(entries, list) else []:
        for tag in entry.get("tags", []) if isinstance(entry, dict) else []:
            key, sep, value = str(tag).partition(":")
            if sep:
                out.setdefault(key, []).append(value)
    return out


def _scrape_jobs(doc: Any) -> Iterator[dict[str, Any]]:
    for key, value in doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ():
        if key == "scrape_configs" and isinstance(value, list):
            yield from (j for j in value if isinstance(j, dict))
        else:
            yield from _scrape_jobs(value)


_LISTEN = re.compile(r"\blisten\s+(\d+)\b")
_BACKEND = re.compile(r"http://([A-Za-z0-9_.-]+)")


def _route_of(config: str, port: int) -> str | None:
    """The upstream host the server block listening on `port` sends to (nginx), if any."""
    matches = list(_LISTEN.finditer(config))
    for n, m in enumerate(matches):
        if int(m.group(1)) != port:
            continue
        end = matches[n + 1].start() if n + 1 < len(matches) else len(config)
        backend = _BACKEND.search(config, m.end(), end)
        return backend.group(1) if backend else None
    return None


def _relay_ports(spec: BaseModel, replica: str | None, replicas: set[str]) -> Iterator[tuple[int, str | None]]:
    """(port, replica) of every relay a gate's spec names: a relay's `port` reads the replica of
    the nearest spec that names one (else the phase's), its `ports` map names each replica."""
    own = getattr(spec, "replica", None)
    if isinstance(own, str) and own in replicas:
        replica = own
    if hasattr(spec, "token_variable"):
        port = getattr(spec, "port", None)
        if isinstance(port, int):
            yield port, replica
        for rep, p in (getattr(spec, "ports", None) or {}).items():
            yield int(p), str(rep)
        return
    if type(spec).__name__.lower().startswith("dcgm") and isinstance(getattr(spec, "port", None), int):
        yield spec.port, None  # type: ignore[attr-defined]  # the DCGM spec, checked by name and attribute just above
        return
    for name in type(spec).model_fields:
        value = getattr(spec, name)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, BaseModel):
                yield from _relay_ports(item, replica, replicas)
