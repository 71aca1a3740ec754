"""A tiny 'pre-trained' bertprep checkpoint for the fine-tuning tests (random weights, the fixture vocab).

run = write_tiny_checkpoint(tmp_path / "pretrain")   # a run directory finetune --init-from reads
run = write_tiny_modernbert_checkpoint(tmp_path / "pretrain")   # the same for ModernBERT
"""

from __future__ import annotations

from pathlib import Path

import torch

from bertprep.bert_model import checkpoint as ckpt
from bertprep.bert_model.models.bert import BertConfig, BertForPreTraining
from bertprep.bert_model.models.modernbert import ModernBertConfig, ModernBertForMaskedLM
from bertprep.bert_model.optim import create_optimizer
from model_factory import tiny_bert, tiny_modernbert

VOCAB = Path(__file__).parent / "fixtures" / "finetune" / "vocab.txt"
FILLER = "the a is was in of and to it this that he she they said city river year one two three".split()


def tiny_config() -> BertConfig:
    """``model_factory.tiny_bert`` (2 layers, H=32) with an FFN of 64, no dropout, the fixture vocab's size."""
    size = len(VOCAB.read_text().splitlines())
    return BertConfig(
        **tiny_bert(size, intermediate_size=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    )


def write_tiny_checkpoint(run: Path, config: BertConfig | None = None) -> str:
    """Save a seeded random ``BertForPreTraining`` (``config``, default ``tiny_config()``) as step 1 of the
    run directory ``run``, with the fixture vocab; returns ``str(run)``."""
    torch.manual_seed(0)
    return _save_step_1(run, BertForPreTraining(config or tiny_config()))


def tiny_modernbert_config(**overrides) -> ModernBertConfig:
    """4 layers (0 and 3 global, a local window of 8 tokens), H=32, no dropout, the fixture vocab's size and
    special ids."""
    tokens = VOCAB.read_text().splitlines()
    ids = {f"{name}_token_id": tokens.index(f"[{name.upper()}]") for name in ("pad", "cls", "sep")}
    return ModernBertConfig(**tiny_modernbert(len(tokens), **{**ids, **overrides}))


def write_tiny_modernbert_checkpoint(run: Path, config: ModernBertConfig | None = None) -> str:
    """Save a seeded random ``ModernBertForMaskedLM`` (``config``, default ``tiny_modernbert_config()``) as
    step 1 of the run directory ``run``, with the fixture vocab; returns ``str(run)``."""
    torch.manual_seed(0)
    return _save_step_1(run, ModernBertForMaskedLM(config or tiny_modernbert_config()))


def _save_step_1(run: Path, model: torch.nn.Module) -> str:
    state = {"model_config": model.config.to_dict(), "data": {"vocab_sha256": "test"}}
    ckpt.save_checkpoint(
        str(run),
        1,
        model=model,
        optimizer=create_optimizer(model),
        state=state,
        hf_config=model.config.to_hf_dict(),
        vocab_file=str(VOCAB),
    )
    return str(run)
