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
    if sys.platform == "win32":
        sys.exit(subprocess.call(argv))
    for s in (sys.stdout, sys.stderr):
        if s is not None:
            s.flush()
    os.execv(exe, argv)
