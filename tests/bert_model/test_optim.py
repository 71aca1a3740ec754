"""bert_model/optim.py: one optimizer step as both training loops take it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from bertprep.bert_model.optim import create_optimizer, create_scheduler, optimizer_step


@pytest.mark.parametrize("max_grad_norm", [0.0, 0.5])
def test_optimizer_step_clips_steps_the_schedule_and_clears_gradients(max_grad_norm):
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    optimizer = create_optimizer(model, learning_rate=1e-2, weight_decay=0.0)
    scheduler = create_scheduler(optimizer, warmup_steps=2, max_steps=4)
    lrs = []
    for _ in range(3):
        before = model.weight.detach().clone()
        (model(torch.randn(8, 4)) * 10).pow(2).mean().backward()
        norm = torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in model.parameters()]))
        lr, grad_norm = optimizer_step(model, optimizer, scheduler, max_grad_norm)
        lrs.append(lr)
        assert all(p.grad is None for p in model.parameters())
        if max_grad_norm:
            assert grad_norm.item() == pytest.approx(norm.item(), rel=1e-5)  # the norm before clipping
            assert norm > max_grad_norm
        else:
            assert grad_norm is None
        assert (model.weight != before).any() or lr == 0
    # the lr each step used: warm-up 0/2, 1/2, then the decay computed from step 0 (1 - 2/4), as the original
    assert lrs == pytest.approx([0.0, 5e-3, 5e-3])
