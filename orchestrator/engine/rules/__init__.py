"""The engine's rules: fed observations (docker/ps rows, log lines, action-log entries, or a journal
to read), they return verdicts. No client, no clock, no event loop: the executor's `Runtime`
gathers the evidence, a rule decides, a step handler acts on the decision."""
