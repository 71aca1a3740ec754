"""bert_model/runtime.py: device choice and seeding (atomic writes: tests/core/test_atomic.py)."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
import torch

from bertprep.bert_model import runtime


def test_resolve_device(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert runtime.resolve_device("auto") == torch.device("cpu")
    assert runtime.resolve_device("cpu") == torch.device("cpu")
    for requested in ("cuda", "cuda:1"):
        with pytest.raises(
            ValueError,
            match=rf"device '{requested}' requested but CUDA is not available; "
            "use --device cpu",
        ):
            runtime.resolve_device(requested)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert runtime.resolve_device("auto") == torch.device("cuda")
    assert runtime.resolve_device("cuda:1") == torch.device("cuda", 1)


def test_seed_everything_repeats_python_numpy_and_torch_draws():
    def draws():
        return random.random(), float(np.random.random()), float(torch.rand(1))

    runtime.seed_everything(2**32 + 7)  # numpy takes the seed mod 2**32
    first = draws()
    runtime.seed_everything(2**32 + 7)
    assert draws() == first
    runtime.seed_everything(8)
    assert draws() != first


def test_set_default_permissions_follows_the_umask(tmp_path):
    path = tmp_path / "weights.safetensors"
    path.write_bytes(b"x")
    os.chmod(path, 0o600)  # how safetensors creates its files
    old = os.umask(0o027)
    try:
        runtime.set_default_permissions(str(path))
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o640
