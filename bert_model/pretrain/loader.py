"""``ShardLoader``: the ``DataLoader`` over a ``ShardDataset`` that keeps the data cursor, and its workers' lifecycle.

The cursor is ``data.py``'s (one state per stream rides with each batch); this module keeps the states of
the batches the training process consumed, resumes them (same ``world_size`` and ``num_workers``: exactly,
else from the saved epoch's start), and makes sure loader workers never outlive the training process
(``PR_SET_PDEATHSIG`` on Linux, a parent watchdog elsewhere, SIGKILL for stragglers at exit).
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import logging
import os
import signal
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader

from bertprep.bert_model.pretrain.data import CURSOR_FORMAT, ShardDataset, ShardReadError, _StreamError

logger = logging.getLogger("bertprep.bert_model.pretrain.data")


def _as_is(item):
    return item


#: Seconds between the loader workers' checks that the training process is still alive (the fallback where
#: ``PR_SET_PDEATHSIG`` is not available).
PARENT_CHECK_INTERVAL_S = 1.0

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with_parent(parent_pid: int) -> None:
    """Make this process die as soon as ``parent_pid`` (its parent) does, however the parent dies.

    On Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` has the kernel kill this process when the thread that
    created it exits, SIGKILL of the parent included. Everywhere (and as a fallback) a daemon thread checks
    ``os.getppid()`` every ``PARENT_CHECK_INTERVAL_S`` and ends the process with ``os._exit`` once the parent
    is gone: a worker must never wait for a parent that will not read its queue (the orphaned workers of a
    killed trainer otherwise block for ever in a futex, each holding its memory).
    """
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):  # no prctl (an unusual libc): the watchdog below still works
            pass
    if os.getppid() != parent_pid:  # the parent died before the death signal was armed
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(PARENT_CHECK_INTERVAL_S)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, name="bertprep-parent-watchdog", daemon=True).start()


def _init_loader_worker(parent_pid: int, worker_id: int) -> None:
    """``worker_init_fn`` of the loader workers.

    * They die with the training process (``_die_with_parent``), however it dies.
    * They leave SIGINT / SIGTERM to the training process, which stops after the current step and checkpoints
      the cursor (a worker killed first by a signal sent to the whole process group would fail that step).
      The training process ends them itself (``ShardLoader`` closes its workers, and kills any that are
      still alive, when iteration ends, fails or the process exits).
    """
    _die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


#: Worker processes of the loaders of this process that may still run (see ``_kill_live_workers``).
_LIVE_WORKERS: weakref.WeakSet = weakref.WeakSet()


def _kill_live_workers() -> None:
    """At exit: SIGKILL the loader workers still alive. Registered after ``multiprocessing`` imported, so it
    runs before multiprocessing's own exit handler, which would send them SIGTERM (ignored, see
    ``_init_loader_worker``) and then wait for them for ever. PyTorch's iterator does not shut its workers down
    once the interpreter is exiting, e.g. after an uncaught exception in the training loop."""
    for process in list(_LIVE_WORKERS):
        try:
            if process.is_alive():
                process.kill()
                process.join(timeout=5)
        except (OSError, ValueError, AssertionError):  # already reaped, or not our child
            pass


atexit.register(_kill_live_workers)


def _close_loader_iterator(iterator: Any) -> None:
    """Stop the workers of a ``DataLoader`` iterator now: PyTorch's orderly shutdown, then SIGKILL for any
    worker that did not exit (they ignore the SIGTERM that PyTorch's shutdown falls back to)."""
    workers = list(getattr(iterator, "_workers", ()))
    shutdown = getattr(iterator, "_shutdown_workers", None)
    try:
        if shutdown is not None:
            shutdown()
    finally:
        for process in workers:
            if process.is_alive():
                process.kill()
                process.join(timeout=5)
            _LIVE_WORKERS.discard(process)


class ShardLoader:
    """A ``DataLoader`` over a ``ShardDataset`` that keeps the data cursor (see the module docstring).

    Iterating yields batches (dicts of tensors). ``state_dict()`` returns the cursor as of the batches
    yielded so far (JSON values); ``load_state_dict()`` before iterating makes the next iteration continue
    from it.

    Worker processes live as long as one iteration: they are shut down when it ends, when it raises, or when
    the caller closes the generator (``batches.close()``; the trainer does it in a ``finally``), and killed
    if they do not exit. They also die with the process that created them, however it dies
    (``_die_with_parent``).
    """

    def __init__(
        self, dataset: ShardDataset, *, num_workers: int = 0, pin_memory: bool = False, prefetch_factor: int = 2
    ):
        if max(1, num_workers) != dataset.num_logical_workers:
            raise ValueError("ShardLoader num_workers differs from the ShardDataset's num_workers")
        self.dataset = dataset
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.prefetch_factor = prefetch_factor
        self._streams: dict[int, dict[str, Any]] = {}
        self._batches = 0

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        self.dataset.start_states = dict(self._streams)
        self.dataset.worker_offset = self._batches % self.dataset.num_logical_workers
        loader = DataLoader(
            self.dataset,
            batch_size=None,
            num_workers=self.num_workers,
            prefetch_factor=self.prefetch_factor if self.num_workers else None,
            persistent_workers=False,
            collate_fn=_as_is,  # batches are collated already; default_convert would walk the cursor lists
            worker_init_fn=functools.partial(_init_loader_worker, os.getpid()),
            # The loader draws a base seed from this generator, not from torch's global RNG (dropout),
            # so the number of loaders created does not change training randomness.
            generator=torch.Generator().manual_seed(self.dataset.seed),
        )
        iterator = iter(loader)
        _LIVE_WORKERS.update(getattr(iterator, "_workers", ()))
        try:
            for arrays, state in iterator:
                if isinstance(arrays, _StreamError):
                    raise (ShardReadError if arrays.shard_read else ValueError)(arrays.message)
                self._streams[state["stream"]] = state
                self._batches += 1
                batch = {k: torch.from_numpy(v) for k, v in arrays.items()}
                if self.pin_memory:
                    batch = {k: v.pin_memory() for k, v in batch.items()}
                yield batch
        finally:
            # Runs when iteration ends, fails, or the caller closes this generator (the trainer does so on any
            # exception): the workers are gone before the exception reaches the user.
            _close_loader_iterator(iterator)

    @property
    def batches_consumed(self) -> int:
        return self._batches

    def state_dict(self) -> dict[str, Any]:
        """The cursor: format, rank, world size, workers, batches consumed and each stream's state."""
        return {
            "format": CURSOR_FORMAT,
            "rank": self.dataset.rank,
            "world_size": self.dataset.world_size,
            "num_workers": self.dataset.num_logical_workers,
            "seed": self.dataset.seed,
            "batches": self._batches,
            "streams": [self._streams.get(i) for i in range(self.dataset.num_logical_workers)],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a cursor saved by ``state_dict()`` of the same rank.

        With the same seed, world size and number of workers the batch sequence continues exactly. Otherwise
        (a different layout) every stream restarts at the beginning of the earliest saved epoch, with a
        warning, since rows cannot be re-assigned to a different set of streams mid-epoch.
        """
        if state.get("format") != CURSOR_FORMAT:
            raise ValueError(f"data cursor format {state.get('format')!r} is not {CURSOR_FORMAT}")
        same_layout = (
            state["world_size"] == self.dataset.world_size
            and state["num_workers"] == self.dataset.num_logical_workers
            and state["seed"] == self.dataset.seed
            and state["rank"] == self.dataset.rank
        )
        if same_layout:
            self._streams = {i: s for i, s in enumerate(state["streams"]) if s is not None}
            self._batches = int(state["batches"])
            return
        epochs = [s["epoch"] for s in state["streams"] if s is not None]
        epoch = min(epochs) if epochs else 0
        logger.warning(
            "data cursor was saved with world size %s, %s workers, seed %s; now %s, %s, %s: restarting the data "
            "at the beginning of epoch %d (exact resumption needs the same layout)",
            state["world_size"],
            state["num_workers"],
            state["seed"],
            self.dataset.world_size,
            self.dataset.num_logical_workers,
            self.dataset.seed,
            epoch,
        )
        self._streams = {}
        for i in range(self.dataset.num_logical_workers):
            self._streams[i] = self.dataset._fresh_state(i, epoch)
        self._batches = 0
