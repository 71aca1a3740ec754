"""What every command of ``bert_model`` needs around the model: the device, seeding, and file permissions.

* :func:`resolve_device`: ``--device auto|cpu|cuda|cuda:N`` -> ``torch.device``, refusing CUDA where there is none;
* :func:`seed_everything`: Python's ``random``, numpy's global generator and torch from one seed;
* :func:`path_is_within`: whether an output would land in (and so replace) an input;
* :func:`set_default_permissions`: the mode of files safetensors writes (checkpoints, exported models).

Durable writes (fsync, files and directories swapped in whole, staging folders) are
``bertprep.core.atomic``'s (standard library only), which both halls use.
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch

from bertprep.core.paths import path_is_within  # re-exported: one definition


def resolve_device(requested: str) -> torch.device:
    """The ``torch.device`` for a ``--device`` value.

    Args:
        requested: ``"auto"`` (``cuda`` when ``torch.cuda.is_available()``, else ``cpu``), ``"cpu"``, ``"cuda"``
            or ``"cuda:N"`` (any string ``torch.device`` accepts).
    Raises:
        ValueError: a CUDA device is requested but CUDA is not available.
    """
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {requested!r} requested but CUDA is not available; use --device cpu")
    return torch.device(requested)


def seed_everything(seed: int) -> None:
    """Seed Python's ``random``, numpy's global generator (``seed`` mod 2**32) and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _umask() -> int:
    try:  # Linux: read it without changing it (os.umask would, for a moment, for every thread)
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def set_default_permissions(path: str) -> None:
    """Give ``path`` the mode of a file created with ``open()`` (0666 minus the umask, e.g. 0644): safetensors
    creates its files 0600, which hides checkpoints from the user's group (a shared cluster project)."""
    os.chmod(path, 0o666 & ~_umask())


__all__ = [
    "path_is_within",
    "resolve_device",
    "seed_everything",
    "set_default_permissions",
]
