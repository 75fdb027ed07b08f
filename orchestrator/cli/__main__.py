"""`python -m orchestrator.cli ...`: the same as `orchestrate ...`."""

from orchestrator.cli import main

main()
