"""One ``make-shards`` run's session: worker processes, logs and Ctrl-C around :func:`run.run_make_shards`.

:func:`session` starts what a local run needs before Beam is imported (the local runner's worker processes,
``warm_workers.py``), sets up logging (Beam's local-runner records made readable, ``output.py``) and the
handling of SIGINT / SIGTERM (:class:`Interrupted`, exit status :data:`INTERRUPTED_STATUS`), and yields a
:class:`Session` whose :meth:`Session.run` runs ``run.run_make_shards`` with the workers' stderr captured
under ``-q``. Leaving the ``with`` block stops the workers, on success and on error.

The command line (options -> ``ShardsConfig``, checks of the Beam arguments, messages) is ``cli/make_shards.py``'s
and ``cli/shards_options.py``'s; this module knows no option names. It imports neither Beam nor the pipeline
graph at import time: worker processes forked before Beam's ~2,000 modules are loaded start in milliseconds.
``run.py`` never imports it (the staging folders an abort deletes are ``run.ACTIVE_STAGING``, read here
through ``sys.modules`` like ``publish``'s state).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import gc
import logging
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from bertprep.pipeline import interrupts
from bertprep.pipeline.beam.output import install_log_filter, worker_stderr_captured
from bertprep.pipeline.config import ShardsConfig

if TYPE_CHECKING:  # imported where the workers start (session), as Beam-free as this module is
    from bertprep.pipeline.beam.warm_workers import WarmWorkerPool

log = logging.getLogger("bertprep")

#: Seconds a stopping run gets to wind down after the first Ctrl-C / SIGTERM before it is ended at once.
STOP_GRACE_S = 10.0
#: Seconds a thread's uncaught exception waits, while a run listens for signals, before it is printed: if
#: a stop signal was received meanwhile, the exception was its effect (see ``_StopOnSignal.listen``).
STOP_NOTICE_S = 2.0
#: Exit status of a run stopped by SIGINT or SIGTERM (128 + SIGINT, as shells report Ctrl-C).
INTERRUPTED_STATUS = 130


class Interrupted(KeyboardInterrupt):
    """make-shards was stopped by SIGINT or SIGTERM; ``str()`` is the one line to show."""

    #: Beam's in-process runner re-raises an exception from a DoFn as a new one of its type whose message ends
    #: in " [while running 'STEP']", and logs it with its traceback, unless it carries this flag
    #: (``apache_beam.runners.common.DoFnRunner._reraise_augmented``): a small input runs in process, and its
    #: Ctrl-C must read as the workers' does.
    _tagged_with_step = True


def _children(pid: int) -> list[int]:
    """Process ids of the live children of ``pid`` (Linux ``/proc``; empty elsewhere)."""
    out: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(entry))
    return out


def _kill_children() -> None:
    """SIGKILL every descendant of this process (Beam's worker processes, the pool's, their helpers), except
    multiprocessing's resource tracker: killed, it is started again by the next shared-memory release (a local
    Dask cluster's), which then prints a KeyError traceback for each name the new one never saw."""
    tracker = sys.modules.get("multiprocessing.resource_tracker")
    spared = getattr(getattr(tracker, "_resource_tracker", None), "_pid", None)
    pending, seen = [os.getpid()], []
    while pending:
        kids = [pid for pid in _children(pending.pop()) if pid != spared]
        seen.extend(kids)
        pending.extend(kids)
    for pid in seen:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _silence() -> None:
    """What Beam's threads log and raise while a stopped run's workers go is not for users."""
    logging.disable(logging.CRITICAL)
    threading.excepthook = lambda args: None


