"""`orchestrate serve`: rollouts that outlive the laptop that asked for them (team mode).

The package, by role:

- `app`: the starlette app factory and its routes;
- `worker`: runs submissions as asyncio tasks through `runner.execute`, as the CLI would (admission,
  adoption of orphaned runs, reads, a person's signals);
- `schemas`: the request bodies (bounded fields) and their one-line validation messages;
- `auth`: bearer tokens (one shared token, or a tokens file of named, role-bearing operators);
- `guards`: Host, Origin, Content-Type, body size and JSON depth checks before any route;
- `metrics`: the Prometheus registry, journal numbers from a snapshot refreshed off the event loop;
- `config`: environment settings, the server's log and its redactor;
- `serving`: uvicorn with TLS, timeouts, connection cap and an access log without query strings;
- `pages`, `run_view`: the web page (HTML fragments, no build step);
- `healthcheck`: the container's HEALTHCHECK;
- `cli`: `orchestrate serve` and `orchestrate serve token add`;
- `client` and `remote`: the `--server URL` side of the CLI.
"""
