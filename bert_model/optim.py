"""AdamW with the original BERT parameter groups, and its learning-rate schedule.

google-research/bert ``optimization.py``: Adam with decoupled weight decay 0.01 applied to every weight
except biases and LayerNorm parameters (``exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"]``),
learning rate rising linearly over the warm-up steps, then decaying linearly to 0 at ``num_train_steps``.
"""

from __future__ import annotations

import functools

import torch
from torch import nn


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two AdamW parameter groups: decayed weights, and biases + LayerNorm parameters without decay.

    Each distinct trainable parameter (a tied one once) lands in exactly one group (frozen ones, with
    ``requires_grad`` False, in none), checked as minGPT's ``configure_optimizers`` does. ``params`` holds ``(name,
    parameter)`` pairs, which torch optimizers
    record as ``param_names`` so the optimizer state can be saved by name. Raises ``AssertionError`` if the
    partition is not exact (a bug, not user error).
    """
    decay: dict[str, nn.Parameter] = {}
    no_decay: dict[str, nn.Parameter] = {}
    for module_name, module in model.named_modules():
        for name, param in module.named_parameters(recurse=False):
            full = f"{module_name}.{name}" if module_name else name
            if not param.requires_grad:
                continue
            if isinstance(module, nn.LayerNorm) or name.endswith("bias"):
                no_decay[full] = param
            else:
                decay[full] = param
    # Tied parameters are registered under several names (the MLM decoder is the word embedding matrix,
    # its bias is cls.predictions.bias): keep the first name that named_parameters() reports.
    canonical = {id(p): n for n, p in model.named_parameters()}
    decay = {n: p for n, p in decay.items() if canonical[id(p)] == n}
    no_decay = {n: p for n, p in no_decay.items() if canonical[id(p)] == n}
    both = set(decay) & set(no_decay)
    assert not both, f"parameters in both groups: {sorted(both)}"
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}  # frozen ones stay out
    missing = trainable - set(decay) - set(no_decay)
    assert not missing, f"parameters in neither group: {sorted(missing)}"
    return [
        {"params": list(decay.items()), "weight_decay": weight_decay},
        {"params": list(no_decay.items()), "weight_decay": 0.0},
    ]


def create_optimizer(
    model: nn.Module,
    *,
    learning_rate: float = 1e-4,
    weight_decay: float = 0.01,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-6,
    fused: bool | None = None,
) -> torch.optim.AdamW:
    """``torch.optim.AdamW`` over ``param_groups(model, weight_decay)``.

    ``eps`` defaults to 1e-6 as in the original ``AdamWeightDecayOptimizer``. ``fused`` (None = when the
    parameters are on CUDA) selects the fused CUDA kernel.
    """
    if learning_rate <= 0:
        raise ValueError(f"learning rate must be positive, got {learning_rate}")
    if weight_decay < 0:
        raise ValueError(f"weight decay must be >= 0, got {weight_decay}")
    if not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
        raise ValueError(f"Adam betas must be in [0, 1), got {betas}")
    if fused is None:
        fused = next(model.parameters()).device.type == "cuda"
    return torch.optim.AdamW(
        param_groups(model, weight_decay), lr=learning_rate, betas=betas, eps=eps, fused=fused or None
    )


def warmup_linear_decay(step: int, *, warmup_steps: int, max_steps: int) -> float:
    """Learning-rate factor at optimizer step ``step`` (0-based), as google-research/bert ``optimization.py``.

    ``step / warmup_steps`` while ``step < warmup_steps``, else ``1 - step / max_steps`` (the decay is
    computed from step 0, the warm-up overrides it at the start), never below 0.
    """
    if step < warmup_steps:
        return step / warmup_steps
    return max(0.0, 1.0 - step / max_steps)


def create_scheduler(
    optimizer: torch.optim.Optimizer, *, warmup_steps: int, max_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """``LambdaLR`` with ``warmup_linear_decay``; its ``state_dict()`` holds only numbers (JSON-safe)."""
    if max_steps <= 0:
        raise ValueError(f"max_steps must be positive, got {max_steps}")
    if not 0 <= warmup_steps <= max_steps:
        raise ValueError(f"warmup_steps must be in [0, max_steps={max_steps}], got {warmup_steps}")
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, functools.partial(warmup_linear_decay, warmup_steps=warmup_steps, max_steps=max_steps)
    )


def optimizer_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    max_grad_norm: float,
) -> tuple[float, torch.Tensor | None]:
    """One update from the accumulated gradients: clip the global gradient norm to ``max_grad_norm`` (0 = no
    clipping), step the optimizer and the schedule, clear the gradients.

    Returns:
        ``(lr, grad_norm)``: the learning rate this step used, and the global gradient norm before clipping as
        a 0-dim float32 tensor on the parameters' device (not read back, so no host sync per step), None
        without clipping.
    """
    grad_norm = None
    if max_grad_norm > 0:
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    lr = scheduler.get_last_lr()[0]
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return lr, grad_norm
