"""This run's journal of effects, and what compose-manager did that it does not explain
(a part of `Runtime`, runtime.py).

Reads journaled after the fact; this visit's effects (a resume finds its calls there); and the
foreign-change checks (orchestrator/engine/foreign_change.py): an action-log entry since this
run's mark that no journaled call of this run explains, or an operation someone else is running.
"""

from __future__ import annotations

from typing import Any

from orchestrator.hosts.clients.compose_manager import ComposeRequest
from orchestrator.hosts.clients.errors import BadRequest, ClientError
from orchestrator.journal.base import EffectRecord
from orchestrator.engine.foreign_change import foreign_message, new_mark, own_call, since_mark, unexplained


class ForeignChange(Exception):
    """compose-manager's action log holds a call this run did not make: halt, send nothing."""


class RuntimeJournal:
    """Journal reads and writes of effects, and foreign-change checks; uses Runtime's journal, lease, clients."""

    async def foreign_in_flight(self) -> str | None:
        """Before a run acts: an operation compose-manager is running now was sent by someone else
        (this run has sent nothing yet, and a run of this journal with an unsettled call is resumed
        first). The refusal, or None."""
        status = getattr(self.clients.compose, "status", None)
        if status is None or any(e.mutating for e in self.journal.effects(self.run.run_id)):
            return None
        try:
            st = await status()
        except BadRequest as exc:
            if exc.status in (404, 405):  # a compose-manager without GET /status: the action log still guards every call
                return None
            raise
        if st is None:
            return None
        what = f"{st.action} of {', '.join(st.services) or 'every service'}" + (f" ({st.file}@{st.tag})" if st.file else "")
        return (f"compose-manager on {self.run.host} is running {what} since {st.started_at or 'an unknown time'}, which no run of "
                f"this journal sent: another orchestrator or a person is acting on the host; nothing was changed")

    async def foreign_part_way(self) -> str | None:
        """A part-way host whose target calls no run of this journal made: the refusal, or None."""
        from orchestrator.engine.foreign_check import refuse_foreign_part_way

        actions = await self.clients.compose.action_log()
        return refuse_foreign_part_way(self.journal, self.run.host, actions, self.rb.file, self.run.tag or "", "")

    def _last_effect_id(self) -> int:
        return max((e.effect_id for e in self.journal.effects(self.run.run_id)), default=0)

    async def check_foreign(self, *, advance: bool) -> str | None:
        """One line naming an action-log entry since this run's mark that no call this run
        journaled explains (None: none). `advance`: when clean, the mark moves to now."""
        actions = getattr(self, "_fresh_actions", None)
        self._fresh_actions = None
        if actions is None:
            actions = await self.clients.compose.action_log()
        last_effect = self._last_effect_id()
        mark = self.ctx.action_mark
        if mark:
            later = since_mark(actions, mark)
            if later is None:
                return (f"compose-manager's action log on {self.run.host} no longer holds the {mark.get('count')} entries this run "
                        "read before (replaced or rewritten): who acted on the host cannot be told. Nothing more is sent; inspect the host")
            effects = self.journal.effects(self.run.run_id)
            own = [oc for e in effects if e.mutating and e.effect_id > int(mark.get("effect_id", 0))
                   and (oc := own_call(e.kind, e.request)) is not None]
            foreign = unexplained(later, own)
            if foreign:
                in_flight = None
                status = getattr(self.clients.compose, "status", None)
                if status is not None:
                    try:
                        st = await status()
                        in_flight = f"{st.action} of {', '.join(st.services) or 'every service'}" if st is not None else None
                    except (ClientError, AttributeError):
                        in_flight = None
                return self.scrub(foreign_message(self.run.host, foreign, in_flight=in_flight))
        if advance:
            self.ctx.action_mark = new_mark(actions, last_effect)
        return None

    def journal_read(self, kind: str, req: ComposeRequest, outcome: dict[str, Any]) -> None:
        """A non-mutating effect is journaled after the fact (nothing to reconcile on resume)."""
        eff = self.journal.record_intent(self.lease, self.run.run_id, self.visit_key, kind,
                                         self.redactor.scrub_obj(req.redacted()), mutating=False)
        self.journal.record_outcome(self.lease, self.run.run_id, eff.effect_id, self.redactor.scrub_obj(outcome))

    def visit_effects(self, prefix: str) -> list[EffectRecord]:
        """This visit's journaled effects whose kind starts with `prefix`, oldest first."""
        return [e for e in self.journal.effects(self.run.run_id) if e.step == self.visit_key and e.kind.startswith(prefix)]

    def recorded_effect(self, kind: str) -> EffectRecord | None:
        """The mutating effect of `kind` this visit of this state already journaled (a resume)."""
        for eff in reversed(self.journal.effects(self.run.run_id)):
            if eff.step == self.visit_key and eff.kind == kind:
                return eff
        return None
