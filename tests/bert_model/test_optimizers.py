"""optim.create_optimizer's optimizers: each step equals the library's own optimizer on the same parameters and
gradients, over the BERT parameter groups; a missing package is one line naming the extra."""

from __future__ import annotations

import importlib

import pytest
import torch

from bertprep.bert_model.models.bert import BertConfig, BertForPreTraining
from bertprep.bert_model.optim import create_optimizer, optimizer_class
from conftest import need_module

SETTINGS = dict(learning_rate=3e-3, weight_decay=0.1, betas=(0.9, 0.98), eps=1e-6)


def _two_models() -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.from_preset("tiny", vocab_size=40, hidden_size=16, num_attention_heads=2))
    twin = BertForPreTraining(model.config)
    twin.load_state_dict(model.state_dict())
    return model.eval(), twin.eval()  # (no dropout: the two see the same gradients)


def _library_optimizer(name: str, model: torch.nn.Module) -> torch.optim.Optimizer:
    """The library's class built by hand over BERT's groups: no decay on biases and LayerNorm parameters."""
    no_decay = [p for n, p in model.named_parameters() if n.endswith("bias") or "LayerNorm" in n]
    decay = [p for n, p in model.named_parameters() if not (n.endswith("bias") or "LayerNorm" in n)]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    assert name == "stable-adamw"  # (lamb is bertprep's own: test_lamb.py checks it against a reference)
    return need_module("optimi").StableAdamW(groups, lr=3e-3, betas=(0.9, 0.98), eps=1e-6)


@pytest.mark.parametrize("name", ["stable-adamw"])
def test_a_step_equals_the_librarys_own_optimizer(name):
    model, twin = _two_models()
    ours = create_optimizer(model, optimizer=name, **SETTINGS)
    theirs = _library_optimizer(name, twin)
    assert type(ours) is type(theirs)
    batch, nsp = torch.randint(5, 40, (4, 12)), torch.tensor([0, 1, 1, 0])
    for _ in range(3):
        for m, opt in ((model, ours), (twin, theirs)):
            positions = torch.tensor([[1, 2]] * 4)
            out = m(
                input_ids=batch, masked_lm_positions=positions, masked_lm_ids=batch[:, 1:3], next_sentence_label=nsp
            )
            out.loss.backward()
            opt.step()
            opt.zero_grad()
    a, b = model.state_dict(), twin.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])]
    # The step moved the weights (the comparison is not between two untouched models).
    assert not torch.equal(a["bert.pooler.dense.weight"], _two_models()[0].state_dict()["bert.pooler.dense.weight"])


def test_a_missing_package_is_one_line_naming_the_extra(monkeypatch):
    real = importlib.import_module

    def without_optimi(name, *args):
        if name == "optimi":
            raise ModuleNotFoundError("No module named 'optimi'")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", without_optimi)
    with pytest.raises(ValueError, match=r"^--optimizer stable-adamw needs the torch-optimi package: pip install "):
        optimizer_class("stable-adamw")
    assert optimizer_class("adamw") is torch.optim.AdamW
