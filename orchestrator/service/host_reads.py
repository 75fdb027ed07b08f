"""The read-only host reads made before a run is admitted (`rollout --continue`'s placement, a
rollback's targets dry-run, what a rollback would do, whether the model-proxy peers route to enough
hosts of a `capacity: fleet` tier). Advisory only: admission judges again."""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.engine.executor.placement import PlacementError, observe_host
from orchestrator.engine.rules import host_state
from orchestrator.engine.rules.foreign_change import refuse_foreign_part_way
from orchestrator.engine.rules.targets import group_targets, wrong_target
from orchestrator.hosts.clients.compose_manager import ComposeRequest, validate_file
from orchestrator.hosts.clients.dashboard import DashboardClient
from orchestrator.hosts.clients.errors import BadRequest, ClientError, RequestInvalid, TagNotFound, TagTooRecent
from orchestrator.hosts.clients.model_proxy import ModelProxyClient
from orchestrator.hosts.envmap import EnvMap
from orchestrator.hosts.inventory import HostEntry
from orchestrator.hosts.parsers.dry_run import parse_dry_run
from orchestrator.hosts.ps_compare import compare_ps, describe_changes, split_by_definition
from orchestrator.journal.base import RunRecord
from orchestrator.language.runbook import Runbook, load_runbook
from orchestrator.service.refusals import _require_earlier_phases_passed
from orchestrator.service.run_info import check_tag
from orchestrator.service.session import Session, _compose_client
from orchestrator.util.user_errors import Refused, UserError


async def _env_map(session: Session, host: str, entry: HostEntry, *identifiers: str) -> EnvMap:
    """The host's env map; its secret values join the session's redactor (`identifiers` stay readable)."""
    async with DashboardClient(str(session.inventory.dashboard_url).rstrip("/"), session.settings.dashboard_token,
                               transport=session.transport, retry=session.retry, clock=session.clock) as dash:
        env = await dash.env_map(name=entry.instance_name)
    session.redactor.add(*env.redaction_values(secret_keys=entry.secret_keys,
                                               identifiers=(host, entry.instance_name, *identifiers)))
    return env


async def _observe(session: Session, host: str, rb: Runbook, tag: str) -> dict[str, str]:
    """What the host runs, for placement (read-only: docker/ps and one dry run)."""
    entry = session.inventory.host(host)
    env = await _env_map(session, host, entry, tag, *rb.identifiers())
    async with _compose_client(session, entry) as cm:
        try:
            return await observe_host(cm, env, rb, tag, entry.project)
        except PlacementError as exc:
            raise Refused(f"cannot place {host} in the runbook: {exc}") from None


async def place_for_continue(session: Session, host: str, tag: str, runbook: str) -> str:
    """`rollout --continue`: the phase the host's declared state continues at (read-only)."""
    check_tag(tag)
    rb = load_runbook(runbook)
    observed = await _observe(session, host, rb, tag)
    state = host_state.place(rb, observed)
    if state is None:
        near = host_state.nearest(rb, observed)
        diff = f"; nearest is {near[0].name}: " + "; ".join(near[1]) if near else ""
        raise Refused(f"{host} is in a state the runbook does not recognise ({host_state.describe(observed)}){diff}. Nothing was changed")
    if state.action == "done":
        raise Refused(f"{host} already runs the target ({state.say}): nothing to continue")
    phase = rb.phases[0].name if state.action == "start" else state.action
    # never take over a rollout that another journal (or a person) is driving
    async with _compose_client(session, session.inventory.host(host)) as cm:
        actions = await cm.action_log()
    msg = refuse_foreign_part_way(session.journal, host, actions, rb.file, tag,
                                  session.redactor.scrub(session.settings.journal_location()))
    if msg:
        raise Refused(msg)
    _require_earlier_phases_passed(session, host, tag, rb, phase)
    return phase


async def validate_rollback_targets(session: Session, host: str, rb: Runbook, previous: dict[str, dict[str, str]],
                                    replicas: list[str] | None = None, *, explicit: bool = False) -> None:
    """Dry-run every (tag, file) a rollback of `replicas` (default: all) goes back to, before
    anything is stopped: a typo, or a file that would remove what serves or not define what the
    rollback starts (targets.wrong_target), exits 2. An `explicit` target whose every service runs
    another definition cannot be dry-run without planning their recreate: refused too."""
    entry = session.inventory.host(host)
    targets = group_targets(rb, previous)
    for (_, file), services in targets.items():
        try:
            validate_file(file)
        except RequestInvalid as exc:
            raise UserError(f"rollback target file {file!r} for {', '.join(services)}: {exc.detail}") from None
    env = await _env_map(session, host, entry, *rb.identifiers(), *(v for target in targets for v in target))
    async with _compose_client(session, entry) as cm:
        actions = await cm.action_log()
        for (tag, file), all_services in targets.items():
            before = await cm.ps(entry.project)
            running = {(c.service or c.name): c for c in before if c.state in ("running", "restarting")}
            # never a dry run that plans a recreate (docker/compose#14029 performs it): what runs
            # another definition is checked by the rollback's own dry run, after its stop
            services, _held = split_by_definition(all_services, running, tag, file, actions, engines=set(rb.engines()))
            if not services and explicit:
                raise UserError(f"rollback target {file}@{tag} cannot be checked before anything is stopped: every service "
                                f"the rollback starts from it ({', '.join(all_services)}) runs another definition now, and "
                                f"a dry run naming them would plan their recreate. {host} does not run what a rollout of "
                                f"{rb.file} leaves (rolled back already?): look at what it runs, then check "
                                f"--to-tag/--to-file. Nothing was sent")
            if not services:
                continue
            req = ComposeRequest(tag=tag, file=file, services=tuple(services), project=entry.project, dry_run=True)
            try:
                outcome = await cm.up(req, env)
            except (TagNotFound, TagTooRecent, BadRequest) as exc:
                raise UserError(f"rollback target {file}@{tag} is not usable: {session.redactor.scrub(str(exc))}; "
                                f"check --to-tag/--to-file. Nothing was stopped") from None
            changes = compare_ps(before, await cm.ps(entry.project), rb.oneshot_services())
            if changes:
                raise Refused(f"the dry run of rollback target {file}@{tag} changed real containers: {describe_changes(changes)} "
                              f"(docker/compose#14029, or someone else acting on {host}): inspect the host. Nothing more was sent")
            if outcome.status != "success":
                raise UserError(f"rollback target {file}@{tag}: its dry run failed ("
                                + session.redactor.scrub(" | ".join(outcome.lines[-2:])) + "); check --to-tag/--to-file. Nothing was stopped")
            plan = parse_dry_run(outcome.lines, project=entry.project)
            removed = {s for s, a in plan.actions.items() if a == "removed" and s in running}
            wrong = wrong_target(rb, replicas or rb.rollback_replicas("all"), previous, (tag, file), removed)
            if wrong:
                raise UserError(wrong)


