"""Dynamic whole-word masking (the trainer masks as it reads) on shards of a byte-level BPE tokenizer: the words
come from the tokenizer's ``Ġ`` marks, read from the ``tokenizer.json`` beside the shards."""

from __future__ import annotations

import numpy as np
from click.testing import CliRunner

from bertprep.bert_model.pretrain.data import masking_config, masking_vocab
from bertprep.bert_model.pretrain.shard_info import read_shard_info
from bertprep.cli.main import cli
from bertprep.core.pretrained_tokenizer import load_pretrained_tokenizer
from bertprep.pipeline.masking.rule import mask_instance
from bertprep.pipeline.shards.inspection import iter_rows
from conftest import FIXTURES
from tokenizer_factory import roberta_tokenizer_dir


def test_dynamic_whole_word_masking_uses_the_tokenizers_word_marks(tmp_path):
    directory = roberta_tokenizer_dir(tmp_path / "roberta")
    tokenizer = load_pretrained_tokenizer(str(directory))
    args = ["make-shards", "-i", str(FIXTURES / "pipeline" / "a.txt"), "--input-format", "bert", "--vocab", directory]
    args += ["-o", tmp_path / "shards", "--objective", "none", "--masking", "dynamic", "--masking-scheme", "whole-word"]
    args += ["--max-seq-length", "64", "--dupe-factor", "1", "-q", "--direct_num_workers=1"]
    result = CliRunner().invoke(cli, [str(a) for a in args + ["--direct_running_mode=in_memory"]])
    assert result.exit_code == 0, result.output
    info = read_shard_info(str(tmp_path / "shards"))
    assert info.vocab_model == "BPE" and info.special_tokens["[MASK]"] == "<mask>"
    config, vocab = masking_config(info), masking_vocab(info)
    assert config.masking_scheme == "whole-word"
    assert vocab.is_subword.tolist() == tokenizer.is_continuation()
    assert vocab.mask_token_id == tokenizer.mask_token_id and vocab.cls_token_id == tokenizer.cls_token_id
    rng = np.random.default_rng(0)
    several = 0
    for row in iter_rows(str(tmp_path / "shards")):
        ids = np.asarray(row["input_ids"])
        _, positions, _ = mask_instance(ids, config, vocab, rng)
        masked = set(positions.tolist())
        # every word (a Ġ piece and the pieces after it, up to a special token) is masked whole or not at all
        word: list[int] = []
        for position, token in enumerate([*ids.tolist(), -1]):
            starts = token == -1 or token in (vocab.cls_token_id, vocab.sep_token_id) or not vocab.is_subword[token]
            if starts and word:
                assert len(masked & set(word)) in (0, len(word))
                several += len(word) > 1 and bool(masked & set(word))
                word = []
            if token not in (-1, vocab.cls_token_id, vocab.sep_token_id):
                word.append(position)
    assert several > 10
