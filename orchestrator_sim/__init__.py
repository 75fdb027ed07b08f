"""A simulated gpu02 and the systems around it (compose-manager, the gpu-manager dashboard, two
model-proxy peers, the long-domain inference endpoint, the soak relay), served as real HTTP
servers on loopback. Used by `orchestrate demo` and by end-to-end tests; it shares no code with
the orchestrator's clients and parsers, so that each checks the other.

Public API:
    SimConfig, SimFleet          run everything (context manager); see fleet/sim_fleet.py
    FAULTS, parse_fault          the fault table (faults/)
    RecordedCall, load_calls     the call record (record/calls.py)
    check_invariants, no_call_after, check_base_tier
    SlotChange, ServingTimeline  the serving timeline (record/timeline.py)
    BASE_HOSTS, BASE_PREVIOUS_TAG, BASE_TARGET_TAG, BASE_CANONICAL_FILE, BASE_TARGET_FILE
                                 the base tier (gpu03, gpu04, gpu23; SimConfig(hosts=...))
"""

from orchestrator_sim.compose_manager.repo import (
    BASE_CANONICAL_FILE,
    BASE_HOSTS,
    BASE_PREVIOUS_TAG,
    BASE_TARGET_FILE,
    BASE_TARGET_TAG,
    SimRepository,
)
from orchestrator_sim.faults import FAULTS, FaultInfo, FaultSpec, parse_fault
from orchestrator_sim.fleet.config import KNOWN_HOSTS
from orchestrator_sim.fleet.sim_fleet import FleetTokens, FleetUrls, SimConfig, SimFleet
from orchestrator_sim.record.calls import RecordedCall, load_calls
from orchestrator_sim.record.invariants import check_base_tier, check_invariants, no_call_after
from orchestrator_sim.record.timeline import ServingTimeline, SlotChange, load_timeline

__all__ = [
    "BASE_CANONICAL_FILE",
    "BASE_HOSTS",
    "BASE_PREVIOUS_TAG",
    "BASE_TARGET_FILE",
    "BASE_TARGET_TAG",
    "check_base_tier",
    "FAULTS",
    "KNOWN_HOSTS",
    "FaultInfo",
    "FaultSpec",
    "FleetTokens",
    "FleetUrls",
    "RecordedCall",
    "ServingTimeline",
    "SimConfig",
    "SimFleet",
    "SimRepository",
    "SlotChange",
    "check_invariants",
    "load_calls",
    "load_timeline",
    "no_call_after",
    "parse_fault",
]
