"""Pure rules of the engine: fed observations, they return verdicts; no I/O, no clock, no event loop."""
