"""The simulated compose-manager (as deployed at commit 8e07c35) and the compose-files repository it
deploys from: app.py (its HTTP API), ops.py (requests: validation, the lock, the tag gate), plan.py
(what an up creates, recreates or removes), scripts.py (the up/down scripts on the host's event
queue), records.py (a request, an operation, an orphan removal), repo.py (tags -> commits -> files
and the compose model), interpolation.py (docker compose's `${VAR}` rules)."""
