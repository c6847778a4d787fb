"""nanobot-rs, launched from Python.

The work is done by the ``nanobot`` executable this wheel installs; this package only finds it
(:func:`find_nanobot_bin`) and runs it, for ``python -m nanobot`` and ``nanobot.cli.commands.app``.
"""

from __future__ import annotations

import os
import sys
import sysconfig

__all__ = ["find_nanobot_bin"]

_EXE = "nanobot" + (sysconfig.get_config_var("EXE") or "")


def _candidates() -> list[str]:
    dirs = [sysconfig.get_path("scripts")]
    user_scheme = f"{os.name}_user"
    if user_scheme in sysconfig.get_scheme_names():
        dirs.append(sysconfig.get_path("scripts", scheme=user_scheme))
    # `pip install --target DIR` puts the package in DIR and the executable in DIR/bin.
    here = os.path.dirname(os.path.abspath(__file__))
    dirs.append(os.path.join(os.path.dirname(here), "bin"))
    dirs.append(os.path.dirname(sys.executable))
    return [os.path.join(d, _EXE) for d in dirs if d]


def find_nanobot_bin() -> str:
    """The path of the ``nanobot`` executable installed with this package.

    Raises ``FileNotFoundError`` naming every place looked at when it is missing.
    """
    tried = _candidates()
    for path in tried:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError(
        "the nanobot executable of this wheel was not found; looked at: " + ", ".join(tried)
    )
