"""What Apache Beam's local runner prints while make-shards runs, made readable: its log records filtered
(:func:`keep_record`, installed by :func:`install_log_filter`) and, under ``-q``, its worker processes'
stderr captured (:func:`worker_stderr_captured`).

The local runner's worker processes send their log records to the runner over the Fn API; Beam's logging
service (``apache_beam.runners.portability.local_job_service.BeamFnLoggingServicer``, Beam 2.77) logs each
one in this process at the record's own level as ``"Worker: %s"`` with the ``beam_fn_api_pb2.LogEntry`` in
protobuf text form (``str(entry)``, newlines turned into spaces). The entry's string fields (``message``,
``trace``, ``log_location``) are read back from that form by its grammar (``name: "C-escaped string"``;
``LogEntry`` has no nested message with strings) and unescaped, so a message with quotes, newlines or
non-ASCII text comes back as it was logged; the level is the record's own. (``google.protobuf.text_format``
would parse it too, but protobuf is only Beam's dependency, not one of ours.)
"""

from __future__ import annotations

import codecs
import contextlib
import functools
import logging
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

from bertprep.pipeline import interrupts

#: The exceptions make-shards reports itself in one line (bad input, a bad vocab or option, too many shards,
#: a full disk): the tracebacks of worker bundles that failed with one of them are not shown.
USER_ERRORS = ("MakeShardsError", "InputError", "VocabError")

#: The last line of a Python traceback of one of :data:`USER_ERRORS` raised in ``bertprep.pipeline``.
_USER_ERROR_LINE = re.compile(rf"bertprep\.pipeline\.[\w.]+\.({'|'.join(USER_ERRORS)}): ")

#: ``record.msg`` of a worker's record as Beam's local logging service logs it.
WORKER_RECORD_FORMAT = "Worker: %s"

#: A string field of a protobuf message in text form: ``name: "..."`` with ``"`` and ``\\`` escaped inside.
_STRING_FIELD = re.compile(r'(\w+): "((?:[^"\\]|\\.)*)"')


def is_user_error(error: BaseException | None) -> bool:
    """Whether ``error`` (or what it was raised from) is one of :data:`USER_ERRORS` of ``bertprep.pipeline``."""
    seen = 0
    while error is not None and seen < 10:
        if type(error).__module__.startswith("bertprep.pipeline.") and type(error).__name__ in USER_ERRORS:
            return True
        error, seen = error.__cause__ or error.__context__, seen + 1
    return False


def is_user_error_traceback(text: str) -> bool:
    """Whether ``text`` is a printed Python traceback of one of :data:`USER_ERRORS` of ``bertprep.pipeline``
    (which make-shards reports in one line)."""
    return text.startswith("Traceback (most recent call last)") and bool(_USER_ERROR_LINE.search(text))


def worker_log_entry(record: logging.LogRecord) -> dict[str, str] | None:
    """The string fields (``message``, ``trace``, ``log_location``, ...) of the ``LogEntry`` a worker's record
    carries (see the module docstring), unescaped; None for a record of this process or one without a
    ``message`` field."""
    if record.msg != WORKER_RECORD_FORMAT or not isinstance(record.args, tuple) or len(record.args) != 1:
        return None
    fields = {
        name: codecs.escape_decode(value.encode("utf-8"))[0].decode("utf-8", "replace")
        for name, value in _STRING_FIELD.findall(str(record.args[0]))
    }
    return fields if "message" in fields else None


