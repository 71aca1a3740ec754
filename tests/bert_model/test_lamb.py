"""``--optimizer lamb`` takes the step of apex's FusedLAMB as NVIDIA's BERT runs it, checked against a float64
reference written here from the LAMB paper (You et al. 2020, algorithm 2) and apex's documented semantics
(``FusedLAMB(bias_correction=True, adam_w_mode=True, grad_averaging=True, use_nvlamb=False)``): both bias
corrections, weight decay inside the trust ratio, no cap on the weight norm, no ratio in a group without decay."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bertprep.bert_model.lamb import Lamb
from bertprep.bert_model.optim import create_optimizer

LR, BETAS, EPS, DECAY = 6e-3, (0.9, 0.999), 1e-6, 0.01


def reference_lamb(weights, grads_per_step, decay, lr=LR, betas=BETAS, eps=EPS):
    """The weights after each step, in float64 (a list per step of one array per tensor)."""
    beta1, beta2 = betas
    p = [w.astype(np.float64).copy() for w in weights]
    m = [np.zeros_like(w) for w in p]
    v = [np.zeros_like(w) for w in p]
    history = []
    for t, grads in enumerate(grads_per_step, start=1):
        for i, g in enumerate(grads):
            g = g.astype(np.float64)
            m[i] = beta1 * m[i] + (1 - beta1) * g
            v[i] = beta2 * v[i] + (1 - beta2) * g * g
            r = (m[i] / (1 - beta1**t)) / (np.sqrt(v[i] / (1 - beta2**t)) + eps)
            u = r + decay * p[i]
            ratio = 1.0
            if decay:
                w_norm, u_norm = np.linalg.norm(p[i]), np.linalg.norm(u)
                ratio = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
            p[i] = p[i] - lr * ratio * u
        history.append([x.copy() for x in p])
    return history


def _run(weights, grads_per_step, decay):
    params = [torch.nn.Parameter(torch.tensor(w)) for w in weights]
    opt = Lamb([{"params": params, "weight_decay": decay}], lr=LR, betas=BETAS, eps=EPS)
    history = []
    for grads in grads_per_step:
        for p, g in zip(params, grads, strict=True):
            p.grad = torch.tensor(g)
        opt.step()
        history.append([p.detach().numpy().astype(np.float64) for p in params])
    return history


def _case(norm: float, steps: int, seed: int = 0):
    """A weight matrix of Frobenius norm ``norm`` and a bias, with ``steps`` gradients each."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    w *= norm / np.linalg.norm(w)
    b = (0.02 * rng.standard_normal(8)).astype(np.float32)
    grads = [[rng.standard_normal(w.shape).astype(np.float32) * 1e-2, rng.standard_normal(8).astype(np.float32)]
             for _ in range(steps)]  # fmt: skip
    return [w, b], grads


@pytest.mark.parametrize("norm", [1.3, 64.0])
@pytest.mark.parametrize("steps", [1, 5])
@pytest.mark.parametrize("decay", [DECAY, 0.0])
def test_lamb_steps_equal_apex_fused_lamb_reference(norm, steps, decay):
    weights, grads = _case(norm, steps)
    ours, ref = _run(weights, grads, decay), reference_lamb(weights, grads, decay)
    for got_step, want_step in zip(ours, ref, strict=True):
        for got, want in zip(got_step, want_step, strict=True):
            np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)


def test_first_decayed_step_moves_each_tensor_by_lr_times_its_norm():
    """The trust ratio scales the first update to lr x ||p|| whatever the norm (no cap at 10): 0.0078 for a weight
    of norm 1.3 at lr 6e-3, 0.384 for one of norm 64; the library LAMB bertprep used before moved the first one
    10x as far (no second-moment bias correction)."""
    for norm in (1.3, 64.0):
        weights, grads = _case(norm, 1)
        (after,) = _run(weights[:1], [grads[0][:1]], DECAY)
        moved = np.linalg.norm(after[0] - weights[0].astype(np.float64))
        assert moved == pytest.approx(LR * norm, rel=1e-5)


def test_a_group_without_decay_takes_the_bias_corrected_adam_step():
    """No trust ratio where weight_decay is 0 (apex without use_nvlamb): step 1 is lr x sign(g) (m_hat/sqrt(v_hat))."""
    weights, grads = _case(1.3, 1)
    (after,) = _run(weights[1:], [grads[0][1:]], 0.0)
    g = grads[0][1].astype(np.float64)
    expected = weights[1] - LR * g / (np.abs(g) + EPS)
    np.testing.assert_allclose(after[0], expected, rtol=1e-6, atol=1e-8)


def test_create_optimizer_builds_it_over_bert_groups_with_the_settings():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    opt = create_optimizer(model, optimizer="lamb", learning_rate=6e-3, weight_decay=0.01, betas=(0.9, 0.98), eps=1e-6)
    assert type(opt) is Lamb
    assert [g["weight_decay"] for g in opt.param_groups] == [0.01, 0.0]
    assert opt.param_groups[0]["betas"] == (0.9, 0.98) and math.isclose(opt.param_groups[0]["lr"], 6e-3)
