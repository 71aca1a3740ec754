"""Numeric precision of training and evaluation: fp32, or bf16 autocast (weights and optimizer stay fp32).

``auto`` is bf16 on CUDA (what the paper-era TPUs did in spirit, and Ampere+/Hopper GPUs do fast) and fp32
on the CPU. ``bf16`` on the CPU is opt-in: ``torch.autocast("cpu", dtype=torch.bfloat16)`` runs the
matrix products in bf16, which CPUs with AVX512-BF16 or AMX (AMD Zen 4+, Intel Sapphire Rapids+) do about
1.6x as fast as fp32 (measured in ``benchmarks/README.md``); elsewhere it is emulated and usually slower.
"""

from __future__ import annotations

import contextlib

import torch

# (torch-free, in loop_config: the command line's --precision choices and the configs' check)
from bertprep.bert_model.loop_config import check_precision


def uses_bf16(device: torch.device, precision: str) -> bool:
    """Whether ``precision`` means bf16 autocast on ``device``."""
    check_precision(precision)
    return precision == "bf16" or (precision == "auto" and device.type == "cuda")


def autocast_context(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """A fresh autocast context for ``device`` (bf16 when :func:`uses_bf16`), else a no-op context."""
    if uses_bf16(device, precision):
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def cpu_has_native_bf16() -> bool | None:
    """True when this CPU lists bf16 matrix instructions (``avx512_bf16`` or ``amx_bf16`` in
    ``/proc/cpuinfo``), False when it does not, None where that file does not exist (not Linux)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            flags = f.read()
    except OSError:
        return None
    return " avx512_bf16" in flags or " amx_bf16" in flags
