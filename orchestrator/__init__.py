"""orchestrator: runbooks for compose-manager hosts as gated state machines."""

__version__ = "0.1.0"