class _StopOnSignal:
    """SIGINT / SIGTERM handling for one run: the first stops it within seconds, the second at once.

    First signal: Beam's and the workers' own logs are silenced (what they print while
    their processes are being stopped is noise); the worker processes are killed, so Beam's waits for them
    end, and :class:`Interrupted` is raised in the main thread, which deletes the staging folder on its way
    out (``run.py``). A watchdog ends the process after :data:`STOP_GRACE_S` if Beam does not return.
    While a run publishes its files (``publish.publishing``) the interruption waits: the publish is journalled
    and finishes in well under a second. Second signal (or the watchdog): staging folders deleted (except
    during a publish, which the next run then finishes), workers killed, exit status 130 at once.
    """

    def __init__(self):
        self.received: str | None = None
        self._previous = {}

    def install(self) -> None:
        self._previous = interrupts.install(self._handle)
        if self._previous:
            self._unraisablehook, sys.unraisablehook = sys.unraisablehook, self._dropped

    def _dropped(self, unraisable) -> None:
        """``sys.unraisablehook`` while installed: the stop was raised where Python prints an exception as
        "Exception ignored" and goes on (an at-fork hook such as logging's ``_releaseLock``, a ``__del__``, a
        weakref or garbage-collector callback: distributed's ``GCDiagnosis`` in a local Dask cluster's scheduler,
        which ran here; the run then ended only by the watchdog, 10 s later): deliver the same signal again,
        soon, instead of printing it."""
        if isinstance(unraisable.exc_value, Interrupted) and self.received is not None:
            signum, self.received = signal.Signals[self.received], None
            threading.Timer(0.05, os.kill, (os.getpid(), signum)).start()
            return
        self._unraisablehook(unraisable)

    def listen(self) -> None:
        """Also hear the signal the moment it arrives, not only when the main thread next runs Python code
        (``interrupts.listen``). Call it after the local workers are forked: forking needs one thread."""
        if self._previous:
            interrupts.listen(self._on_signal)
            self._excepthook, threading.excepthook = threading.excepthook, self._thread_exception

    def _thread_exception(self, args) -> None:
        """``threading.excepthook`` while listening. A Ctrl-C reaches the whole process group: a local worker
        dies of it and Beam's thread that waits on the worker raises ("Worker subprocess exited with return
        code -2") before the listening thread has read the signal and silenced Beam. So an uncaught exception
        in a thread waits up to :data:`STOP_NOTICE_S` for a stop signal; if one came, it is the stop's
        effect and is not printed; otherwise it is printed as Python would (a real failure, shown late)."""
        if not interrupts.received(wait=STOP_NOTICE_S):
            self._excepthook(args)

    def _on_signal(self, signum: int) -> None:
        """On the listening thread, at once: silence Beam (the workers, signalled with the same Ctrl-C, die
        and Beam logs their failure before the main thread can run the handler); kill the workers, so that
        Beam's waits for them end; start the watchdog, in case the main thread still does not return."""
        _silence()
        publish = sys.modules.get("bertprep.pipeline.shards.publish")
        if not getattr(publish, "publishing", lambda: False)():
            _kill_children()
        self._watchdog_name = signal.Signals(signum).name
        threading.Thread(target=self._watchdog, daemon=True).start()

    def uninstall(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        if self._previous and sys.unraisablehook == self._dropped:
            sys.unraisablehook = self._unraisablehook
        if threading.excepthook == self._thread_exception:
            threading.excepthook = self._excepthook
        self._previous = {}
        interrupts.stop_listening()

    def _handle(self, signum, frame) -> None:
        # imports nothing: a handler that imports, run while the main thread is half-way through importing a
        # package, fails inside that import and leaves it half-initialised
        publish = sys.modules.get("bertprep.pipeline.shards.publish")
        name = signal.Signals(signum).name
        if self.received is not None or interrupts.in_import(frame):  # second signal; or raising in an import
            self._abort(name)
        self.received = name
        threading.Thread(target=self._watchdog, daemon=True).start()
        if getattr(publish, "publishing", lambda: False)():
            return  # the journalled publish finishes first; the run then ends normally
        _silence()
        _kill_children()
        raise Interrupted(
            f"make-shards stopped by {name}: nothing was published, the output directory is as it was; "
            "run it again to make the shards"
        )

    def _watchdog(self) -> None:
        time.sleep(STOP_GRACE_S)
        self._abort(self.received or getattr(self, "_watchdog_name", "a signal"))

    def _abort(self, name: str | None) -> None:
        publish = sys.modules.get("bertprep.pipeline.shards.publish")
        run = sys.modules.get("bertprep.pipeline.beam.run")
        if not getattr(publish, "publishing", lambda: False)():
            for path in list(getattr(run, "ACTIVE_STAGING", ())):
                shutil.rmtree(path, ignore_errors=True)
        getattr(publish, "release_locks", lambda: None)()
        _kill_children()
        interrupts.exit_now(f"make-shards stopped by {name}: nothing was published", INTERRUPTED_STATUS)


@dataclasses.dataclass
class Session:
    """One make-shards run's processes and logging; made by :func:`session`."""

    quiet: bool
    local: bool
    workers: WarmWorkerPool | None = None
    kept_log: str | None = None
    """Where the local workers' output was kept after an unexpected failure under ``-q``, else None."""

    def run(self, config: ShardsConfig, beam_args: Sequence[str], vocab=None) -> dict:
        """``run.run_make_shards`` with the local workers' stderr captured under ``-q``; its errors as they are.

        After an unexpected failure (not a user error) under ``-q`` the workers' output is kept in a file,
        named by :attr:`kept_log`.
        """
        from bertprep.pipeline.beam.run import run_make_shards

        with worker_stderr_captured(self.quiet and self.local) as save_worker_output:
            try:
                return run_make_shards(config, beam_args, vocab=vocab, workers=self.workers)
            except BaseException as err:  # Ctrl-C included
                from bertprep.pipeline.beam.output import is_user_error

                if not is_user_error(err) and not isinstance(err, KeyboardInterrupt):
                    self.kept_log = save_worker_output()
                raise


@contextlib.contextmanager
def session(beam_args: Sequence[str], quiet: bool = False) -> Iterator[Session]:
    """Processes and logging for one make-shards run; the workers stop when the block ends.

    With no Beam arguments (the local runner on every core) the worker processes are forked first, before
    Beam is imported. Logging goes to stderr (warnings only under ``quiet``); the local runner's own INFO
    records (gRPC servers, harness start and stop) are hidden, but a remote runner's stay (Dataflow's carry
    the job's console URL).
    """
    # Python's last garbage collection at exit walks every object of Beam's ~2,000 modules: 0.3-3 s of a run,
    # to free memory the OS frees anyway. Frozen objects are skipped.
    atexit.register(gc.freeze)
    local = not any(arg.startswith("--runner") for arg in beam_args)
    current = Session(quiet=quiet, local=local)
    stop = _StopOnSignal()
    stop.install()
    if not beam_args:  # the local runner on every core: its worker processes are forked now (warm_workers.py)
        from bertprep.pipeline.beam import warm_workers

        current.workers = warm_workers.start(os.cpu_count() or 1)
    stop.listen()
    try:
        logging.basicConfig(
            level=logging.WARNING if quiet else logging.INFO,
            format="%(asctime)s %(levelname)s %(message)s",
            stream=sys.stderr,
        )
        install_log_filter(quiet)
        # Dask's own INFO (scheduler and worker start and stop) is not for users; its warnings are
        logging.getLogger("distributed").setLevel(logging.WARNING)
        if local:
            logging.getLogger("apache_beam").setLevel(logging.WARNING)
            logging.getLogger("apache_beam.runners.portability.local_job_service").setLevel(logging.INFO)
        yield current
    finally:
        if current.workers is not None:
            current.workers.close()
        stop.uninstall()
