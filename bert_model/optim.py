"""The optimizer over the original BERT parameter groups, and its learning-rate schedule.

google-research/bert ``optimization.py``: Adam with decoupled weight decay 0.01 applied to every weight
except biases and LayerNorm parameters (``exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"]``),
learning rate rising linearly over the warm-up steps, then decaying linearly to 0 at ``num_train_steps``.
The same groups serve the optimizers of later recipes (``OPTIMIZERS``), each from the library that maintains it:

* ``adamw``: ``torch.optim.AdamW`` (the default);
* ``stable-adamw``: StableAdamW (Wortsman et al. 2023, "Stable and low-precision training for large-scale
  vision-language models": AdamW with AdaFactor's update clipping per tensor), ModernBERT's optimizer (Warner et
  al. 2024, section 2.2), from ``torch-optimi`` (``optimi.StableAdamW``, by ModernBERT's author);
* ``lamb``: LAMB (You et al. 2020, "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes"),
  NVIDIA's optimizer for BERT at 64k batch, with the step of apex's ``FusedLAMB`` as NVIDIA's BERT runs it
  (``lamb.py``: both bias corrections, decay inside the trust ratio, no ratio on the groups without decay; why
  no library's LAMB is that step is said there).

The schedules are ``schedules.py``'s.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable

import torch
from torch import nn

from bertprep.bert_model.loop_config import OPTIMIZER_NAMES
from bertprep.bert_model.schedules import lr_factor

#: ``optimizer`` name -> (module, class, PyPI package) of the optimizer it builds.
OPTIMIZERS = {
    "adamw": ("torch.optim", "AdamW", "torch"),
    "stable-adamw": ("optimi", "StableAdamW", "torch-optimi"),
    "lamb": ("bertprep.bert_model.lamb", "Lamb", "bertprep"),
}
assert tuple(OPTIMIZERS) == OPTIMIZER_NAMES


def optimizer_class(name: str) -> type[torch.optim.Optimizer]:
    """The optimizer class ``name`` (of ``OPTIMIZERS``) names.

    Raises:
        ValueError: an unknown name, or (one line, with the fix) the package that provides it is not installed.
    """
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {name!r}")
    module, cls, package = OPTIMIZERS[name]
    try:
        return getattr(importlib.import_module(module), cls)
    except ImportError:
        raise ValueError(f"--optimizer {name} needs the {package} package: pip install 'bertprep[recipes]'") from None


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
    optimizer: str = "adamw",
    learning_rate: float = 1e-4,
    weight_decay: float = 0.01,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-6,
    fused: bool | None = None,
) -> torch.optim.Optimizer:
    """The ``optimizer`` of ``OPTIMIZERS`` (``torch.optim.AdamW`` by default) over ``param_groups(model,
    weight_decay)``.

    ``eps`` defaults to 1e-6 as in the original ``AdamWeightDecayOptimizer``. ``fused`` (None = when the
    parameters are on CUDA) selects AdamW's fused CUDA kernel; the other optimizers choose their own kernels
    (``optimi`` its foreach / triton ones). Weight decay is decoupled in every case (``p -= lr * weight_decay *
    p``; LAMB's inside its trust ratio).

    Raises:
        ValueError: a setting out of range, an unknown optimizer, or the package of one is not installed.
    """
    if learning_rate <= 0:
        raise ValueError(f"learning rate must be positive, got {learning_rate}")
    if weight_decay < 0:
        raise ValueError(f"weight decay must be >= 0, got {weight_decay}")
    if not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
        raise ValueError(f"Adam betas must be in [0, 1), got {betas}")
    # (each class takes the groups and its own keywords, which Optimizer's constructor does not declare)
    cls: Callable[..., torch.optim.Optimizer] = optimizer_class(optimizer)
    groups = param_groups(model, weight_decay)
    if optimizer != "adamw":
        return cls(groups, lr=learning_rate, betas=betas, eps=eps, weight_decay=weight_decay)
    if fused is None:
        fused = next(model.parameters()).device.type == "cuda"
    return cls(groups, lr=learning_rate, betas=betas, eps=eps, fused=fused or None)


def warmup_linear_decay(step: int, *, warmup_steps: int, max_steps: int) -> float:
    """Learning-rate factor at optimizer step ``step`` (0-based), as google-research/bert ``optimization.py``.

    ``step / warmup_steps`` while ``step < warmup_steps``, else ``1 - step / max_steps`` (the decay is
    computed from step 0, the warm-up overrides it at the start), never below 0: ``schedules.lr_factor``'s
    ``linear`` schedule.
    """
    return lr_factor(step, schedule="linear", warmup_steps=warmup_steps, max_steps=max_steps)


def create_scheduler(
    optimizer: torch.optim.Optimizer, *, warmup_steps: int, max_steps: int, **schedule
) -> torch.optim.lr_scheduler.LambdaLR:
    """``LambdaLR`` with ``schedules.lr_factor`` (``schedule``: its keywords besides the step, the warm-up and
    ``max_steps``, as ``OptimConfig.schedule_settings`` gives them; none = BERT's linear decay). Its
    ``state_dict()`` holds only numbers (JSON-safe): the step, from which the factor follows, so a resumed run
    follows the same curve.

    Raises:
        ValueError: ``max_steps`` not positive, ``warmup_steps`` outside [0, max_steps], or a ``wsd`` decay
            that does not fit after the warm-up.
    """
    if max_steps <= 0:
        raise ValueError(f"max_steps must be positive, got {max_steps}")
    if not 0 <= warmup_steps <= max_steps:
        raise ValueError(f"warmup_steps must be in [0, max_steps={max_steps}], got {warmup_steps}")
    decay_steps = schedule.get("decay_steps", 0)
    if schedule.get("schedule") == "wsd" and warmup_steps + decay_steps > max_steps:
        raise ValueError(
            f"the wsd decay ({decay_steps} steps) and warm-up ({warmup_steps}) exceed max_steps ({max_steps}); "
            "lower --decay-steps / --decay-fraction or --warmup-steps"
        )
    factor = functools.partial(lr_factor, warmup_steps=warmup_steps, max_steps=max_steps, **schedule)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


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
    lr = float(scheduler.get_last_lr()[0])  # (a float: create_optimizer's learning rate is one)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return lr, grad_norm
