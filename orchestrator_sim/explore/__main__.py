"""`python -m orchestrator_sim.explore`: the schedule explorer's command line (cli.py)."""

import sys

from orchestrator_sim.explore.cli import main

sys.exit(main())