def keep_record(record: logging.LogRecord, quiet: bool = False) -> bool:
    """A ``logging`` filter: whether to show ``record``; a worker's record is shown as its bare message.

    Dropped: Beam's INFO line per string type hint of every DoFn; the traceback of an error make-shards then
    reports in one line (:data:`USER_ERRORS`), from a worker or logged by the in-process runner; the workers'
    records from Beam itself below ERROR. With ``quiet`` only warnings and errors of bertprep's own code pass
    (Beam's worker error dumps, about 200 lines, are left out: the error that ends the run is reported anyway).
    """
    text = record.getMessage()
    if text.startswith("Converting string literal type hint"):
        return False
    error = record.exc_info[1] if record.exc_info else None
    if error is not None and is_user_error(error):  # the in-process runner logs the error it then raises
        return False
    entry = worker_log_entry(record)
    if entry is None:
        if record.msg == WORKER_RECORD_FORMAT:  # a worker record without a message field: only problems pass
            return record.levelno >= logging.WARNING and not quiet
        return not ("Traceback" in text and _USER_ERROR_LINE.search(text))
    message, trace, location = entry["message"], entry.get("trace", ""), entry.get("log_location", "")
    if _USER_ERROR_LINE.search(message) or _USER_ERROR_LINE.search(trace):
        return False
    from_beam = "apache_beam" in location or "semi_persistent_directory" in message
    if quiet and (record.levelno < logging.WARNING or from_beam):
        return False
    if from_beam and record.levelno < logging.ERROR:
        return False
    record.msg, record.args = message, ()
    return True


def install_log_filter(quiet: bool = False) -> None:
    """Put :func:`keep_record` (with ``quiet``) on every handler of the root logger, replacing one an earlier
    call (an earlier command in this process, e.g. in tests) put there."""
    for handler in logging.getLogger().handlers:
        for earlier in [f for f in handler.filters if getattr(f, "func", f) is keep_record]:
            handler.removeFilter(earlier)
        handler.addFilter(functools.partial(keep_record, quiet=quiet))


def _stderr_fd(stream: Any) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None


@contextlib.contextmanager
def worker_stderr_captured(enabled: bool) -> Iterator[Callable[[], str | None]]:
    """With ``enabled`` (``-q`` on the local runner), capture what the local runner's worker processes print
    to their stderr instead of showing it. Yields ``save()``, which copies what was captured into a named
    temporary file and returns its path (None when nothing is captured); call it before the block ends.

    Beam's worker harness prints the traceback of every failed bundle straight to its stderr (about 70
    lines per failure, besides the log records it forwards), and worker processes inherit file
    descriptor 2. So fd 2 points at an unnamed temporary file while the pipeline runs (nothing is left
    behind, even if this process is killed); this process's own log handlers keep writing to the terminal
    through a duplicate of the original fd 2. Nothing changes when stderr is not a real file descriptor
    (tests) or not ``enabled``.
    """
    if not enabled or _stderr_fd(sys.stderr) != 2:
        yield lambda: None
        return
    sys.stderr.flush()
    saved = os.dup(2)
    terminal = os.fdopen(
        os.dup(saved), "w", buffering=1, encoding=sys.stderr.encoding or "utf-8", errors="backslashreplace"
    )
    handlers = [
        h for h in logging.getLogger().handlers if isinstance(h, logging.StreamHandler) and _stderr_fd(h.stream) == 2
    ]
    capture = tempfile.TemporaryFile()  # noqa: SIM115 (stderr while the caller runs; closed in the finally below)
    os.dup2(capture.fileno(), 2)
    previous = [h.setStream(terminal) for h in handlers]

    def save() -> str:
        capture.seek(0)
        with tempfile.NamedTemporaryFile(prefix="bertprep-workers-", suffix=".log", delete=False) as kept:
            shutil.copyfileobj(capture, kept)
        return kept.name

    try:
        with interrupts.messages_to(saved):  # a stopped run's one line reaches the terminal, not the capture
            yield save
    finally:
        for handler, stream in zip(handlers, previous, strict=True):
            handler.setStream(stream)
        terminal.close()
        os.dup2(saved, 2)
        os.close(saved)
        capture.close()


__all__ = [
    "USER_ERRORS",
    "install_log_filter",
    "is_user_error",
    "is_user_error_traceback",
    "keep_record",
    "worker_log_entry",
    "worker_stderr_captured",
]
