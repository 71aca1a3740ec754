"""Fidelity: make-shards in one-bucket mode equals the original generator's output exactly.

The oracle is ``shared/data/golden/``: google-research/bert ``create_pretraining_data.py`` (eedf571) run
unchanged on three inputs (plus Google's sample text), every feature of every instance, in its output
order. Each case runs the real Beam pipeline (one bucket, documents in input order, the same seed) and
compares every row field by field.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from bertprep.pipeline.beam.run import run_make_shards
from bertprep.pipeline.config import InstanceConfig, ShardsConfig
from bertprep.pipeline.shards.inspection import iter_rows

IN_PROCESS = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]

CASES = {
    # golden file: (input, vocab, do_lower_case, InstanceConfig kwargs), flags as in golden/README.md
    "sample_text.default": ("samples/sample_text.txt", "bert-base-uncased-vocab.txt", True, {}),
    "wiki8.wwm-seq64": (
        "golden/wiki8.txt",
        "bert-base-uncased-vocab.txt",
        True,
        dict(do_whole_word_mask=True, max_seq_length=64, max_predictions_per_seq=10, dupe_factor=2, random_seed=7),
    ),
    "edge.seq64": (
        "golden/edge.txt",
        "bert-base-uncased-vocab.txt",
        True,
        dict(max_seq_length=64, max_predictions_per_seq=10, dupe_factor=5, random_seed=99),
    ),
    "books2.cased": (
        "golden/books2.txt",
        "bert-base-cased-vocab.txt",
        False,
        dict(dupe_factor=3, random_seed=42, short_seq_prob=0.3),
    ),
}


def _golden_rows(path: Path) -> list[dict]:
    """The original's padded features, unpadded to our row form."""
    rows = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            g = json.loads(line)
            n = sum(g["input_mask"])
            m = int(sum(g["masked_lm_weights"]))
            rows.append(
                {
                    "input_ids": g["input_ids"][:n],
                    "token_type_ids": g["segment_ids"][:n],
                    "masked_lm_positions": g["masked_lm_positions"][:m],
                    "masked_lm_ids": g["masked_lm_ids"][:m],
                    "next_sentence_label": g["next_sentence_labels"][0],
                }
            )
    return rows


@pytest.mark.parametrize("memory_budget", [ShardsConfig.memory_budget, 0], ids=["in-memory", "spilled"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_one_bucket_mode_reproduces_the_original_generator(name, memory_budget, shared_data, tmp_path):
    input_file, vocab_file, lower, kwargs = CASES[name]
    config = ShardsConfig(
        inputs=(str(shared_data / input_file),),
        vocab=str(shared_data / "vocab" / vocab_file),
        output_dir=str(tmp_path / "shards"),
        do_lower_case=lower,
        instance=InstanceConfig.from_flat(**kwargs),
        input_format="bert",
        bucket_size=0,  # one bucket: the original generator exactly
        num_shards=3,
        memory_budget=memory_budget,  # 0: every document waits on disk (beam/spill.py)
    )
    manifest = run_make_shards(config, IN_PROCESS)
    expected = _golden_rows(shared_data / "golden" / f"{name}.jsonl.gz")
    got = list(iter_rows(str(tmp_path / "shards"), manifest))
    assert len(got) == len(expected)
    for k, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert g == e, f"{name}: instance {k} differs from the original generator's"
    assert manifest["statistics"]["instances"] == len(expected)
    shard_rows = [s["rows"] for s in manifest["shards"]]
    assert sum(shard_rows) == len(expected) and max(shard_rows) - min(shard_rows) <= 1
