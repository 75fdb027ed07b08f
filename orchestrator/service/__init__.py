"""The application service: the one path from a front end to the engine.

A front end (the CLI's commands, `orchestrate serve`'s worker) parses its input into a request
(`service.requests`), hands it to a function here, and renders what comes back. Opening the
session, the checks a user can fail before anything exists, admission, the options a run keeps,
placement (`--continue`), execution (stoppable by Ctrl-C), the lease's release and the exit code
all live in this package:

- `service.requests`: RolloutRequest, RollbackRequest, ResumeRequest, FleetRequest; RunResult, FleetOutcome;
- `service.admission`: the one admission path; a request admitted into an open session (CLI and server);
- `service.runs`: a request run to its end here (open, admit, execute, release, exit code);
- `service.runner`: an admitted run executed; the first Ctrl-C stops it at a safe point;
- `service.signals`: approve, abort, pause, continue (journal signals).

This module imports nothing: a command that only reads loads none of it.
"""
