"""One module per `orchestrate` command (pip's `commands/`): each parses its arguments, hands a
request to the service (orchestrator/service/) or a read to the journal, and renders the result.
`orchestrator.cli` imports the chosen command's module alone (`--help` lists them from its table)."""
