"""`orchestrate`, primed: imports the CLI, then waits for one JSON line on stdin (the argv) and runs
it. The schedule explorer starts these ahead of time so that an operator action (abort, approve, a
second runner) reaches the journal milliseconds after its moment, not after an interpreter start.
An empty line (or EOF) exits without running anything.
"""

import json
import sys

from orchestrator.cli import main

line = sys.stdin.readline()
if not line.strip():
    sys.exit(0)
sys.argv = ["orchestrate", *json.loads(line)]
main()
