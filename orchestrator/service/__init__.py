"""The application service: the one path from a front end (the CLI's commands, `orchestrate
serve`'s worker) to the engine. A front end parses its input into a request (`service.requests`),
hands it to a function here and renders what comes back. Imports nothing: a read loads none of it."""