async def refuse_nothing_to_roll_back(session: Session, host: str, rb: Runbook, tag: str) -> None:
    """A host in the runbook's before-state already runs the previous configuration: refused."""
    state = host_state.place(rb, await _observe(session, host, rb, tag))
    if state is not None and state.action == "start":
        raise Refused(f"{host} already runs the previous configuration ({state.name}: {state.say}): nothing to roll back. "
                      f"Nothing was changed")


async def refuse_alone(session: Session, host: str, rb: Runbook, replica: str, last: RunRecord | None) -> None:
    """One replica cannot go back to the previous file while an engine of another replica that
    only the new file defines runs: compose-manager's --remove-orphans would stop it."""
    entry = session.inventory.host(host)
    new_only = [x for ph in rb.full_rollback if ph.replica != replica for s in ph.steps
                if s.down is not None and s.down.file == "new" and isinstance(s.down.services, list)
                for x in s.down.services if rb.replica_of(x) and rb.replica_of(x) != replica]
    prev_defined = {x for steps in rb.step_lists() for st in steps
                    if st.compose is not None and st.compose.file.startswith("previous:") and isinstance(st.compose.services, list)
                    for x in st.compose.services}
    new_only = [x for x in new_only if x not in prev_defined]
    if not new_only:
        return
    async with _compose_client(session, entry) as cm:
        running = {c.service or c.name for c in await cm.ps(entry.project) if c.state in ("running", "restarting")}
    blocking = [s for s in new_only if s in running]
    if blocking:
        retry = f"`orchestrate resume {last.run_id} --retry`" if last is not None else "`orchestrate resume RUN_ID --retry`"
        raise Refused(
            f"refusing to roll {replica} back alone: {', '.join(blocking)} runs, and the previous file does not define it, so "
            f"compose-manager's --remove-orphans would stop it with a 10 s stop while {replica} is down (no replica left). "
            f"Run `orchestrate rollback {host} --replica all` (in the runbook's safe order, one replica serving at every moment), "
            f"or retry {replica} from the new file with {retry}. Nothing was changed."
        )


async def tier_listing(session: Session, rb: Runbook, hosts: Sequence[str]) -> dict[str, list[str]]:
    """For each host: why the peers do not route the base domain to it (empty: every peer lists it
    healthy; a peer that cannot be asked is a reason). Read-only."""
    domain = rb.domains.of("base")
    out: dict[str, list[str]] = {h: [] for h in hosts}
    peers = [ModelProxyClient(name, str(url).rstrip("/"), session.settings.model_proxy_token, transport=session.transport,
                              retry=session.retry, clock=session.clock)
             for name, url in session.inventory.model_proxy_peers.items()]
    try:
        for peer in peers:
            for h in hosts:
                addr = session.inventory.host(h).model_proxy_address
                try:
                    got = await peer.presence(addr, domain)
                except ClientError as exc:
                    out[h].append(f"{peer.name} could not be asked ({type(exc).__name__})")
                    continue
                if not (got.listed and got.healthy):
                    out[h].append(f"{peer.name} does not list it healthy under {domain}")
    finally:
        for peer in peers:
            await peer.aclose()
    return out


async def refuse_tier_short(session: Session, host: str, rb: Runbook) -> None:
    """A rollback drains its host: admitted only while the peers list every other host of the tier
    (not the journal: a HALTED host outside the pool has no unfinished run). A host itself out
    of the pool only comes back."""
    if rb.capacity != "fleet":
        return
    others = [h for h in rb.hosts if h != host]
    unknown = [h for h in others if h not in session.inventory.hosts]
    if unknown:
        raise Refused(f"capacity cannot be confirmed: {', '.join(unknown)} not in the inventory; rolling {host} back "
                      f"could leave the tier short. Nothing was changed")
    listing = await tier_listing(session, rb, [host, *others])
    if listing[host] and not any("could not be asked" in why for why in listing[host]):
        return  # every peer answered and none lists it: not in the pool now, the rollback brings it back
    short = {h: why for h, why in listing.items() if h != host and why}
    if short:
        serving = len(rb.hosts) - len(short)
        raise Refused(f"rolling {host} back drains it, and the model-proxy peers route the base domain to only "
                      f"{serving} of {len(rb.hosts)} hosts of the tier now ("
                      + "; ".join(f"{h}: {', '.join(why)}" for h, why in short.items())
                      + f"): that would leave {serving - 1} serving. Bring "
                      f"{', '.join(short)} back into the pool first (`orchestrate rollback {next(iter(short))}` if "
                      f"its run ended outside it). Nothing was changed")
