"""What the simulator records and the rules checked on it: calls.py (every call the simulated
systems receive), timeline.py (when each replica slot served), invariants.py (`check_invariants`)."""
