"""Every simulated system served over loopback: sim_fleet.py (`SimFleet`), config.py (`SimConfig`,
the URLs, tokens and env maps it hands out), files.py (the orchestrator's inventory and env)."""
