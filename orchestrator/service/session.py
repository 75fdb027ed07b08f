"""The session every service command opens once (settings, inventory, journal, redactor, transport,
clock), the runner's identity, and the clients made before a run exists."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from orchestrator.hosts.clients.compose_manager import ComposeManagerClient
from orchestrator.hosts.clients.retry import RetryPolicy
from orchestrator.hosts.inventory import HostEntry, Inventory, load_inventory
from orchestrator.hosts.redaction import Redactor
from orchestrator.journal.owner import owner_text
from orchestrator.service.notify import Notifier
from orchestrator.service.startup import ReadSession, open_journal_for
from orchestrator.util.clock import Clock, RealClock, ScaledClock, clock_for
from orchestrator.util.settings import Settings

#: The run-context key of the runbook a run started with (name, path, sha256); the server uses it too.
RUNBOOK_IDENTITY = "runbook_identity"
#: The run-context key of the runbook text the run executes (read once when the run was created).
RUNBOOK_TEXT = "runbook_text"
#: The runner's identity, `HOSTNAME:PID:BOOT_ID:START` (journal/owner.py): a lease of a dead process
#: is taken over at once.
owner_id = owner_text


@dataclass
class Session(ReadSession):
    """Everything a command needs, opened once: the journal and settings, and the fleet's inventory."""

    inventory: Inventory
    redactor: Redactor
    transport: httpx.AsyncBaseTransport | None = None
    clock: Clock = field(default_factory=RealClock)
    retry: RetryPolicy | None = None
    #: A long-lived notifier (orchestrate serve's); None: `execute` makes one per run when needed.
    notifier: Notifier | None = None
    #: run id -> requests.Admitted, not executed yet (`execute` runs under the lease admission took)
    admitted: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def open(cls, settings: Settings, *, transport=None, clock: Clock | None = None, retry=None) -> Session:
        inventory = load_inventory(settings.inventory_path())
        redactor = Redactor(*settings.tokens())
        journal = open_journal_for(settings)
        if clock is None:
            clock = clock_for(inventory.urls())
        if retry is None and isinstance(clock, ScaledClock):
            # against the simulator, a retry's deadline on the scaled clock must still leave real
            # time for a loopback round trip (60 clock-s at 3000x would be 20 ms)
            retry = RetryPolicy(deadline_s=max(60.0, 2.0 * clock.speed), busy_wait_s=5)
        return cls(settings, journal, inventory, redactor, transport, clock, retry)


def _compose_client(session: Session, entry: HostEntry) -> ComposeManagerClient:
    """A compose-manager client for commands that read the host before a run exists."""
    return ComposeManagerClient(str(entry.compose_manager_url).rstrip("/"), session.settings.compose_manager_token,
                                transport=session.transport, retry=session.retry, redactor=session.redactor,
                                clock=session.clock)


def notifier_for(session: Session) -> Notifier:
    """The webhook notifier of ORCHESTRATOR_NOTIFY_URL, its messages scrubbed by the session's redactor."""
    s = session.settings
    return Notifier(s.notify_url.get_secret_value(), s.notify_format, scrub=session.redactor.scrub)
