"""Signal handling that never raises inside an import (standard library only).

A ``KeyboardInterrupt`` (or any exception) raised by a signal handler while Python is importing a module
leaves that module half-initialised; libraries that import optional parts in ``try: ... except`` blocks
then carry on without them or fail later with a confusing ``ImportError`` (Beam's file systems and coders
do), and a run can even go on as if nothing was pressed. So a handler that is about to raise first asks
:func:`in_import`; when the signal came during an import it ends the process instead (:func:`exit_now`):
while modules load, a command has written nothing yet.
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType


def in_import(frame: FrameType | None) -> bool:
    """Whether ``frame`` (a signal handler's) or any frame above it is running an import."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def exit_now(message: str, status: int = 130) -> None:
    """Write ``message`` (one line) to stderr and end the process at once with ``status``."""
    import sys

    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    os._exit(status)


def install(handler, signals=(signal.SIGINT, signal.SIGTERM)) -> dict:
    """Install ``handler`` for ``signals`` (main thread only); returns the previous handlers."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, handler) for sig in signals}
