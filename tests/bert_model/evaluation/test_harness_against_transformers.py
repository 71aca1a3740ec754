"""The harness's fine-tuning step against ``transformers``: from one Hugging Face BERT directory, with the same
classifier weights, the same batches and dropout off, a run of ``finetune``'s model, AdamW groups, schedule and
step (clipping, then the optimizer, then the schedule) gives ``transformers.BertForSequenceClassification`` with
``torch.optim.AdamW`` the same losses and weights step for step.

What remains between the two (``benchmarks/bench_glue_vs_transformers.py`` measures it): the random draws
(classifier initialisation, dropout masks, data order) and the learning-rate schedule. The harness decays as
BERT's ``optimization.py`` does, from step 0 (after a warm-up of W of N steps the rate is 1 - W/N of the peak);
``transformers.get_linear_schedule_with_warmup`` decays from the end of the warm-up (the peak at step W).
"""

from __future__ import annotations

import dataclasses
import functools

import pytest
import torch

from conftest import need_module
from finetune_factory import VOCAB

transformers = need_module("transformers")

from bertprep.bert_model.collate import collate_features  # noqa: E402
from bertprep.bert_model.models.heads import load_encoder_weights  # noqa: E402
from bertprep.bert_model.optim import create_optimizer, create_scheduler, optimizer_step  # noqa: E402
from bertprep.bert_model.schedules import lr_factor  # noqa: E402
from bertprep.bert_model.tasks.finetune import FinetuneConfig, _model_inputs  # noqa: E402
from bertprep.bert_model.tasks.glue import GlueTask  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")
STEPS, WARMUP, BATCH = 4, 1, 8


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    """A seeded random Hugging Face BERT directory (2 layers, H=32) with the fixture vocab."""
    path = tmp_path_factory.mktemp("hf-bert")
    size = len(VOCAB.read_text().splitlines())
    config = transformers.BertConfig(
        vocab_size=size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=64,
    )  # fmt: skip
    torch.manual_seed(0)
    transformers.BertModel(config).save_pretrained(path)
    (path / "vocab.txt").write_text(VOCAB.read_text())
    return str(path)


def _batches(tmp_path, tokenizer) -> list[dict]:
    words = VOCAB.read_text().split()[-40:]
    lines = ["sentence\tlabel"] + [f"{' '.join(words[i : i + 5])}\t{i % 2}" for i in range(STEPS * BATCH)]
    (tmp_path / "train.tsv").write_text("\n".join(lines) + "\n")
    task = GlueTask.from_preset("sst2", max_seq_length=32)
    examples = task.read(str(tmp_path / "train.tsv"))
    task.prepare(examples)
    features = task.featurize(examples, tokenizer, with_labels=True)
    return [collate_features(features[i : i + BATCH], tokenizer.pad_token_id) for i in range(0, len(features), BATCH)]


def test_the_harness_step_equals_a_transformers_step_from_the_same_start(tmp_path, hf_dir):
    config = FinetuneConfig(train_file="unused", output_dir=str(tmp_path / "run"), init_from=hf_dir)
    bert_config, source, tokenizer = _model_inputs(config)
    ours = GlueTask.from_preset("sst2").build_model(
        dataclasses.replace(bert_config, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    )
    load_encoder_weights(ours, source.state_dict)
    theirs = transformers.BertForSequenceClassification.from_pretrained(
        hf_dir, num_labels=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0
    )
    with torch.no_grad():  # the one random draw of each: the new classifier
        ours.classifier.weight.copy_(theirs.classifier.weight)
        ours.classifier.bias.copy_(theirs.classifier.bias)
    optimizer = create_optimizer(ours, learning_rate=config.learning_rate, **config.adamw_settings())
    scheduler = create_scheduler(optimizer, warmup_steps=WARMUP, max_steps=STEPS, **config.schedule_settings(STEPS))
    no_decay = {n for n, _ in theirs.named_parameters() if n.endswith("bias") or "LayerNorm" in n}
    reference = torch.optim.AdamW(
        [
            {"params": [p for n, p in theirs.named_parameters() if n not in no_decay], "weight_decay": 0.01},
            {"params": [p for n, p in theirs.named_parameters() if n in no_decay], "weight_decay": 0.0},
        ],
        lr=config.learning_rate,
        eps=1e-6,
    )
    bert_schedule = functools.partial(lr_factor, warmup_steps=WARMUP, max_steps=STEPS, schedule="linear")
    reference_schedule = torch.optim.lr_scheduler.LambdaLR(reference, bert_schedule)
    ours.train(), theirs.train()
    named = dict(theirs.named_parameters())
    for batch in _batches(tmp_path, tokenizer):
        loss = ours(**batch).loss
        loss.backward()
        optimizer_step(ours, optimizer, scheduler, config.max_grad_norm)
        reference_loss = theirs(**batch).loss
        reference_loss.backward()
        torch.nn.utils.clip_grad_norm_(theirs.parameters(), 1.0)
        reference.step()
        reference_schedule.step()
        reference.zero_grad()
        assert loss.item() == pytest.approx(reference_loss.item(), abs=1e-6)
        shared = [n for n, _ in ours.named_parameters() if n in named]
        assert len(shared) > 20  # every weight but the fused attention projections (checked through the loss)
        for name in shared:
            torch.testing.assert_close(dict(ours.named_parameters())[name], named[name], atol=1e-6, rtol=0)


def test_the_schedules_differ_as_documented():
    """BERT's decay from step 0 (the harness) against transformers' decay from the end of the warm-up."""
    steps, warmup = 63, 6  # one epoch of 2,000 rows at batch 32, 10% warm-up
    model = torch.nn.Linear(1, 1)
    hf = transformers.get_linear_schedule_with_warmup(torch.optim.SGD(model.parameters(), lr=1.0), warmup, steps)
    theirs = [hf.lr_lambdas[0](s) for s in range(steps)]
    ours = [lr_factor(s, schedule="linear", warmup_steps=warmup, max_steps=steps) for s in range(steps)]
    assert ours[:warmup] == theirs[:warmup]
    assert ours[warmup] == pytest.approx(1 - warmup / steps) and theirs[warmup] == 1.0
    assert sum(ours) / sum(theirs) == pytest.approx(0.91, abs=0.01)  # about 9% less learning over the run
