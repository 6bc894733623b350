"""The replica trampoline: tie a replica's life to the worker thread that started it, then exec.

``python -I -S deathsig.py PARENT_PID COMMAND...`` sets ``PR_SET_PDEATHSIG`` to SIGKILL (Linux),
exits at once if PARENT_PID already died, and replaces itself with COMMAND (same pid, same
process group; the death signal survives exec). It runs *after* exec, so the worker, a threaded
process (uvicorn, torch and SQLite threads), runs no Python between fork and exec. Standard
library only: it runs isolated, without aifab on its path.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> None:
    """Set the death signal, check the parent, exec the command (never returns)."""
    parent, command = int(argv[1]), argv[2:]
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:  # the worker died before prctl took effect
        os.kill(os.getpid(), signal.SIGKILL)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv)
