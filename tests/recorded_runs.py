"""The runs whose per-step losses are recorded in ``tests/fixtures/train/default_runs.json``: the trainer with
none of the schedule / optimizer / batch-size / phase options, as it trained before they existed.

The recording was made by ``python tests/recorded_runs.py OUT.json`` on the code before those options were
added; ``test_recipes.test_defaults_train_as_recorded`` runs the same configurations and compares step by step.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

#: The recorded configurations (besides shards and output_dir), on ``model_factory.tiny_train_config``'s tiny
#: model and run (batch 8, 2 warm-up steps, learning rate 1e-3, shuffling on): BERT with gradient accumulation
#: and ModernBERT, dropout on, 6 steps with a decay, one metrics line per step.
RUNS = {
    "bert": dict(gradient_accumulation_steps=2),
    "modernbert": dict(architecture="modernbert"),
}
COMMON = dict(max_steps=6, log_every=1)
#: What is compared of each training metrics line.
FIELDS = ("step", "loss", "mlm_loss", "lr", "grad_norm", "tokens_seen")


def run_records(name: str, shards: Path, out: Path) -> list[dict]:
    """Train run ``name`` on ``shards/train`` into ``out``; its training lines, ``FIELDS`` only."""
    import torch

    from bertprep.bert_model.pretrain.trainer import train
    from model_factory import tiny_train_config

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train(tiny_train_config(shards / "train", out, **RUNS[name], **COMMON))
    finally:
        torch.set_num_threads(threads)
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: line.get(k) for k in FIELDS} for line in lines if line["split"] == "train"]


def record(path: str) -> None:
    """Write every run's records to ``path`` (JSON), on the ``tiny_shards`` fixture's shards."""
    from shard_factory import write_shard_dir

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_shard_dir(root / "train", num_shards=4, rows_per_shard=40, vocab_size=64, max_seq_length=32, seed=1)
        result = {name: run_records(name, root, root / name) for name in RUNS}
    Path(path).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    record(sys.argv[1])
