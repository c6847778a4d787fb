"""The command line of nanobot-rs, reachable where the Python nanobot keeps its own (``nanobot.cli``)."""
