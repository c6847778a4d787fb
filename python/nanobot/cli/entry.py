"""``nanobot.cli.entry.main``: the console entry point of the Python nanobot, here replacing the interpreter with
the ``nanobot`` executable (same arguments, same exit status)."""

from __future__ import annotations

import os
import subprocess
import sys

from nanobot import find_nanobot_bin

__all__ = ["main"]


def main() -> None:
    """Runs ``nanobot sys.argv[1:]…`` in place of this process."""
    exe = find_nanobot_bin()
    argv = [exe, *sys.argv[1:]]
    # The executable takes this interpreter's place (same pid, same parent): a launcher pid inherited from
    # further up would not be its parent's, so it is not passed on.
    env = {k: v for k, v in os.environ.items() if k != "NANOBOT_LAUNCHER_PID"}
    if sys.platform == "win32":
        sys.exit(subprocess.call(argv, env=env))
    for s in (sys.stdout, sys.stderr):
        if s is not None:
            s.flush()
    os.execve(exe, argv, env)
