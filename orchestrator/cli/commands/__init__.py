"""One module per `orchestrate` command (pip's `commands/`): each parses its arguments, hands a
request to the service (orchestrator/service/) or a read to the journal, and renders the result.
A module loads only typer and orchestrator.cli.options at import: `orchestrator.cli` imports the
chosen command's module alone (`--help` imports them all for their one-line help)."""
