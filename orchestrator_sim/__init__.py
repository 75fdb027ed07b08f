"""A simulated gpu02 and the systems around it (compose-manager, the gpu-manager dashboard, two
model-proxy peers, the long-domain inference endpoint, the soak relay), served as real HTTP
servers on loopback. Used by `orchestrate demo` and by end-to-end tests; it shares no code with
the orchestrator's clients and parsers, so that each checks the other.

Public API:
    SimConfig, SimFleet          run everything (context manager); see fleet.py
    FAULTS, parse_fault          the fault table (faults.py)
    RecordedCall, load_calls     the call record (recording.py)
    check_invariants, no_call_after
    SlotChange, ServingTimeline  the serving timeline (timeline.py)
"""

from orchestrator_sim.faults import FAULTS, FaultInfo, FaultSpec, parse_fault
from orchestrator_sim.fleet import FleetTokens, FleetUrls, SimConfig, SimFleet
from orchestrator_sim.invariants import check_invariants, no_call_after
from orchestrator_sim.recording import RecordedCall, load_calls
from orchestrator_sim.timeline import ServingTimeline, SlotChange, load_timeline

__all__ = [
    "FAULTS",
    "FaultInfo",
    "FaultSpec",
    "FleetTokens",
    "FleetUrls",
    "RecordedCall",
    "ServingTimeline",
    "SimConfig",
    "SimFleet",
    "SlotChange",
    "check_invariants",
    "load_calls",
    "load_timeline",
    "no_call_after",
    "parse_fault",
]
