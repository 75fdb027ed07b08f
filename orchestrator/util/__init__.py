"""Pure helpers every layer uses: outcomes, exit codes, user errors, durations, the clock and
the settings."""
