"""The lock a ``train`` or ``finetune`` run holds on its run directory (``atomic.directory_lock``, the one
make-shards holds on its output): a second run into the same ``--output-dir`` is refused naming the first."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import click

from bertprep.core import atomic


@contextlib.contextmanager
def run_directory_lock(output_dir: str, command: str, own_files: tuple[str, ...] = ()) -> Iterator[None]:
    """Hold ``output_dir``'s lock for the command's run; one process per run takes it (under torchrun rank 0,
    whose pid the lock names: the other ranks write nothing there). A directory the lock created and the run
    left empty, or holding only ``own_files`` (what the command writes before its run starts, as train's
    ``config.toml``: a run refused before its first step), is removed, so that no folder looks like a run.

    Raises:
        click.ClickException: another live run holds ``output_dir`` (its command, pid, host and start are
            named), or ``output_dir`` cannot be created.
    """
    if int(os.environ.get("RANK", "0") or 0) != 0:
        yield
        return
    created = not os.path.exists(output_dir)
    try:
        with atomic.directory_lock(output_dir, command=command):
            yield
    except atomic.LockError as err:
        raise click.ClickException(str(err)) from None
    finally:
        if created and os.path.isdir(output_dir) and set(os.listdir(output_dir)) <= set(own_files):
            for name in os.listdir(output_dir):
                os.remove(os.path.join(output_dir, name))
            os.rmdir(output_dir)
