"""What a run would do, shown before it runs: the offline plan, the live plan (read-only
against the host), the compose-file check, the CI preview and the state diagram."""
