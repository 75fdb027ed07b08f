"""The runbook language: the schema of runbooks/*.yaml and its loader, the compiled state
machine, and the references (`new`, `previous:<service>`) a step's compose request is resolved from."""
