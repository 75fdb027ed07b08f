"""Waiting out a sent call (a part of `Runtime`, runtime.py).

`settle_up`: an up whose outcome is unknown (a lost stream, a crash after sending) is settled by
observation, never sent again: compose-manager's `GET /status`, its action log and success record,
docker/ps, a one-shot's output, a fresh dry run that plans nothing. `wait_gone`: a down is followed
until docker/ps no longer lists the services, sent again (at most MAX_DOWN_RESENDS times, each
after asking the stop guard again) on a zombie or a down with no observable effect.
"""

from __future__ import annotations

from typing import Any

from orchestrator.hosts.clients.compose_manager import ComposeRequest
from orchestrator.hosts.clients.errors import ClientError
from orchestrator.hosts.parsers.docker_ps import by_service
from orchestrator.engine.steps.outcome import StepOutcome, fail, halt

#: How long an unknown `up` outcome is observed before deciding it did not take effect, when
#: compose-manager cannot say itself (no `GET /status`): an image pull can take that long.
SETTLE_S = 600.0
#: How many times a down is sent again when observation shows a zombie or no effect.
MAX_DOWN_RESENDS = 2


class RuntimeWaits:
    """Settling an unknown up and following a down; uses Runtime's clients, clock, runbook and the other parts."""

    async def _in_flight(self) -> bool | None:
        """compose-manager's own word on whether an operation is still running (None: cannot say)."""
        status = getattr(self.clients.compose, "status", None)
        if status is None:
            return None
        try:
            st = await status()
        except ClientError:
            return None
        return st is not None

    async def success_record(self) -> list[Any] | None:
        """compose-manager's success record (`/version` projects.<p>.current/previous), which it
        rewrites only after an up's stream ended in success: it shifts exactly when an up succeeded."""
        try:
            version = await self.clients.compose.version()
        except ClientError:
            return None
        proj = version.project(self.entry.project) if hasattr(version, "project") else None
        if proj is None:
            return None
        return [_record(proj.current), _record(proj.previous)]

    async def _oneshots_ran(self, services: list[str]) -> bool:
        """Every one of `services` is a runbook one-shot whose container left output (it ran)."""
        oneshots = self.rb.oneshot_services()
        if not services or any(s not in oneshots for s in services):
            return False
        for s in services:
            try:
                text = await self.clients.compose.logs(self.service_file(s), [s], 50, self.entry.project)
            except ClientError:
                return False
            if not text.strip():
                return False
        return True

    async def _dry_run_finds_current(self, req: ComposeRequest) -> bool:
        """A dry run of `req` (docker/ps compared around it) plans no create, recreate or removal:
        the host already runs what `req` asks for. Uses the stream's `plan` event when present."""
        res = await self.dry_run(req.as_dry_run())
        if res.verdict != "done" or res.stream is None or res.stream.status != "success":
            return False
        self.journal_read("dry_run", req.as_dry_run(), {"status": res.stream.status, "purpose": "settle",
                                                        "lines": [self.scrub(x) for x in res.stream.lines[-40:]]})
        event = res.stream.plan_event or {}
        plan = event.get("plan") if isinstance(event.get("plan"), dict) else None
        if plan is not None:
            busy = [s for key in ("create", "recreate", "remove") for s in (plan.get(key) or [])]
            return not busy
        from orchestrator.hosts.parsers.dry_run import parse_dry_run

        parsed = parse_dry_run(res.stream.lines, project=self.entry.project)
        return all(parsed.actions.get(s, "unchanged") in ("unchanged", "started") for s in req.services) \
            and "removed" not in parsed.actions.values()

    async def settle_up(self, req: ComposeRequest, baseline: dict[str, Any]) -> str:
        """applied / not_applied / a sentence saying what is known. Waits while compose-manager
        says an operation is in flight, then decides within one poll; without `GET /status` it
        observes for up to SETTLE_S."""
        deadline = self.clock.monotonic() + SETTLE_S
        hard_deadline = self.clock.monotonic() + max(SETTLE_S, self.rb.timeouts.cold_start)
        base_ids = baseline.get("ids", {})
        while True:
            seen = self.clock.monotonic()  # when this observation began: a stall after it is never read as time the condition had
            actions = await self.clients.compose.action_log()
            new_actions = actions[baseline.get("actions", 0):]
            recorded = any(a.action == "compose_up" and a.tag == req.tag and a.file == req.file
                           and (not a.services or set(req.services) <= set(a.services)) for a in new_actions)
            by_svc = by_service(await self.ps())
            changed = [s for s in req.services if s in by_svc and by_svc[s].id != base_ids.get(s)]
            if recorded and len(changed) == len(req.services):
                return "applied"
            in_flight = await self._in_flight()
            if in_flight is False:
                # compose-manager says nothing runs any more: its success record and docker/ps decide
                if len(changed) == len(req.services):
                    return "applied"
                before, now = baseline.get("record"), await self.success_record()
                if before is not None and now is not None and now != before and now[0] \
                        and (now[0].get("tag"), now[0].get("file")) == (req.tag, req.file):
                    # the record shifted to this request: the up succeeded (a one-shot such as
                    # model-downloader restarts in place, keeping its container ID)
                    return "applied"
                unseen = [s for s in req.services if s not in changed]
                if recorded and unseen and await self._oneshots_ran(unseen):
                    # docker/ps lists running containers only: a one-shot (the perception check)
                    # that ran and exited is invisible there; its output says the up took effect
                    changed = changed + unseen
                    if len(changed) == len(req.services):
                        return "applied"
                if not changed:
                    return "not_applied"
                if await self._dry_run_finds_current(req):
                    # a one-shot (model-downloader) restarts in place, keeping its ID: a fresh dry
                    # run of the same request that plans nothing says the up took effect
                    return "applied"
                return f"compose-manager finished; changed: {changed} of {list(req.services)}"
            if in_flight is True:
                # still running (an image pull can be long): wait, bounded by the cold start
                if seen >= hard_deadline:
                    return f"compose-manager still reports the up in flight after {int(self.rb.timeouts.cold_start)} s"
            elif seen >= deadline:
                if not recorded and not changed:
                    return "not_applied"
                return f"action recorded: {recorded}; changed: {changed or 'none'} of {list(req.services)}"
            await self.wait(abortable=False)

    async def wait_gone(self, req: ComposeRequest, first: dict[str, Any], *, resends: int = 0) -> StepOutcome:
        """Wait until docker/ps no longer lists the services. `resends`: downs this visit already
        sent again (a resume counts them from the journal, so the cap holds across crashes)."""
        from orchestrator.engine.steps.outcome import ok

        timeout = self.rb.timeouts.gone
        deadline = self.clock.monotonic() + timeout
        # Time a down may legitimately take before a still-running container means it had no effect.
        no_effect_after = self.clock.monotonic() + self.rb.timeouts.stop_grace + 4 * self.poll
        base_ids = first.get("baseline", {}).get("ids", {})
        zombie_polls = 0
        self.emit("waiting", gate=f"docker/ps no longer lists {', '.join(req.services)}")
        while True:
            seen = self.clock.monotonic()  # when this observation began: a stall after it is never read as time the condition had
            by_svc = by_service(await self.ps())
            left = [by_svc[s] for s in req.services if s in by_svc]
            if not left and first.get("status") == "failure" and resends < MAX_DOWN_RESENDS:
                # docker/ps lists running containers only: a removal that failed half-way (a
                # zombie) is invisible there. The down said failure: send it again to finish it.
                resends += 1
                self.log.warning("down_resent_after_failure")
                self.emit("note", text="the down reported failure though docker/ps no longer lists the container: sending it again")
                first = await self.mutate(f"compose_down_resend_{resends}", req, {"ids": base_ids})
                continue
            if not left:
                return ok(f"{', '.join(req.services)} gone from docker/ps")
            zombies = [c for c in left if c.state in ("removing", "dead")]
            still = [c for c in left if c.state == "running" and c.id == base_ids.get(c.service or c.name)]
            zombie_polls = zombie_polls + 1 if zombies and len(zombies) == len(left) else 0
            resend_reason = None
            if zombie_polls >= 3:
                resend_reason = "zombie: " + ", ".join(f"{c.name} {c.state}" for c in zombies)
            elif still and seen >= no_effect_after and first.get("status") != "success":
                resend_reason = "the down had no observable effect"
            if resend_reason:
                refusal = await self.stop_guard([c.service or c.name for c in left])
                if refusal:  # the world changed since the first down: never resend blindly
                    return halt(refusal)
                if resends >= MAX_DOWN_RESENDS:
                    return fail(f"{', '.join(c.name for c in left)} still listed after {resends + 1} downs ({resend_reason})")
                resends += 1
                zombie_polls = 0
                self.log.warning("down_resent_after_observation", reason=resend_reason)
                self.emit("note", text=f"sending the down again after observation ({resend_reason})")
                first = await self.mutate(f"compose_down_resend_{resends}", req, {"ids": base_ids})
                no_effect_after = self.clock.monotonic() + self.rb.timeouts.stop_grace + 4 * self.poll
                deadline = self.clock.monotonic() + timeout
                continue
            if seen >= deadline:
                return fail(f"{', '.join(c.name for c in left)} still listed after {int(timeout)} s")
            await self.wait(abortable=False)


def _record(rec: Any) -> dict[str, Any] | None:
    if rec is None:
        return None
    return {"tag": getattr(rec, "tag", None), "file": getattr(rec, "file", None), "commit": getattr(rec, "commit", None)}
