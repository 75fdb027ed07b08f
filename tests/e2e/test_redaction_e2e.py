"""Labels whose keys merely look like credentials (`AUTH_ENV=prod`, `AUTH_ENABLED=true`,
`TOKENIZERS_PARALLELISM=false`, `SSL_CERT_DIR`, `KEYCLOAK_REALM`, `PASSTHROUGH`) in gpu02's env
map: a whole rollout ends DONE and the whole-host rollback after it restores the previous files,
the journal's rollback targets exact (never `***/...`), and the host's real tokens reach neither
the journal, the run log, the console nor the final messages.

The journal keeps the run's data exact even where a value the redactor hides equals one of them: a
40-digit commit in the env map is shaped like a token (hidden from text), and the rollback targets'
commit stays exact all the same (redaction applies to text as it leaves, never to the data)."""

from __future__ import annotations

import asyncio
import io
import json

import pytest
from recording import RecordingProgress
from rich.console import Console

from orchestrator.cli.render import LiveProgress
from orchestrator.engine.progress import CompositeProgress
from orchestrator.language.runbook import DEFAULT_RUNBOOK

pytestmark = pytest.mark.e2e

R1 = "model-sg-glm53-w4afp8-tp4-r1"
R2_NEW = "model-sg-glm53-w4afp8-tp4-r2"
R2_OLD = "model-sg-glm53-fp8-tp4-r2"
OLD_FILE = "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-Canary.yaml"
LABELS = {"AUTH_ENV": "prod", "AUTH_ENABLED": "true", "TOKENIZERS_PARALLELISM": "false",
          "SSL_CERT_DIR": "/etc/ssl/certs", "KEYCLOAK_REALM": "nearai-internal", "PASSTHROUGH": "1"}


#: the simulator's tags.yaml: the commit of the previous deploy (v0.0.290), the rollback's target
PREVIOUS_COMMIT = "01a983b2c6f4d95e7a1b38f20c4d6e9a5b7c1f03"


def _run(e, run, rb, table, console=None):
    from orchestrator.service.runner import execute

    progress = CompositeProgress(RecordingProgress(), *([LiveProgress(console)] if console is not None else []))
    return asyncio.run(execute(e.session, run, rb, table, progress=progress, yes=True))


def _running(fleet):
    return {c.service: c for c in fleet.host.containers() if c.state in ("running", "restarting")}


def test_labels_named_like_credentials_leave_the_journal_exact_through_rollout_and_rollback(e2e_factory):
    from orchestrator.engine.executor import RunContext
    from orchestrator.service.admission import new_rollback, new_rollout

    e = e2e_factory()
    for key, value in LABELS.items():
        e.fleet.set_env_var(key, value)
    e.fleet.set_env_var("COMPOSE_FILES_REVISION", PREVIOUS_COMMIT)
    screen = io.StringIO()
    console = Console(file=screen, width=200, color_system=None)
    final = _run(e, *new_rollout(e.session, "gpu02", "v0.0.300", DEFAULT_RUNBOOK), console)
    assert final.outcome == "DONE", final.message
    assert e.session.redactor.scrub(PREVIOUS_COMMIT) == "***"  # a token by its shape: hidden from text

    done = e.session.journal.get_run(final.run_id)
    context = RunContext.from_json(done.context)
    previous = context.previous
    assert previous[R2_OLD]["file"] == OLD_FILE and previous[R1]["file"] == OLD_FILE, previous
    assert {ref["commit"] for ref in previous.values()} == {PREVIOUS_COMMIT}, previous
    assert context.before is not None and context.before.version["commit"] == PREVIOUS_COMMIT
    assert "***" not in json.dumps(previous)

    back = _run(e, *asyncio.run(new_rollback(e.session, "gpu02", "all", None, None, None)), console)
    assert back.outcome == "ROLLED_BACK", back.message
    run = _running(e.fleet)
    assert run[R2_OLD].file == OLD_FILE and run[R1].file == OLD_FILE
    assert R2_NEW not in run
    assert e.fleet.check_invariants() == []  # the env map passed whole, the labels included

    env, t = e.fleet.dashboard_env, e.fleet.tokens
    assert {k: env[k] for k in LABELS} == LABELS
    secrets = [v for k, v in env.items() if k.endswith(("_TOKEN", "_API_KEY"))]
    secrets += [t.compose_manager, t.dashboard, t.model_proxy, t.inference]
    blobs = [(e.state_dir / "journal.sqlite3").read_bytes(), screen.getvalue().encode()]
    blobs += [p.read_bytes() for p in (e.state_dir / "logs").rglob("*") if p.is_file()]
    blobs += [str(r.message).encode() for r in (final, back)]
    assert len(blobs) >= 5 and b"ROLLED_BACK" in blobs[1]
    for s in secrets:
        assert len(s) >= 16
        for blob in blobs:
            assert s.encode() not in blob
