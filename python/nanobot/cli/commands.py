"""``nanobot.cli.commands.app``: the entry point scripts import from the Python nanobot.

``app`` is called the way a Typer/Click application is: ``app()`` takes ``sys.argv[1:]``; ``app(args)`` or
``app(args=[...], prog_name=..., standalone_mode=...)`` takes the given arguments. It runs the ``nanobot``
executable as a child process (never replacing the caller's interpreter), passes its output to the current
``sys.stdout``/``sys.stderr`` (also when a harness has swapped them for buffers) and then, like Click:
with ``standalone_mode=True`` (the default) raises ``SystemExit`` with the exit status; with
``standalone_mode=False`` returns ``None`` on success and the exit status otherwise.

The child ends with the calling process, however that ends (a harness's SIGKILL on timeout included): it is
given this process's pid in ``NANOBOT_LAUNCHER_PID`` and asks the kernel, as it starts, to be killed when its
parent goes (Linux ``PR_SET_PDEATHSIG``; a watcher thread elsewhere), exiting at once if the parent is gone.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import IO, Any, Optional, Sequence

from nanobot import find_nanobot_bin

__all__ = ["app", "NanobotApp", "LAUNCHER_PID_VAR"]

#: The variable that tells the ``nanobot`` executable which process launched it (and so when to end).
LAUNCHER_PID_VAR = "NANOBOT_LAUNCHER_PID"


def _fileno(stream: Any) -> Optional[int]:
    """The OS file descriptor behind ``stream``, or None when it is a Python-level buffer."""
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def _pump(src: IO[bytes], dst: Any) -> None:
    """Copies the child's output into ``dst`` as it arrives (text or binary streams)."""
    binary = getattr(dst, "buffer", None)
    while True:
        chunk = src.read1(65536) if hasattr(src, "read1") else src.read(65536)
        if not chunk:
            break
        if binary is not None:
            binary.write(chunk)
            binary.flush()
        else:
            try:
                dst.write(chunk.decode("utf-8", errors="replace"))
            except TypeError:
                dst.write(chunk)
            if hasattr(dst, "flush"):
                dst.flush()
    src.close()


def _child_env() -> dict:
    """This process's environment, plus its pid for the child to end with (see the module docstring)."""
    env = os.environ.copy()
    env[LAUNCHER_PID_VAR] = str(os.getpid())
    return env


class NanobotApp:
    """A callable standing in for the Typer application of the Python nanobot."""

    def __call__(
        self,
        args: Optional[Sequence[str]] = None,
        prog_name: Optional[str] = None,
        complete_var: Optional[str] = None,
        standalone_mode: bool = True,
        **_extra: Any,
    ) -> Optional[int]:
        argv = list(sys.argv[1:] if args is None else args)
        code = self.run(argv)
        if standalone_mode:
            sys.exit(code)
        return None if code == 0 else code

    main = __call__

    def run(self, argv: Sequence[str]) -> int:
        """Runs ``nanobot argv…`` and returns its exit status (negative: killed by that signal)."""
        exe = find_nanobot_bin()
        streams = []
        for s in (sys.stdout, sys.stderr):
            if hasattr(s, "flush"):
                s.flush()
            fd = _fileno(s)
            streams.append(fd if fd is not None else subprocess.PIPE)
        stdin_fd = _fileno(sys.stdin)
        stdin_text = None
        if stdin_fd is None and sys.stdin is not None and hasattr(sys.stdin, "read"):
            data = sys.stdin.read()
            stdin_text = data.encode("utf-8") if isinstance(data, str) else data
        proc = subprocess.Popen(
            [exe, *argv],
            stdin=stdin_fd if stdin_fd is not None else (subprocess.PIPE if stdin_text else subprocess.DEVNULL),
            stdout=streams[0],
            stderr=streams[1],
            env=_child_env(),
        )
        pumps = []
        for pipe, dst in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr)):
            if pipe is not None:
                t = threading.Thread(target=_pump, args=(pipe, dst), daemon=True)
                t.start()
                pumps.append(t)
        if stdin_text and proc.stdin is not None:
            try:
                proc.stdin.write(stdin_text)
            except BrokenPipeError:
                pass
            proc.stdin.close()
        try:
            code = proc.wait()
        except BaseException:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            raise
        for t in pumps:
            t.join()
        return code


app = NanobotApp()
