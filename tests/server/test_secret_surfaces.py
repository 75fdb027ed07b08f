"""The secret scan over every surface: a rollout submitted to `orchestrate serve` on the simulated
gpu02 whose engine dies of an OOM with a traceback quoting two of the host's secrets (and whose
compose-manager stream echoes them) in every form an echo may take (base64, base64url, a Basic header, percent-encoded in upper and lower case, cut
across two log lines). The run rolls back; then the console of the client that followed it, the
server's log, the run log, the journal (the SQLite file), the page's HTML, the API's JSON and what
a webhook receiver on loopback was sent are each searched for every form of every secret.

The scan is not vacuous: the quoted line reaches every surface that shows the failure (its text
is searched for), masked.

Mutation notes (each seen failing, the source restored): redaction.py `_any_case` matching
upper-case escapes only; `Redactor._spans` skipping the base64 search.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote

import httpx
import pytest
from pydantic import SecretStr

from helpers_server import AUTH, TOKEN, sim_session_factory, sim_settings, wait_for
from orchestrator.teamserver.app import create_app
from orchestrator.teamserver.remote import remote

pytestmark = pytest.mark.e2e

#: a credential (its key ends in API_KEY) with characters a URL encodes
RESERVED = "Zq8/Kp2+Wm5=Rt7/Lx4+Nv1=Hb6"
MARK = "CUDA out of memory"


def forms(secret: str) -> dict[str, str]:
    pct = quote(secret, safe="")
    return {
        "base64": base64.b64encode(secret.encode()).decode(),
        "base64url": base64.urlsafe_b64encode(secret.encode()).decode(),
        "basic": "Basic " + base64.b64encode(f"orchestrator:{secret}".encode()).decode(),
        "pct-upper": pct,
        "pct-lower": re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), pct),
    }


def leaked_pieces(secret: str) -> list[str]:
    """What no surface may show: the secret, each encoded form, each half of the cut."""
    half = len(secret) // 2
    return [secret, secret[:half], secret[half:],
            *(f.removeprefix("Basic ") for f in forms(secret).values())]


class Hook:
    """A webhook receiver on loopback: records each JSON body."""

    def __init__(self) -> None:
        self.bodies: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                outer.bodies.append(self.rfile.read(int(self.headers.get("content-length", "0"))).decode())
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_every_form_of_a_secret_is_masked_on_every_surface(sim_fleet, tmp_path, monkeypatch, live_server, capsys):
    from orchestrator_sim.host import sglang_log

    fleet = sim_fleet("oom")
    fleet.set_env_var("WEB_CONTEXT_SEARCH_API_KEY", RESERVED)
    hf = fleet.dashboard_env["HUGGING_FACE_HUB_TOKEN"]
    secrets = [RESERVED, hf]
    original = sglang_log.oom_lines

    def oom_quoting_secrets(ts, rank=2):
        lines = original(ts, rank)
        error = next(i for i, line in enumerate(lines) if MARK in line)
        echoes = " ".join(f"[{form}]" for s in secrets for form in forms(s).values())
        half = len(RESERVED) // 2
        # the error line quotes every encoded form and ends with the head of a secret whose tail
        # starts the next line
        lines[error] += f" request headers: {echoes} key={RESERVED[:half]}"
        lines.insert(error + 1, f"{RESERVED[half:]} (continued)")
        return lines

    monkeypatch.setattr(sglang_log, "oom_lines", oom_quoting_secrets)

    from orchestrator_sim.compose_manager.scripts import ComposeScripts

    emit = ComposeScripts._emit

    def emit_echoing_secrets(self, op, line, event="stderr"):
        # compose-manager's stream (a pull's output, say) echoes them too: every encoded form in
        # one event, and a secret cut between two consecutive events
        if " Pulling" in line:
            half = len(RESERVED) // 2
            emit(self, op, "pull auth: " + " ".join(f"[{f}]" for s in secrets for f in forms(s).values())
                 + f" key={RESERVED[:half]}", event)
            emit(self, op, f"{RESERVED[half:]} accepted", event)
        emit(self, op, line, event)

    monkeypatch.setattr(ComposeScripts, "_emit", emit_echoing_secrets)

    hook = Hook()
    try:
        settings = sim_settings(fleet, tmp_path / "state").model_copy(
            update={"notify_url": SecretStr(hook.url), "notify_format": "json",
                    "public_url": "https://orchestrate.internal:8443"})
        app = create_app(settings, token=TOKEN, session_factory=sim_session_factory)
        url = live_server(app)

        # the page and the API, read while the run runs (the followed log's tail is shown only then)
        seen: list[str] = []
        done = threading.Event()

        def watch() -> None:
            with httpx.Client(base_url=url, headers=AUTH, timeout=30) as c:
                while not done.is_set():
                    for r in c.get("/runs").json().get("runs", []):
                        seen.append(c.get(f"/runs/{r['run_id']}").text)
                        seen.append(c.get(f"/ui/fragments/runs/{r['run_id']}").text)
                    seen.append(c.get("/ui/fragments/runs").text)
                    done.wait(0.05)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            rc = remote(url, TOKEN, "rollout", {"host": "gpu02", "tag": "v0.0.300", "runbook": None, "yes": True,
                                                 "soak": "0"}, as_json=False, interval=0.2)
        finally:
            done.set()
            watcher.join(timeout=60)
        console = capsys.readouterr()
        with httpx.Client(base_url=url, headers=AUTH) as c:
            run_id = c.get("/runs").json()["runs"][0]["run_id"]
            api = c.get(f"/runs/{run_id}").text
            page = c.get(f"/ui/fragments/runs/{run_id}").text
        detail = json.loads(api)
        assert detail["outcome"] == "ROLLED_BACK", detail["message"]
        assert rc != 0
        wait_for(lambda: any('"run_finished"' in b for b in hook.bodies), "the webhook's run_finished message")
    finally:
        hook.close()

    surfaces = {
        "console": console.out,
        "server log": console.err,
        "run log": "\n".join(p.read_text(errors="replace") for p in (settings.state_dir / "logs").rglob("*")
                              if p.is_file()),
        "journal": "\n".join(p.read_bytes().decode("utf-8", "replace") for p in settings.state_dir.glob("journal.sqlite3*")),
        "page": "\n".join([page, *(s for s in seen if s.lstrip().startswith("<"))]),
        "api": "\n".join([api, *(s for s in seen if s.lstrip().startswith("{"))]),
        "webhook": "\n".join(hook.bodies),
    }
    assert "pull auth: [***]" in surfaces["journal"] and "*** accepted" in surfaces["journal"]  # the up's lines
    for name in ("console", "journal", "page", "api", "webhook"):  # each shows the failure, masked
        assert MARK in surfaces[name], name
        text = surfaces[name].replace("\\", "")
        assert "request headers: [***]" in text and "key=***" in text, name
    for secret in secrets:
        for piece in leaked_pieces(secret):
            for name, text in surfaces.items():
                assert piece not in text, (name, piece)
