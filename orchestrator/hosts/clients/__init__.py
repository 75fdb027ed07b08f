"""HTTP clients for the systems the orchestrator talks to (interfaces.md).

- `compose_manager.ComposeManagerClient`: compose/up, compose/down (NDJSON streams), logs, docker/ps,
  version, status, host/gpu, host/cache, the action log (compose-manager 8e07c35).
- `github.GitHubClient`: tag checks (exists, merged to main, old enough).
- `dashboard.DashboardClient`: instances and their full env maps.
- `model_proxy.ModelProxyClient`: one model-proxy peer's registry and backends.
- `inference.InferenceClient`, `inference.SoakRelayClient`: completions and direct replica checks.
- `errors`: the error taxonomy; `retry.RetryPolicy`: how reads and busy answers are retried.
"""
