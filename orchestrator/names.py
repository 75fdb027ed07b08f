"""Names the command line shows before it loads anything heavy (`orchestrate --help` must answer at
once: it cannot import the runbook schema, pydantic, to print the default runbook's name)."""

from __future__ import annotations

#: The runbook used when none is named and no shipped runbook names the host.
DEFAULT_RUNBOOK = "gpu02-glm53-w4afp8-long-context"
