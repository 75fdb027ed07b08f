"""`orchestrate serve`: rollouts that outlive the laptop that asked for them (team mode).

The server is `app` (routes), `worker` (runs as asyncio tasks) and `serving` (uvicorn with its
limits); `client` and `remote` are the CLI's `--server URL` side.
"""
