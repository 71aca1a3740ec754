"""LAMB as NVIDIA's BERT runs it: the step of apex's ``FusedLAMB`` as DeepLearningExamples'
``PyTorch/LanguageModeling/BERT/run_pretraining.py`` builds it (``FusedLAMB(groups, lr=...)``: its defaults
``bias_correction=True``, ``adam_w_mode=True``, ``grad_averaging=True``, ``use_nvlamb=False``), in PyTorch.

You et al. 2020, "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes", algorithm 2, with
apex's choices (``apex/optimizers/fused_lamb.py`` and its kernel ``csrc/multi_tensor_lamb.cu``), per tensor ``p``
of gradient ``g`` at step ``t`` of its group::

    m = beta1 m + (1 - beta1) g                  v = beta2 v + (1 - beta2) g^2
    u = (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps) + weight_decay p     (both bias corrections;
                                                                                    decay inside the update)
    p -= lr x (||p|| / ||u||) x u    in a group with weight_decay > 0 (the trust ratio; 1 when a norm is 0)
    p -= lr x u                      in a group without decay (apex: no trust ratio unless use_nvlamb)

No cap on ``||p||`` and no epsilon in the ratio. apex clips the global gradient norm to ``max_grad_norm`` (1.0)
inside ``step``; bertprep clips it before the step (``optim.optimizer_step``, ``--max-grad-norm``), the same
operation.

Why not a library's: ``pytorch_optimizer.Lamb`` (4.1) has no second-moment bias correction, caps ``||p||`` at 10
(a class constant) and applies the ratio to every group; its first step on a weight of norm 1.3 is 10x this one.
``timm.optim.Lamb`` is this step, but the ``timm`` package requires ``torchvision``, whose wheels pin one torch
build (installing it beside another torch replaces or breaks it); apex's ``FusedLAMB`` needs apex built with its
CUDA extensions. PyTorch only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch


class Lamb(torch.optim.Optimizer):
    """apex ``FusedLAMB``'s update (module docstring) over ``params``; the moments live in ``state[p]``
    (``exp_avg``, ``exp_avg_sq``, fp32 like ``p``), the step count in each group (``step``, as apex keeps it).

    Args:
        params: tensors or parameter groups (``optim.param_groups``'s, with ``param_names``).
        lr: learning rate (> 0).
        betas: ``(beta1, beta2)`` in [0, 1).
        eps: added to ``sqrt(v_hat)`` (apex's default 1e-6).
        weight_decay: decoupled decay inside the update; a group of 0 gets no trust ratio.

    Raises:
        ValueError: a setting out of range, or a sparse gradient.
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.01,
    ) -> None:
        if lr <= 0 or eps < 0 or weight_decay < 0 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"LAMB needs lr > 0, eps >= 0, weight_decay >= 0, betas in [0, 1); got {lr}, "
                             f"{eps}, {weight_decay}, {betas}")  # fmt: skip
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """One update of every parameter with a gradient; returns ``closure()`` when given."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            group["step"] = group.get("step", 0) + 1
            correction1 = 1.0 - beta1 ** group["step"]
            correction2 = 1.0 - beta2 ** group["step"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise ValueError("LAMB does not take sparse gradients")
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.mul_(beta1).add_(p.grad, alpha=1.0 - beta1)
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1.0 - beta2)
                update = (m / correction1).div_((v / correction2).sqrt_().add_(group["eps"]))
                ratio: torch.Tensor | float = 1.0
                if group["weight_decay"] != 0:
                    update.add_(p, alpha=group["weight_decay"])
                    p_norm, u_norm = torch.linalg.vector_norm(p), torch.linalg.vector_norm(update)
                    ratio = torch.where((p_norm > 0) & (u_norm > 0), p_norm / u_norm, torch.ones_like(p_norm))
                p.sub_(update * (group["lr"] * ratio))
        return loss


__all__ = ["Lamb"]
