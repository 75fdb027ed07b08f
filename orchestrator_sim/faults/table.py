"""The table of record of the simulator's faults: `FAULTS` (name -> FaultInfo: what the simulator
does, the symptom an orchestrator can observe, and the end state a correct orchestrator reaches),
and `ENGINE_FAULTS` (the faults that take a replica). Parsing a fault spec and the faults active
on a host are __init__.py's."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator_sim.faults.canary import canary_faults

ENGINE_REPLICAS = ("r1", "r2")


@dataclass(frozen=True)
class FaultInfo:
    name: str
    arg: str  # "replica", "count", "replica-count" or "none"
    symptom: str
    expected_end_state: str
    scope: str = "any"  # "base": only base-tier hosts (gpu03, gpu04, gpu23) unless `@host` says so
    #: the schedule explorer draws it (False: aimed at one step, driven by its own case test)
    drawn: bool = True


_ROLLBACK_R2 = (
    "the engine gate fails on the new replica; the orchestrator rolls that replica back "
    "(scoped down of the new engine with the long-context file, then a dry-run-first scoped up "
    "of the previous engine from the canary file at v0.0.290) while the other replica keeps "
    "serving; no orphan removal, never both replicas down (ROLLED_BACK, exit 3). With `:r1`, "
    "once r2 has moved: the failing r1 is stopped and the run halts with r2 serving (HALTED, "
    "exit 4), since an up of the canary file would remove the new r2 as an orphan"
)
_REFUSE = (
    "the orchestrator refuses before step 1: no mutating compose-manager call at all, every "
    "container unchanged, the reason named in the plan/journal"
)
_RECOVER = (
    "the orchestrator recovers on its own and the rollout completes exactly as without the fault "
    "(no duplicate effect, no orphan removal)"
)

FAULTS: dict[str, FaultInfo] = {
    f.name: f
    for f in [
        FaultInfo(
            "oom",
            "replica",
            "the new engine logs `torch.OutOfMemoryError: CUDA out of memory` while capturing "
            "CUDA graphs and exits (1); unless-stopped restarts it and it fails again",
            _ROLLBACK_R2,
        ),
        FaultInfo(
            "cuda-801",
            "replica",
            "the new engine logs `CUDA error 801` at its HiCache host allocation and exits (1), "
            "then restarts and fails again",
            _ROLLBACK_R2,
        ),
        FaultInfo(
            "budget-80pct", "none", "the dashboard's env map for gpu02 carries GLM53_HICACHE_RAM_BUDGET=80%", _REFUSE
        ),
        FaultInfo(
            "rank-budget-wrong",
            "replica",
            "the new engine logs rank_budget_bytes=101500000000 (406 GB, not GiB, over 4 ranks) "
            "on every rank although the env map is fine; it still becomes ready",
            _ROLLBACK_R2,
        ),
        FaultInfo(
            "restart-loop",
            "replica",
            "the new engine dies with an NCCL error shortly after init, again and again: docker "
            "ps shows State restarting, the same ID, Status `Restarting (1) ...`, and its log "
            "starts over from the top on every restart",
            _ROLLBACK_R2,
        ),
        FaultInfo(
            "cold-start-hang",
            "replica",
            "the new engine stops logging after `Capture cuda graph begin` and never becomes ready",
            "the cold-start deadline (about 50 minutes plus margin) expires; " + _ROLLBACK_R2,
        ),
        FaultInfo(
            "dry-run-extra-recreate",
            "none",
            "every compose/up of the long-context file that does not name nginx also plans (and, "
            "if applied, performs) `Container nginx  Recreated`",
            "the plan check refuses the apply (nothing but the listed services may be created or "
            "recreated); the orchestrator stops and restores the replica it had taken down from "
            "the previous file, dry run first; nginx is never recreated",
        ),
        FaultInfo(
            "force-recreate-ignored",
            "none",
            "compose-manager drops `force_recreate` (a build whose request has no such field): a "
            "forced dry run of a service whose only change is inline configs content plans it "
            "`Running` and a forced up leaves its old container and old config (docker/compose#11900)",
            "the forced dry run's own gate sees the service not recreated, stops exactly that "
            "service with a scoped down (never an engine) and plans again (`Created`): the new "
            "config takes and the rollout completes (DONE, exit 0), nothing rolled back",
        ),
        FaultInfo(
            "dry-run-extra-remove",
            "none",
            "every compose/up of the long-context file that does not name r1 also plans (and, if "
            "applied, performs) `Container model-sg-glm53-w4afp8-tp4-r1  Removed` for the serving r1",
            "the plan check refuses the apply (a plan that removes anything is never applied); "
            "the orchestrator restores the replica it had taken down; r1 never stops",
        ),
        FaultInfo(
            "dry-run-not-dry",
            "none",
            "docker/compose#14029: a dry run really creates/recreates the containers it plans "
            "(new IDs and creation times in docker ps) while printing DRY-RUN lines",
            "the docker/ps comparison around the dry run sees the change; the orchestrator halts "
            "for an operator (or rolls back) and never sends the apply",
        ),
        FaultInfo(
            "dry-run-recreates",
            "none",
            "docker/compose#14029 as a real host shows it: a dry run whose plan recreates a running "
            "container performs the real `up -d --remove-orphans` instead (the recreated containers get "
            "new IDs and creation times; every container of the project that the file does not define is "
            "stopped and removed as an orphan); those lines come WITHOUT the `DRY-RUN MODE -` prefix, the "
            "stream still ends in success and the action log records nothing. A dry run that only creates "
            "or finds everything unchanged stays dry",
            "no dry run names a running engine or anything its phase does not act on (placement reads "
            "docker/ps labels; previews and rollback-target checks skip services that run another "
            "definition), so the serving replicas are never recreated by a check; where a step's own dry "
            "run does recreate for real, the docker/ps comparison around it stops the run (HALTED) with "
            "one line naming each changed container, and nothing more is sent",
        ),
        FaultInfo(
            "busy-409",
            "count",
            "the next N calls of a route needing the docker lock (compose/up, compose/down) get "
            "409 `another docker operation is already in progress: docker_restart`",
            _RECOVER + " (it retries with backoff)",
        ),
        FaultInfo(
            "lock-after-down",
            "count",
            "right after every compose/down completes, another client (the dashboard, an operator's "
            "dry run) holds compose-manager's lock for the next N lock calls and `GET /status` answers "
            "(default 12: two calls' worth of the client's busy retries), for at most 120 simulated "
            "seconds (another client's dry run): compose/up and compose/down "
            "get 409 `already in progress: compose_up`, and `GET /status` names that operation",
            "the step after the stop waits the lock out (bounded by the runbook's `timeouts.gone`), saying "
            "what holds it, and the run ends as without the fault: no replica is left empty for a "
            "transient 409",
        ),
        FaultInfo(
            "sidecar-down-busy",
            "replica",
            "once that replica runs an engine of the target file that this simulation started, every "
            "compose/down naming no engine gets 409 `already in progress: compose_up` (another client's "
            "operation) for 900 simulated seconds from the first such refusal, past every runbook's "
            "`timeouts.gone`; then never again",
            "the phase's stop of its perception check or soak relay halts there (HALTED, exit 4: the lock "
            "named, no rollback), the new engine keeps serving, and `resume RUN --retry` sends that down "
            "again at the same step and ends DONE with the same engine",
            drawn=False,
        ),
        FaultInfo(
            "down-busy",
            "replica-count",
            "the next N compose/down calls that name a running engine of that replica (by default 6: "
            "one down with the client's five busy retries spent) get 409 `another docker operation is "
            "already in progress: docker_restart`; other calls are not affected. `down-busy:r1` hits "
            "r1's step-7 stop of the old r1 (the same service name as the new r1)",
            "the down waits the lock out for up to the runbook's `timeouts.gone`: a few refusals end as "
            "without the fault; a lock held past that bound (`down-busy:r1:100000`) halts the run at that "
            "step (HALTED, exit 4: the lock named, nothing changed, no rollback), so the old r1 keeps "
            "serving beside the new r2",
            drawn=False,
        ),
        FaultInfo(
            "server-500",
            "count",
            "the next N calls of any compose-manager route get 500 with an HTML error page and do nothing",
            _RECOVER + " (it retries idempotent calls; an unknown compose outcome is read from docker/ps)",
        ),
        FaultInfo(
            "cut-before-effect",
            "none",
            "the first compose/up apply's stream breaks (no `done` line) after the pull lines, "
            "before anything changes (the action log already holds the accepted up, as 8e07c35 "
            "records it before docker runs; projects.work.current does not move)",
            _RECOVER + " (docker/ps shows nothing changed, so the call is sent again, dry run first)",
        ),
        FaultInfo(
            "cut-after-effect",
            "none",
            "the first compose/up apply's stream breaks after the change took effect (and was "
            "recorded in the action log) but before `done`",
            _RECOVER + " (docker/ps shows the change, so the apply is NOT sent again)",
        ),
        FaultInfo(
            "zombie-after-down",
            "none",
            "the first compose/down that removes a container leaves it in state `removing` with a "
            "daemon error and exit code 1 (plain `docker ps` no longer lists it, running "
            "containers only); a second down removes it",
            _RECOVER + " (it sees the zombie in docker/ps and sends the down again)",
        ),
        FaultInfo(
            "peer-missing",
            "none",
            "model-proxy peer-b never lists gpu02 under any domain",
            "the peers disagree, so the registry verification fails: after the first replica "
            "the orchestrator rolls that replica back (or halts for an operator)",
        ),
        FaultInfo(
            "completion-fails",
            "none",
            "the inference endpoint answers 500 to every chat completion",
            _REFUSE + " (the before-state needs one successful long-domain completion)",
        ),
        FaultInfo(
            "cache-miss",
            "none",
            "usage.prompt_tokens_details.cached_tokens stays 0 on every completion",
            "the cache-hit verification fails after the first replica; that replica is rolled back",
        ),
        FaultInfo(
            "tag-too-recent",
            "none",
            "v0.0.300's commit is 5 hours old: compose-manager answers 400 `tag too recent: "
            "<date> UTC is less than 48 hours old`, and the simulated GitHub shows the same "
            "commit date",
            _REFUSE + " (the tag gate is checked before anything is stopped)",
        ),
        FaultInfo(
            "tag-unknown", "none", "compose-manager does not know v0.0.300: 400 `tag not found: v0.0.300`", _REFUSE
        ),
        FaultInfo(
            "tag-unmerged",
            "none",
            "GitHub's compare of main...v0.0.300 says `diverged`: the tag's commit is not merged "
            "to main (compose-manager itself does not check this and would deploy it)",
            _REFUSE + " (the orchestrator's own GitHub tag check)",
        ),
        FaultInfo(
            "github-down",
            "none",
            "the simulated GitHub API answers 503 to everything, and compose-manager (which asks "
            "GitHub unauthenticated) answers 400 `tag not found: T` for every tag",
            _REFUSE + " (GitHub unreachable: the tag check cannot pass without --skip-tag-age-check)",
        ),
        FaultInfo(
            "weights-missing",
            "none",
            "`GET /host/cache` no longer lists models--graphistry--GLM-5.3-Flash-W4AFP8: the "
            "new engines' weights must be downloaded first (model-downloader, ~165 GiB)",
            "a pre-flight that reads host/cache sees the missing weights and names them",
        ),
        FaultInfo(
            "host-restore-missing",
            "replica",
            "the new engine never restores a prefix from its HiCache host tier: a follow-up whose "
            "prefix left the device pool is computed again, and sglang:hicache_host_hit_tokens_total "
            "stays where it was",
            "the host-restore metrics gate fails after the cache-hit follow-up; " + _ROLLBACK_R2,
        ),
        FaultInfo(
            "labels-wrong",
            "replica",
            "the new engine's container carries a stale config_variant (the canary's "
            "`...-canary-stale`) in its nearai.otel label and its log tags",
            "the telemetry-labels gate fails naming config_variant; " + _ROLLBACK_R2,
        ),
        FaultInfo(
            "perception-fails",
            "none",
            "the perception check prints `{\"event\": \"qualification_finished\", \"ok\": false}` "
            "and exits 1",
            "the one-shot completion gate fails on the first replica's check; the orchestrator removes "
            "the perception check and the relay and rolls r2 back as for an engine fault (ROLLED_BACK, "
            "exit 3), no perception-check container left behind",
        ),
        FaultInfo(
            "budget-no-fit",
            "none",
            "the dashboard's env map carries GLM53_HICACHE_RAM_BUDGET=650GiB, which fits once "
            "but not twice (the second engine fails at startup and restart-loops)",
            _REFUSE,
        ),
    ]
}

_BASE_ROLLBACK = (
    "the base host's gate fails after the switch; the orchestrator rolls the host back to the "
    "canonical FP8 file (registrar down, scoped down of both W4AFP8 engines, dry-run-first scoped "
    "up of both FP8 engines and the three sidecars, then the registrar once they are ready), never "
    "removing anything as an orphan, and the other base hosts keep serving"
)
FAULTS.update(
    {
        f.name: f
        for f in [
            FaultInfo(
                "dist-store-error",
                "replica",
                "the new W4AFP8 engine's FIRST container logs a rank-initialisation failure "
                "(`torch.distributed.DistStoreError: ...` traceback) and then never logs again nor "
                "becomes ready, while docker shows it `running` (its ranks hang); a fresh container "
                "of that service (scoped compose/down, then a dry-run-first compose/up) starts normally",
                "the cold-start gate takes its remedy: that one engine is stopped (scoped down of the "
                "W4AFP8 file), started again (dry run first) once its sibling serves, and the rollout "
                "goes on to DONE (exit 0); a second DistStoreError fails the gate and " + _BASE_ROLLBACK,
                scope="base",
            ),
            FaultInfo(
                "drain-stuck",
                "none",
                "after the registrar's unregister the engines' sglang:num_running_reqs gauge stays at "
                "6 instead of decaying to 0-1",
                "the drain gate (gauges near zero within 5 minutes) times out before any engine is "
                "stopped; the drain phase's rollback starts the canonical registrar again and the "
                "host rejoins (ROLLED_BACK, exit 3); the FP8 engines are never stopped",
                scope="base",
            ),
            FaultInfo(
                "downloader-fails",
                "none",
                "model-downloader logs `Downloading zai-org/GLM-5.3-Flash...`, then a Hugging Face "
                "401 error, and exits 1 without `Download complete.` (an up that needs it as a "
                "completed dependency fails: `service \"model-downloader\" didn't complete "
                "successfully: exit 1`)",
                "the pre-stage fails: the run ends ABORTED (exit 5) before the drain (no engine "
                "stopped, host still registered)",
                scope="base",
            ),
            FaultInfo(
                "no-rejoin",
                "none",
                "a registrar started during the simulation (the rejoin) never passes its readiness "
                "probe (the one deployed before keeps the host registered): it logs `Model not ready yet "
                "(attempt N/30), retrying in 30s...` every 30 s and never registers (after 30 tries "
                "its registration loop's health check keeps failing too)",
                "the rejoin gate (host listed healthy on both peers) times out; the host goes back to "
                "the canonical file, whose rejoin times out the same way: HALTED (exit 4), the FP8 "
                "engines serving and the host out of the pool for an operator; a fleet stops there",
                scope="base",
            ),
            FaultInfo(
                "host-unhealthy",
                "none",
                "both model-proxy peers list that base host (e.g. `host-unhealthy@gpu04`) with "
                "healthy=false under the base domain from the start",
                "the capacity guard of another base host's rollout fails: ABORTED (exit 5) before its "
                "drain, nothing stopped (fewer than n-1 base hosts would serve)",
                scope="base",
            ),
        ]
    }
)

# Issue 23's canary faults (live traffic, device memory): orchestrator_sim/faults/canary.py
FAULTS.update(canary_faults(FaultInfo))

# Issue 23's gates outside the engines (orchestrator/engine/steps/external.py): aimed at one gate each.
_GATE_FAILS = "the gate naming it fails: the phase's rollback (ROLLED_BACK, exit 3), or ABORTED in preflight"
FAULTS.update({f.name: f for f in [
    FaultInfo("pr-unmerged", "none", "GitHub: the target tag's commit belongs to an open (unmerged) PR", _GATE_FAILS, drawn=False),
    FaultInfo("ci-failing", "none", "GitHub: the target tag's PR head has a check run concluded failure", _GATE_FAILS, drawn=False),
    FaultInfo("ci-pending", "none", "GitHub: the target tag's PR head has a check run still in progress", _GATE_FAILS, drawn=False),
    FaultInfo("proxy-pool-stale", "none", "the in-host proxy's /backends/list leaves r2's engines out", _GATE_FAILS, drawn=False),
    FaultInfo("attestation-stale", "none", "the attestation report's actions_hash does not cover its last action",
              _GATE_FAILS, drawn=False),
    FaultInfo("attestation-file-mismatch", "none", "the attestation report's compose_ups carry another file's sha256",
              _GATE_FAILS, drawn=False),
    FaultInfo("prometheus-down", "none", "the Prometheus query API fake answers 503 (source: prometheus analyses "
              "cannot read their replicas)", _GATE_FAILS, drawn=False),
    FaultInfo("hash-unregistered", "none", "the compose-hash registry does not list the target tag's file", _GATE_FAILS,
              drawn=False),
]})

ENGINE_FAULTS = frozenset(n for n, f in FAULTS.items() if f.arg == "replica")
