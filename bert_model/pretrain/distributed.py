"""Distributed training and stop signals, apart from the training loop (``trainer.py``).

* :func:`setup_distributed`: DDP from ``torchrun``'s environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``):
  the process group (NCCL on CUDA, gloo on CPU) and this rank's device;
* :func:`gather`, :func:`any_rank`: the two collectives the loop needs (per-rank checkpoint state; stop flags
  OR-ed over the ranks in one all-reduce); on gloo they return only once gloo's worker threads have let go of
  their tensors (:func:`released`), which keeps a rank's interpreter exit clean;
* :class:`StopSignals`: the first SIGTERM / SIGINT becomes "stop after this step with a checkpoint";

PyTorch only (``torch.distributed``); one process per rank as ``torchrun`` starts them.
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from bertprep.bert_model.runtime import resolve_device, seed_everything  # seed_everything: re-exported

logger = logging.getLogger("bertprep.train")


@dataclass
class DistInfo:
    """This process's place in a DDP job (rank 0 of 1 without ``torchrun``)."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    owns_group: bool = False

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def setup_distributed(device: str) -> tuple[DistInfo, torch.device]:
    """DDP from torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK), and the device of this rank.

    Args:
        device: ``"auto"`` (CUDA when available), ``"cpu"``, ``"cuda"`` or ``"cuda:N"``; under DDP on CUDA each
            rank takes ``cuda:LOCAL_RANK``.
    Raises:
        ValueError: CUDA asked for but not available.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    requested = str(resolve_device(device))
    info = DistInfo()
    if world_size > 1:
        info = DistInfo(
            rank=int(os.environ["RANK"]), local_rank=int(os.environ.get("LOCAL_RANK", "0")), world_size=world_size
        )
        if requested.startswith("cuda"):
            requested = f"cuda:{info.local_rank}"
            torch.cuda.set_device(requested)
        if not dist.is_initialized():
            dist.init_process_group(backend="nccl" if requested.startswith("cuda") else "gloo")
            info.owns_group = True
    return info, torch.device(requested)


#: Seconds a gloo collective waits for gloo's worker thread to let go of its tensors (:func:`released`);
#: microseconds on an idle machine, milliseconds on a loaded one.
RELEASE_TIMEOUT_S = 10.0


def released(tensors: list[torch.Tensor], timeout_s: float = RELEASE_TIMEOUT_S) -> bool:
    """Wait until no one but the caller holds ``tensors`` (``Tensor._use_count() == 1``); True when so, False
    (logged at debug level) after ``timeout_s`` seconds.

    Why: a synchronous gloo collective returns as soon as gloo's worker thread (``pt_gloo_runloop``) marks the
    work done, and the thread drops the work, and with it its references to the tensors, a moment later
    (measured: after 30-70% of ``all_reduce`` calls the tensor was still held on return). A tensor whose Python
    object the caller drops meanwhile has that object kept alive by PyTorch until the C++ side lets go, so
    gloo's thread then frees it, which needs the GIL. DistributedDataParallel keeps the group's worker threads
    alive past ``destroy_process_group`` (until the process exits), so that last release can come while the
    interpreter is finalizing, when Python 3.11 ends a thread that asks for the GIL with ``pthread_exit``; its
    unwinding through C++ frames that may not throw ends in ``std::terminate`` ("terminate called without an
    active exception", SIGABRT: a rank that finished its work exits non-zero). Waiting here frees every tensor
    of our collectives on the calling thread, with the interpreter alive. ``Tensor._use_count`` (the C++
    tensor's reference count; private, not in torch's type stubs): a torch without it is not waited for.
    """
    if not all(hasattr(t, "_use_count") for t in tensors):
        return True
    deadline = time.monotonic() + timeout_s
    while any(t._use_count() > 1 for t in tensors):  # type: ignore[attr-defined]
        if time.monotonic() > deadline:
            logger.debug("gloo still holds %d tensor(s) of a finished collective", len(tensors))
            return False
        time.sleep(0.0001)
    return True


def _gloo() -> bool:
    return dist.get_backend() == "gloo"


def all_reduce_released(t: torch.Tensor) -> torch.Tensor:
    """``dist.all_reduce(t)`` (sum, in place) that returns once gloo has let go of ``t`` (:func:`released`)."""
    dist.all_reduce(t)
    if _gloo():
        released([t])
    return t


def all_gather_objects(obj: Any, world_size: int) -> list[Any]:
    """``obj`` of every rank, in rank order, for a gloo group: ``dist.all_gather_object``'s protocol (pickled
    bytes, their lengths gathered first, padded to the longest) on tensors this function owns, so that it can
    wait until gloo has let go of them (:func:`released`). Objects come only from the job's own ranks."""
    data = pickle.dumps(obj)
    size = torch.tensor([len(data)], dtype=torch.long)
    sizes = [torch.zeros(1, dtype=torch.long) for _ in range(world_size)]
    dist.all_gather(sizes, size)
    released([size, *sizes])
    longest = max(int(s.item()) for s in sizes)
    padded = torch.zeros(longest, dtype=torch.uint8)
    padded[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    parts = [torch.empty(longest, dtype=torch.uint8) for _ in range(world_size)]
    dist.all_gather(parts, padded)
    released([padded, *parts])
    return [pickle.loads(part[: int(s.item())].numpy().tobytes()) for part, s in zip(parts, sizes, strict=True)]


def gather(obj: Any, d: DistInfo) -> list[Any]:
    """``obj`` of every rank, in rank order (``[obj]`` without DDP)."""
    if not d.enabled:
        return [obj]
    if _gloo():
        return all_gather_objects(obj, d.world_size)
    out: list[Any] = [None] * d.world_size
    dist.all_gather_object(out, obj)
    return out


def any_rank(flags: tuple[bool, ...], d: DistInfo, device: torch.device) -> tuple[bool, ...]:
    """Each flag OR-ed over the ranks, in one all-reduce (one host sync per call)."""
    if not d.enabled:
        return flags
    t = torch.tensor([1.0 if f else 0.0 for f in flags], device=device)
    all_reduce_released(t)
    return tuple(bool(v > 0) for v in t.tolist())


class StopSignals:
    """Turns the first SIGTERM or SIGINT into a request to stop after the current step (with a checkpoint).

    Schedulers (Slurm, Kubernetes, pre-emptible cloud VMs) send SIGTERM and wait a grace period before
    SIGKILL; Ctrl-C sends SIGINT. A second SIGINT restores the default behaviour (KeyboardInterrupt at once).
    Installed only in the main thread (Python's rule); elsewhere it records nothing.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.received: str | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is None:
            self.received = signal.Signals(signum).name
            logger.warning(
                "%s received: stopping after this step with a checkpoint, or before the first one if training has "
                "not started (send SIGINT again to abort without one)",
                self.received,
            )
        if signum == signal.SIGINT:
            signal.signal(signal.SIGINT, signal.default_int_handler)

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


__all__ = ["DistInfo", "StopSignals", "any_rank", "gather", "seed_everything", "setup_distributed"]
