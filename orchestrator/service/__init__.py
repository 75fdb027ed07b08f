"""The application service: the one path from a front end to the engine.

A front end (the CLI's commands, `orchestrate serve`'s worker) parses its input into a request
(`service.requests`), hands it to a function here, and renders what comes back. Opening the
session, the checks a user can fail before anything exists, admission, the options a run keeps,
placement (`--continue`), execution (stoppable by Ctrl-C), the lease's release and the exit code
all live in this package.

This module imports nothing: a command that only reads loads none of it.
"""
