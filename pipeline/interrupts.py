"""Signal handling that never raises inside an import (standard library only).

A ``KeyboardInterrupt`` (or any exception) raised by a signal handler while Python is importing a module
leaves that module half-initialised; libraries that import optional parts in ``try: ... except`` blocks
then carry on without them or fail later with a confusing ``ImportError`` (Beam's file systems and coders
do), and a run can even go on as if nothing was pressed. So a handler that is about to raise first asks
:func:`in_import`; when the signal came during an import it ends the process instead (:func:`exit_now`):
while modules load, a command has written nothing yet.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType


def in_import(frame: FrameType | None) -> bool:
    """Whether ``frame`` (a signal handler's) or any frame above it is running an import."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


#: Where :func:`exit_now` writes its line: the terminal's stderr. A stack, because while make-shards captures
#: its local workers' output (``beam.output.worker_stderr_captured``) fd 2 points at a temporary file and the
#: terminal is a duplicate of the original fd 2, pushed here by :func:`messages_to`.
_message_fds: list[int] = [2]


def exit_now(message: str, status: int = 130) -> None:
    """Write ``message`` (one line) to the terminal's stderr and end the process at once with ``status``."""
    os.write(_message_fds[-1], (message + "\n").encode("utf-8", "backslashreplace"))
    os._exit(status)


@contextlib.contextmanager
def messages_to(fd: int) -> Iterator[None]:
    """Within the block, :func:`exit_now` writes to ``fd`` (the terminal while fd 2 is redirected)."""
    _message_fds.append(fd)
    try:
        yield
    finally:
        _message_fds.remove(fd)


def install(handler, signals=(signal.SIGINT, signal.SIGTERM)) -> dict:
    """Install ``handler`` for ``signals`` (main thread only); returns the previous handlers."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, handler) for sig in signals}


_received = threading.Event()
_listening: list = []


def received(wait: float = 0.0) -> bool:
    """Whether SIGINT or SIGTERM arrived since :func:`listen` (read from any thread); with ``wait`` (seconds),
    wait up to that long for one that is on its way: the listening thread reads the signal a moment after it
    arrives, and another thread may see its effects first (a worker process killed by the same Ctrl-C)."""
    return _received.wait(wait) if wait > 0 else _received.is_set()


def listen(on_signal: Callable[[int], None] | None = None) -> None:
    """Note SIGINT / SIGTERM the moment they arrive, from any thread (:func:`received`), until
    :func:`stop_listening`; ``on_signal(signum)`` is then called once, on the listening thread. For work
    that runs in native code with the main thread blocked (the tokenizers trainer pulls its Python iterator
    from its own thread; Beam's runner waits on its workers): the Python handler only runs when the main
    thread is back in Python. Reads the pipe of ``signal.set_wakeup_fd``. Main thread only; a thread is
    started, so not before forking worker processes."""
    if _listening or threading.current_thread() is not threading.main_thread():
        return
    _received.clear()
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)

    def watch() -> None:
        while True:
            try:
                data = os.read(read_end, 16)
            except OSError:
                return
            if not data:
                return
            signals = [byte for byte in data if byte in (signal.SIGINT, signal.SIGTERM)]
            if signals and not _received.is_set():
                _received.set()
                if on_signal is not None:
                    on_signal(signals[0])

    threading.Thread(target=watch, daemon=True).start()
    _listening.append((previous, read_end, write_end))


def stop_listening() -> None:
    """Undo :func:`listen`."""
    while _listening:
        previous, _read_end, write_end = _listening.pop()
        signal.set_wakeup_fd(previous)
        os.close(write_end)  # the listening thread reads end-of-file and ends
