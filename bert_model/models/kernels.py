"""Which implementation of the non-attention kernels a model runs (``--kernels``): PyTorch's own, the
reference, or Liger Kernel's fused Triton kernels (linkedin/Liger-Kernel, ``pip install liger-kernel``).

* ``torch``: ``nn.LayerNorm`` and the rest as written in the model files; every device. The reference every
  other path is tested against.
* ``liger``: every ``nn.LayerNorm`` runs ``liger_kernel.ops.layer_norm.LigerLayerNormFunction`` (one Triton
  kernel forward and one backward, the same parameters, so state dicts are unchanged). CUDA only: Triton has no
  CPU backend, so it is refused on a CPU in one line. Liger's GeGLU (``LigerGELUMulFunction``) uses the tanh
  approximation of GELU where ModernBERT uses the exact (erf) one, and its fused linear cross-entropy returns
  no logits (the MLM accuracy needs them), so neither is used.
* ``auto``: ``liger`` on a CUDA device where ``liger_kernel`` is installed, else ``torch`` (always ``torch`` on
  a CPU).

The attention kernel is chosen apart (``attention.py``, ``--attn-implementation``).
"""

from __future__ import annotations

import functools
import importlib.util

import torch
import torch.nn.functional as F
from torch import nn

from bertprep.bert_model.models.bert_config import KERNELS  # (torch-free, for the CLI's --help)


def liger_installed() -> bool:
    """Whether the ``liger_kernel`` package can be imported (its Triton kernels need a CUDA device too)."""
    return importlib.util.find_spec("liger_kernel") is not None


def resolve_kernels(requested: str, device: torch.device) -> str:
    """``torch`` or ``liger`` for ``requested`` (one of :data:`KERNELS`) on ``device``.

    Raises:
        ValueError: an unknown name; ``liger`` on a device other than CUDA (Triton has no CPU backend), or
            without the ``liger_kernel`` package.
    """
    if requested not in KERNELS:
        raise ValueError(f"kernels must be one of {', '.join(KERNELS)}, got {requested!r}")
    if requested == "auto":
        return "liger" if device.type == "cuda" and liger_installed() else "torch"
    if requested == "liger" and device.type != "cuda":
        raise ValueError(
            f"--kernels liger needs a CUDA device (Liger Kernel is Triton code, which has no {device.type} "
            "backend); use --kernels torch or auto"
        )
    if requested == "liger" and not liger_installed():
        raise ValueError("--kernels liger needs the liger-kernel package: pip install liger-kernel")
    return requested


def _liger_layer_norm(module: nn.LayerNorm, x: torch.Tensor) -> torch.Tensor:
    from liger_kernel.ops.layer_norm import LigerLayerNormFunction

    if module.weight is None or module.bias is None:  # (Liger's kernel wants both; ModernBERT has no bias)
        return F.layer_norm(x, module.normalized_shape, module.weight, module.bias, module.eps)
    return LigerLayerNormFunction.apply(x, module.weight, module.bias, module.eps)


def configure_kernels(model: nn.Module, requested: str, device: torch.device) -> str:
    """Resolve ``requested`` for ``device`` (:func:`resolve_kernels`) and make every ``nn.LayerNorm`` of
    ``model`` run that implementation; returns its name. ``torch`` restores the modules' own ``forward``.

    Raises:
        ValueError: see :func:`resolve_kernels`.
    """
    kernels = resolve_kernels(requested, device)
    for module in model.modules():
        if isinstance(module, nn.LayerNorm):
            if kernels == "liger":
                module.forward = functools.partial(_liger_layer_norm, module)  # type: ignore[method-assign]
            else:
                module.__dict__.pop("forward", None)
    return kernels


__all__ = ["KERNELS", "configure_kernels", "liger_installed", "resolve_kernels"]
