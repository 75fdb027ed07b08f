"""Leases: a host's lease (one runner per host, fenced by a token that only grows) and the
`capacity: fleet` tier leases held for as long as their run holds its host's lease."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from orchestrator.journal.base import (
    JournalError,
    Lease,
    LeaseHeld,
    LeaseLost,
    TierHeld,
    _superseded_text,
)
from orchestrator.journal.sql_core import SqlCore, Tx, _require_text, _require_ttl


class SqlLeases(SqlCore):
    """Taking, renewing, releasing and reading host leases; claiming fleet tiers."""

    def acquire_lease(
        self, host: str, run_id: str, owner: str, ttl_s: float, *, allow_takeover: bool = True,
        takeover_if: Callable[[Lease], bool] | None = None,
    ) -> tuple[Lease, Lease | None]:
        """Take the host's lease for `run_id`; returns it and the lease it took over (or None).

        A live lease of another run/owner raises LeaseHeld, unless `takeover_if(holder)` says its
        holder is gone (a process of this machine that no longer exists: journal/owner.py). The
        predicate runs inside the write transaction, on the holder as locked, so the takeover is
        a compare-and-swap: a lease renewed or taken by someone else meanwhile is judged afresh.
        """
        _require_text(host, "host")
        _require_text(run_id, "run_id")
        _require_text(owner, "owner")
        ttl = _require_ttl(ttl_s)
        with self._tx(write=True) as tx:
            now = self._now(tx)
            run = tx.one("SELECT host FROM runs WHERE run_id = ?", run_id)
            if run is not None and run["host"] != host:
                raise JournalError(f"run {run_id} belongs to host {run['host']}, not {host}")
            expires = now + ttl
            # The first acquisition creates the host's row; the row is never deleted, so the
            # token only ever grows. A concurrent first insert waits for ours and does nothing.
            inserted = tx.run(
                "INSERT INTO leases (host, token, run_id, owner, acquired_at, expires_at, "
                "released_at) VALUES (?, 1, ?, ?, ?, ?, NULL) ON CONFLICT (host) DO NOTHING",
                host, run_id, owner, self._ts_param(now), self._ts_param(expires),
            )
            if inserted == 1:
                return Lease(host, run_id, owner, 1, expires), None
            row = self._lease_row(tx, host, self.lock_update)
            assert row is not None
            current = self._lease(row)
            released = row["released_at"] is not None
            live = not released and current.expires_at > now
            mine = current.run_id == run_id and current.owner == owner
            previous: Lease | None = None
            if live and not mine:
                if takeover_if is None or not takeover_if(current):
                    raise LeaseHeld(current)
                live = False
            if not live and not released:
                if not mine and not allow_takeover:
                    raise LeaseHeld(current, expired=True)
                previous = current
            token = current.token + 1
            tx.run(
                "UPDATE leases SET token = ?, run_id = ?, owner = ?, acquired_at = ?, "
                "expires_at = ?, released_at = NULL WHERE host = ?",
                token, run_id, owner, self._ts_param(now), self._ts_param(expires), host,
            )
        return Lease(host, run_id, owner, token, expires), previous

    def _own_lease_row(self, tx: Tx, lease: Lease) -> dict[str, Any]:
        row = self._lease_row(tx, lease.host, self.lock_update)
        holder = self._lease(row) if row else None
        if row is None or holder is None or holder.token != lease.token:
            raise LeaseLost(_superseded_text(lease, holder, False), lease, holder)
        return row

    def heartbeat(self, lease: Lease, ttl_s: float) -> Lease:
        ttl = _require_ttl(ttl_s)
        with self._tx(write=True) as tx:
            now = self._now(tx)
            row = self._own_lease_row(tx, lease)
            if row["released_at"] is not None:
                raise LeaseLost(_superseded_text(lease, self._lease(row), True), lease, None)
            expires = now + ttl
            tx.run(
                "UPDATE leases SET expires_at = ? WHERE host = ? AND token = ?",
                self._ts_param(expires), lease.host, lease.token,
            )
        return replace(lease, expires_at=expires)

    def release(self, lease: Lease) -> None:
        with self._tx(write=True) as tx:
            now = self._now(tx)
            row = self._own_lease_row(tx, lease)
            if row["released_at"] is None:
                tx.run(
                    "UPDATE leases SET released_at = ? WHERE host = ? AND token = ?",
                    self._ts_param(now), lease.host, lease.token,
                )

    def claim_tier(self, tier: str, host: str, run_id: str, *,
                   takeover_if: Callable[[Lease], bool] | None = None) -> str | None:
        """Take the `capacity: fleet` tier `tier` for `run_id` on `host` (call it inside the
        transaction that takes `host`'s lease). The tier is held by the run that last took it
        for as long as that run holds its own host's lease: unreleased and unexpired, and not
        judged gone by `takeover_if` (journal/owner.py). Raises TierHeld while another host's run
        holds it; returns the run id of a holder it replaced whose lease had lapsed, else None."""
        _require_text(tier, "tier")
        _require_text(host, "host")
        _require_text(run_id, "run_id")
        with self._tx(write=True) as tx:
            now = self._now(tx)
            row = tx.one(f"SELECT tier, host, run_id FROM tier_leases WHERE tier = ?{self.lock_update}", tier)
            previous: str | None = None
            if row is not None and row["run_id"] != run_id:
                held = self._lease_row(tx, row["host"], "")
                if (held is not None and row["host"] != host and held["run_id"] == row["run_id"]
                        and held["released_at"] is None):
                    lease = self._lease(held)
                    if lease.expires_at > now and not (takeover_if is not None and takeover_if(lease)):
                        raise TierHeld(tier, row["host"], row["run_id"], lease.owner)
                previous = row["run_id"]
            if row is None:
                tx.run("INSERT INTO tier_leases (tier, host, run_id, acquired_at) VALUES (?, ?, ?, ?)",
                       tier, host, run_id, self._ts_param(now))
            else:
                tx.run("UPDATE tier_leases SET host = ?, run_id = ?, acquired_at = ? WHERE tier = ?",
                       host, run_id, self._ts_param(now), tier)
        return previous

    def current_lease(self, host: str) -> Lease | None:
        with self._tx(write=False) as tx:
            now = self._now(tx)
            row = self._lease_row(tx, host, "")
        if row is None or row["released_at"] is not None:
            return None
        lease = self._lease(row)
        return lease if lease.expires_at > now else None

    def held_lease(self, host: str) -> Lease | None:
        """The host's unreleased lease, expired or not (None: released or never taken): what
        `status` needs to tell a running run from one whose runner stopped."""
        with self._tx(write=False) as tx:
            row = self._lease_row(tx, host, "")
        if row is None or row["released_at"] is not None:
            return None
        return self._lease(row)
