"""bert_model/collate.py: one padding rule for pre-training rows and fine-tuning features.

(The pre-training columns are checked in test_train_data.py, token labels in test_finetune_e2e.py.)
"""

from __future__ import annotations

import numpy as np
import torch

from bertprep.bert_model.collate import collate, collate_features, pad_sequences


def test_pad_sequences_rounds_up_and_masks():
    ids, types, mask = pad_sequences([[5, 6, 7], [8] * 9], [[0, 0, 1], [1] * 9], pad_token_id=3)
    assert ids.shape == types.shape == mask.shape == (2, 16) and ids.dtype == np.int64
    assert ids[0].tolist() == [5, 6, 7] + [3] * 13
    assert types[0].tolist() == [0, 0, 1] + [0] * 13
    assert mask.sum(1).tolist() == [3, 9]
    assert pad_sequences([[1]], [[0]], pad_to_multiple_of=1)[0].shape == (1, 1)
    assert pad_sequences([[1]], [[0]], pad_to_multiple_of=8)[0].shape == (1, 8)  # at least one multiple


def test_pretraining_and_finetuning_batches_pad_alike():
    seqs = [[2, 10, 11, 3], [2, 12, 3, 13, 14, 15, 16, 17, 18, 3]]
    types = [[0, 0, 0, 0], [0, 0, 0, 1, 1, 1, 1, 1, 1, 1]]
    rows = [
        {
            "input_ids": np.array(s, np.uint16),
            "token_type_ids": np.array(t, np.uint8),
            "masked_lm_positions": np.array([1], np.uint16),
            "masked_lm_ids": np.array([4], np.uint16),
            "next_sentence_label": 0,
        }
        for s, t in zip(seqs, types, strict=True)
    ]
    pretraining = collate(rows, pad_token_id=0)
    finetuning = collate_features(
        [{"input_ids": s, "token_type_ids": t, "labels": 1} for s, t in zip(seqs, types, strict=True)]
    )
    for key in ("input_ids", "token_type_ids", "attention_mask"):
        assert torch.equal(pretraining[key], finetuning[key]), key
    assert finetuning["labels"].tolist() == [1, 1]


def test_multiple_choice_features_keep_their_choices():
    features = [
        {"input_ids": [[2, 5, 3], [2, 6, 6, 3]], "token_type_ids": [[0, 0, 0], [0, 0, 1, 1]], "labels": 1},
        {"input_ids": [[2, 7, 3], [2, 3]], "token_type_ids": [[0, 0, 0], [0, 0]], "labels": 0},
    ]
    batch = collate_features(features, pad_token_id=0)
    assert batch["input_ids"].shape == (2, 2, 8)  # [B, N choices, T]
    assert batch["attention_mask"].sum(-1).tolist() == [[3, 4], [3, 2]]
    assert batch["input_ids"][0, 1, :4].tolist() == [2, 6, 6, 3]
    assert batch["labels"].tolist() == [1, 0]
