"""The one rule every command that writes follows: what it writes must not be, or lie inside, what it reads.

A command that wrote over its own input would lose it (``extract-features --output`` naming the weights it is
reading, ``predict`` putting its side file ``X.null_odds.json`` over an input of that name, ``export`` into the
model's own directory). :func:`check_writes_apart` refuses such a run before anything is read or written, with
one line naming both options. Standard library only: ``build-vocab`` and ``make-shards`` (no torch) use it as
the torch commands do.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from bertprep.core import urls


class WriteOverReadError(ValueError):
    """A path a command would write is, or lies inside, a path it reads; ``option`` names the output option."""

    def __init__(self, message: str, option: str):
        super().__init__(message)
        self.option = option


#: URL schemes no bertprep reader fetches (Beam's FileSystems has none for them).
_WEB_SCHEMES = ("http://", "https://", "ftp://")


def web_url_message(path: str, what: str, *, gs_ok: bool = False) -> str | None:
    """The message refusing a web URL given where a file is read (``what``: e.g. ``"--vocab"``), else None:
    nothing downloads it, and Beam's "Unable to get filesystem" traceback did not say so. ``gs_ok``: the
    option reads through Beam's FileSystems, so a gs:// path is an alternative."""
    if not path.lower().startswith(_WEB_SCHEMES):
        return None
    name = path.rstrip("/").rsplit("/", 1)[-1] or "the file"
    return (
        f"{what} {path}: URLs are not supported; download it first (e.g. curl -fLO {path}) and pass the local "
        f"file ({name}){', or a gs:// path' if gs_ok else ''}"
    )


def path_is_within(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or lies under it, after resolving symbolic links and ``..``."""
    path, root = os.path.realpath(path), os.path.realpath(root)
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def check_writes_apart(
    writes: Iterable[tuple[str, str | None]], reads: Iterable[tuple[str, str | None]], *, command: str
) -> None:
    """Refuse a run whose outputs would replace its inputs.

    Args:
        writes: ``(option, path)`` for every path the command writes, side files included (named with the
            option that makes them, e.g. ``("--output", "preds.null_odds.json")``); a directory the command
            replaces as a whole is given as the directory, one it only adds files to as those files.
        reads: ``(option, path)`` for every file or directory it reads. ``None`` entries and URLs
            (``gs://...``) are skipped on both sides.
        command: the command's name, for the message.
    Raises:
        WriteOverReadError: a written path is a read path, lies inside one (a file of the model directory), or
            holds one (a directory replaced with the input in it).
    """
    local_reads = [(option, path) for option, path in reads if path and not urls.is_remote(path)]
    for w_option, written in writes:
        if not written or urls.is_remote(written):
            continue
        for r_option, read in local_reads:
            if path_is_within(written, read):
                where = "is" if os.path.realpath(written) == os.path.realpath(read) else "lies inside"
            elif path_is_within(read, written):
                where = "holds"
            else:
                continue
            raise WriteOverReadError(
                f"{command} would write {written}, which {where} {r_option} {read}: that would replace what it "
                f"reads; choose a {w_option} outside {read}",
                w_option,
            )


#: What ``bertprep train`` and ``bertprep finetune`` write in a run directory: the record of the run (with the
#: names starting with ``_RUN_RECORD_PREFIXES``).
RUN_RECORD_NAMES = ("best", "checkpoints", "metrics.jsonl", "metrics.png", "results.json")
_RUN_RECORD_PREFIXES = ("eval_predictions.", ".tmp-run-", ".old-run-")


def run_directory_of(model_dir: str) -> str | None:
    """The run directory a model directory belongs to: ``RUN`` for ``RUN/best`` (``finetune``),
    ``RUN/checkpoints/step-N`` or ``RUN/checkpoints`` (``train``) and for ``RUN`` itself, when ``RUN`` holds a
    run's record (``results.json``, ``metrics.jsonl`` or ``checkpoints/``); None for any other directory (an
    export, a Hugging Face download)."""
    path = os.path.realpath(model_dir)
    parent = os.path.dirname(path)
    if os.path.basename(path) in ("best", "checkpoints"):
        path = parent
    elif os.path.basename(parent) == "checkpoints" and os.path.basename(path).startswith("step-"):
        path = os.path.dirname(parent)
    if any(os.path.exists(os.path.join(path, name)) for name in ("results.json", "metrics.jsonl", "checkpoints")):
        return path
    return None


def check_not_run_record(
    writes: Iterable[tuple[str, str | None]], model_option: str, model_dir: str | None, *, command: str
) -> None:
    """Refuse a run that would write over the record of the run its model comes from: ``predict -m FT1/best -o
    FT1/results.json`` replaced the fine-tuning run's results with predictions, a file the user did not write
    and that ``check_writes_apart`` (the model directory ``FT1/best`` only) let through. A new file in the run
    directory is accepted.

    Raises:
        WriteOverReadError: a written path is, or lies inside, one of the run's files (``RUN_RECORD_NAMES``,
            ``eval_predictions.*``).
    """
    run = run_directory_of(model_dir) if model_dir and not urls.is_remote(model_dir) else None
    if run is None:
        return
    for option, written in writes:
        if not written or urls.is_remote(written) or not path_is_within(written, run):
            continue
        name = os.path.relpath(os.path.realpath(written), run).split(os.sep)[0]
        if name in RUN_RECORD_NAMES or name.startswith(_RUN_RECORD_PREFIXES):
            raise WriteOverReadError(
                f"{command} would write {written}, part of the record of the run {run} that {model_option} "
                f"{model_dir} comes from: that would replace it; choose a {option} that is none of the run's "
                "files (best/, checkpoints/, results.json, metrics.jsonl, metrics.png, eval_predictions.*)",
                option,
            )


__all__ = [
    "RUN_RECORD_NAMES",
    "WriteOverReadError",
    "check_not_run_record",
    "check_writes_apart",
    "path_is_within",
    "run_directory_of",
    "web_url_message",
]
