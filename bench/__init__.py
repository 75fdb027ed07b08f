"""Benchmarks of the orchestrator against its simulator: `python -m bench` (see docs/performance.md)."""
