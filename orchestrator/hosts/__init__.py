"""Talking to hosts: the HTTP clients, the parsers of what hosts answer, the inventory, the
compose file, the env map and its redaction, the HiCache budget, the log follower and the log gate."""
