"""Start ``make-shards`` from a command line: options -> :class:`ShardsConfig`, processes, logs, then run.

``cli/make_shards.py`` parses options and calls two functions here:

- :func:`shards_config` turns the command's options (a dict keyed by ``InstanceConfig`` / ``ShardsConfig``
  field names, plus ``input_files``) into the config, loading the vocab once to settle the casing. Bad
  values raise :class:`OptionError`, which names the option.
- :func:`session` starts what a local run needs before Beam is imported (the local runner's worker
  processes, ``warm_workers.py``), sets up logging (Beam's local-runner records made readable, ``output.py``),
  and yields a :class:`Session` whose :meth:`Session.run` runs ``run.run_make_shards`` with the workers'
  stderr captured under ``-q``. Leaving the ``with`` block stops the workers, on success and on error.

This module imports neither Beam nor the pipeline graph at import time: worker processes forked before
Beam's ~2,000 modules are loaded start in milliseconds.
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
from collections.abc import Iterator, Mapping, Sequence

from bertprep.pipeline import interrupts
from bertprep.pipeline.beam.output import install_log_filter, worker_stderr_captured
from bertprep.pipeline.config import InstanceConfig, ShardsConfig, Source

log = logging.getLogger("bertprep")

#: Seconds a stopping run gets to wind down after the first Ctrl-C / SIGTERM before it is ended at once.
STOP_GRACE_S = 10.0
#: Exit status of a run stopped by SIGINT or SIGTERM (128 + SIGINT, as shells report Ctrl-C).
INTERRUPTED_STATUS = 130

#: Staging folders of runs under way in this process (``run.py`` adds and removes them): what an abort deletes.
ACTIVE_STAGING: set[str] = set()


class Interrupted(KeyboardInterrupt):
    """make-shards was stopped by SIGINT or SIGTERM; ``str()`` is the one line to show."""


def _children(pid: int) -> list[int]:
    """Process ids of the live children of ``pid`` (Linux ``/proc``; empty elsewhere)."""
    out = []
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


def _in_gc_callback(frame) -> bool:
    """Whether ``frame`` runs in a garbage-collector callback (distributed's ``GCDiagnosis`` has one: a local Dask
    cluster's scheduler runs in this process). Python prints an exception raised there as "Exception ignored"
    with its traceback, and goes on: the run then ended only by the watchdog, 10 s later."""
    codes = {getattr(getattr(cb, "__func__", cb), "__code__", None) for cb in gc.callbacks}
    while frame is not None:
        if frame.f_code in codes:
            return True
        frame = frame.f_back
    return False


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
        weakref or garbage-collector callback): deliver the same signal again, soon, instead of printing it."""
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
        self._previous = {}
        interrupts.stop_listening()

    def _handle(self, signum, frame) -> None:
        # imports nothing: a handler that imports, run while the main thread is half-way through importing a
        # package, fails inside that import and leaves it half-initialised
        publish = sys.modules.get("bertprep.pipeline.shards.publish")
        name = signal.Signals(signum).name
        if _in_gc_callback(frame) and self.received is None:  # an exception there is printed and dropped
            threading.Timer(0.05, os.kill, (os.getpid(), signum)).start()  # so: the same signal again, soon
            return
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
        if not getattr(publish, "publishing", lambda: False)():
            for path in list(ACTIVE_STAGING):
                shutil.rmtree(path, ignore_errors=True)
        getattr(publish, "release_locks", lambda: None)()
        _kill_children()
        interrupts.exit_now(f"make-shards stopped by {name}: nothing was published", INTERRUPTED_STATUS)


_INSTANCE_FIELDS = {f.name for f in dataclasses.fields(InstanceConfig)}
_SHARDS_FIELDS = {f.name for f in dataclasses.fields(ShardsConfig)} - {"instance", "inputs"}


class OptionError(ValueError):
    """A bad option value. ``option`` is the option it is about (``--vocab``), or None for several."""

    def __init__(self, message: str, option: str | None = None):
        super().__init__(message)
        self.option = option


def split_inputs(values: Sequence[str]) -> tuple[str, ...]:
    """``-i`` values -> input patterns: each value may hold several, comma-separated."""
    return tuple(p.strip() for value in values for p in value.split(",") if p.strip())


def parse_source(value: str) -> Source:
    """``NAME=GLOBS[:WEIGHT]`` -> :class:`Source` (a trailing ``:number`` is the weight; globs may hold ``:``,
    as in ``gs://``)."""
    name, sep, rest = value.partition("=")
    if not sep or not name.strip() or not rest.strip():
        raise OptionError(f"expected NAME=GLOBS[:WEIGHT], e.g. wiki='wiki/*':2.0, got {value!r}", "--source")
    weight = 1.0
    head, colon, tail = rest.rpartition(":")
    if colon:
        try:
            weight = float(tail)
            rest = head
        except ValueError:
            pass  # a ':' of the globs
    try:
        return Source(name.strip(), split_inputs([rest]), weight)
    except ValueError as err:
        raise OptionError(str(err), "--source") from err


_MIXTURE_KEYS = ("sources", "temperature_alpha")
_SOURCE_KEYS = ("name", "inputs", "weight")


def _check_mixture_keys(path: str, spec) -> None:
    """Refuse a --mixture file with a key it does not define (a top-level "weights", a "wieght" typo were
    ignored) or no source (``{"sources": []}`` made shards of the bundled demo corpus)."""
    import difflib

    def refuse(where: str, key: str, allowed: tuple) -> None:
        close = difflib.get_close_matches(key, allowed, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise OptionError(f"{path}: unknown key {key!r} {where}; {hint}the keys are {', '.join(allowed)}", "--mixture")

    if not isinstance(spec, dict):
        return  # (the caller's message: expected {"sources": [...]})
    for key in spec:
        if key not in _MIXTURE_KEYS:
            refuse("at the top level", key, _MIXTURE_KEYS)
    if isinstance(spec.get("sources"), list) and not spec["sources"]:
        raise OptionError(f'{path}: "sources" is empty; list at least one source (name, inputs, weight)', "--mixture")
    for i, item in enumerate(spec.get("sources") or ()):
        for key in item if isinstance(item, dict) else ():
            if key not in _SOURCE_KEYS:
                refuse(f"in source {i + 1} ({item.get('name', '?')!r})", key, _SOURCE_KEYS)


def mixture_sources(options: Mapping) -> tuple[tuple, float | None]:
    """The sources and temperature of ``--source`` / ``--mixture`` / ``--mixture-alpha`` (``((), None)`` without)."""
    alpha = options.get("mixture_alpha")
    if options.get("mixture") and options.get("sources"):
        raise OptionError("give sources with --source or --mixture, not both", "--mixture")
    if options.get("mixture"):
        import json

        path = options["mixture"]
        try:
            with open(path, encoding="utf-8") as f:
                spec = json.load(f)
            _check_mixture_keys(path, spec)
            sources = []
            for item in spec["sources"]:
                inputs = item["inputs"]
                inputs = split_inputs([inputs] if isinstance(inputs, str) else inputs)
                sources.append(Source(str(item["name"]), inputs, float(item.get("weight", 1.0))))
        except OptionError:
            raise
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise OptionError(
                f'{path}: expected {{"sources": [{{"name", "inputs", "weight"}}], '
                f'"temperature_alpha": optional}}: {err}',
                "--mixture",
            ) from err
        if alpha is None and spec.get("temperature_alpha") is not None:
            alpha = float(spec["temperature_alpha"])
        return tuple(sources), alpha
    return tuple(parse_source(v) for v in options.get("sources") or ()), alpha


def shards_config(options: Mapping, explicit: frozenset[str] = frozenset()) -> tuple[ShardsConfig, object, list]:
    """The ``ShardsConfig`` of a command line, the loaded vocab, and the warnings to show.

    ``options``: ``input_files`` (the ``-i`` values) and any ``InstanceConfig`` / ``ShardsConfig`` field by
    name. ``explicit``: the names of the options the user gave (the others are defaults), for warnings
    about options that have no effect. With no input the bundled demo corpus is read (a warning says so).

    Raises:
        OptionError: a value the configs refuse, a word segmenter that cannot be loaded, a vocab that
            cannot be used or that contradicts ``--do-lower-case`` / ``--strip-accents``.
    """
    from bertprep.pipeline.text.tokenization import (
        VocabError,
        check_tokenizer_options,
        load_vocab,
        resolve_text_settings,
    )

    try:
        instance = InstanceConfig(**{k: v for k, v in options.items() if k in _INSTANCE_FIELDS})
    except ValueError as err:
        raise OptionError(str(err)) from err
    if options.get("word_segmenter"):
        from bertprep.pipeline.text.word_segmentation import WordSegmenterError, load_word_segmenter

        try:
            load_word_segmenter(options["word_segmenter"])  # fail here, before any worker starts
        except WordSegmenterError as err:
            raise OptionError(str(err), "--word-segmenter") from err
    try:
        vocab = load_vocab(options["vocab"])
    except VocabError as err:
        raise OptionError(str(err), "--vocab") from err
    try:
        do_lower_case, strip_accents, warnings = resolve_text_settings(
            vocab, options.get("do_lower_case"), options.get("strip_accents")
        )
        check_tokenizer_options(vocab, instance.effective_masking_scheme, options.get("word_segmenter"))
    except VocabError as err:  # an option contradicts what the tokenizer.json records
        raise OptionError(str(err), err.option or "--vocab") from err
    warnings = list(warnings)
    _refuse_a_guessed_normalization(vocab, do_lower_case, strip_accents, warnings, explicit)
    if instance.objective == "none" and "short_seq_prob" in explicit:
        warnings.append("--short-seq-prob is not used with --objective none (every row is filled to --max-seq-length)")
    warnings += _options_without_effect(instance, options, explicit)
    inputs = split_inputs(options.get("input_files") or ())
    sources, mixture_alpha = mixture_sources(options)
    if sources and inputs:
        raise OptionError("give inputs with -i or with --source/--mixture, not both (a source names its own globs)")
    inputs = inputs or tuple(p for source in sources for p in source.inputs)
    if not inputs:
        from bertprep.pipeline import demo_corpus_dir

        inputs = (demo_corpus_dir(),)
        warnings.append(f"No -i/--input given: using the bundled demo corpus {inputs[0]}")
    settings = {k: v for k, v in options.items() if k in _SHARDS_FIELDS}
    settings.update(do_lower_case=do_lower_case, strip_accents=strip_accents)
    settings.update(sources=sources, mixture_alpha=mixture_alpha)
    settings["decontaminate"] = split_inputs(options.get("decontaminate") or ())
    try:
        config = ShardsConfig(inputs=inputs, instance=instance, **settings)
    except ValueError as err:
        raise OptionError(str(err)) from err
    return config, vocab, warnings


def _refuse_a_guessed_normalization(vocab, do_lower_case: bool, strip_accents, warnings: list, explicit) -> None:
    """Refuse a vocab.txt alone (no tokenizer.json records how it was built) whose entries contradict the
    default casing or accent stripping, unless the user gave them: a syllable vocab copied without its
    tokenizer.json was warned about and then made shards of 77% [UNK]. (A consistent setting that is only
    poor for a script, a jamo vocab with stripping, stays a warning.)"""
    from bertprep.pipeline.normalization import resolve_strip_accents, vocab_strip_accents

    if vocab.do_lower_case is not None or explicit & {"do_lower_case", "strip_accents"}:
        return
    built_stripped = vocab_strip_accents(vocab.tokens)
    casing = vocab.looks_cased() and do_lower_case
    stripping = built_stripped is not None and built_stripped != resolve_strip_accents(strip_accents, do_lower_case)
    if casing or stripping:
        raise OptionError(
            f"{'; '.join(warnings)}. {vocab.source} alone does not record how it was built (no tokenizer.json "
            "beside it), so make-shards does not run on a guess: give the option (or the default's own flag to "
            "keep it)",
            "--vocab",
        )


def _options_without_effect(instance: InstanceConfig, options: Mapping, explicit: frozenset[str]) -> list[str]:
    """Warnings for options given that change nothing here, and for a --max-predictions-per-seq that caps the
    masking below --masked-lm-prob (0.3 at 128 tokens with the default 20 masked 15.8%, without a word)."""
    out = []
    if options.get("dedup") != "minhash":
        for name in sorted(explicit & {"dedup_threshold", "dedup_ngram"}):
            flag = "--" + name.replace("_", "-")
            out.append(f"{flag} is used by --dedup minhash only; with --dedup {options.get('dedup')} it has no effect")
    pieces = instance.max_seq_length - 3  # a full instance's word pieces ([CLS] and two [SEP] are never masked)
    wanted = round(pieces * instance.masked_lm_prob)
    if wanted > instance.max_predictions_per_seq:
        out.append(
            f"--max-predictions-per-seq {instance.max_predictions_per_seq} caps the masked word pieces of a full "
            f"instance at {instance.max_predictions_per_seq / pieces:.1%}, below --masked-lm-prob "
            f"{instance.masked_lm_prob}; raise it to about {wanted} (max_seq_length x masked_lm_prob: the original "
            "uses 20 at 128 tokens, 76-80 at 512)"
        )
    return out


@dataclasses.dataclass
class Session:
    """One make-shards run's processes and logging; made by :func:`session`."""

    quiet: bool
    local: bool
    workers: object | None = None
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
