"""HTTP clients for the systems the orchestrator talks to (interfaces.md)."""
