"""The tiny models and tiny pre-training runs the tests build, in one place.

TINY = tiny_bert(vocab_size=99)                        # kwargs for BertConfig (or transformers.BertConfig)
TINY = tiny_modernbert(vocab_size=101, cls_token_id=1, sep_token_id=2)   # kwargs for ModernBertConfig
roberta = write_tiny_roberta(tmp_path / "roberta")      # a Hugging Face RoBERTa directory with its own BPE
write_uncased_vocab(hf_dir, tokens)                     # vocab.txt + tokenizer_config.json beside a BERT's weights
config = tiny_train_config(shards, out, max_steps=4)   # a TrainConfig: the tiny preset narrowed to H=32
config = init_from_train_config(shards, out, hf_dir)   # the same run, the model from a checkpoint
args = tiny_train_args(shards, out, "--max-steps", "2")  # `bertprep train` of that model, batches of 8

Each returns a fresh object; a test states only where it differs from these settings.
"""

from __future__ import annotations

from pathlib import Path


def tiny_bert(vocab_size: int, **overrides) -> dict:
    """Keyword arguments of a 2-layer BERT (Hugging Face ``BertConfig`` field names): H=32, 2 heads, FFN 48,
    64 positions, ``vocab_size`` entries; ``overrides`` replace or add fields (``intermediate_size=64``,
    ``pad_token_id=0``, ``hidden_dropout_prob=0.0`` ...)."""
    values = dict(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=48,
        max_position_embeddings=64,
    )
    return {**values, **overrides}


def tiny_modernbert(vocab_size: int, *, cls_token_id: int = 2, sep_token_id: int = 3, **overrides) -> dict:
    """Keyword arguments of a 4-layer ModernBERT (Hugging Face ``ModernBertConfig`` field names): H=32, 2 heads,
    FFN 48, 64 positions, layers 0 and 3 global and a local window of 8 tokens, [PAD] id 0, BOS = [CLS] and
    EOS = [SEP] (ids 2 and 3, the order of a vocab trained by build-vocab); ``overrides`` replace or add fields."""
    values = dict(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=4,
        num_attention_heads=2,
        max_position_embeddings=64,
        local_attention=8,
        pad_token_id=0,
        cls_token_id=cls_token_id,
        sep_token_id=sep_token_id,
        bos_token_id=cls_token_id,
        eos_token_id=sep_token_id,
    )
    return {**values, **overrides}


def write_uncased_vocab(directory: Path, tokens: list[str]) -> None:
    """What a Hugging Face BERT directory holds for its tokenizer beside the weights ``save_pretrained`` wrote:
    ``vocab.txt`` (``tokens``, one a line; the line number is the id) and a ``tokenizer_config.json`` saying
    ``do_lower_case``."""
    import json

    (directory / "vocab.txt").write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    (directory / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}), encoding="utf-8")


def write_tiny_roberta(directory: Path) -> Path:
    """A Hugging Face RoBERTa directory made offline: a random-weight ``RobertaForMaskedLM`` (transformers'
    ``save_pretrained``; H=32, 2 layers, 2 heads, FFN 64, 64 positions after RoBERTa's offset of 2, one token type)
    beside a byte-level BPE tokenizer trained in the test (``tokenizer_factory.roberta_tokenizer_dir``: ``<s>``=0,
    ``<pad>``=1, ``</s>``=2). Seeded: the same weights every time. Returns ``directory``."""
    import json

    import torch
    import transformers

    from tokenizer_factory import roberta_tokenizer_dir

    roberta_tokenizer_dir(directory)
    vocab_size = len(json.loads((directory / "tokenizer.json").read_text())["model"]["vocab"])
    special = dict(type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2)
    config = transformers.RobertaConfig(
        **tiny_bert(vocab_size, max_position_embeddings=64 + 2, intermediate_size=64, **special)
    )
    torch.manual_seed(0)
    transformers.RobertaForMaskedLM(config).save_pretrained(directory)
    return directory


#: What every tiny run shares: batch 8, 8 steps (2 of warm-up), learning rate 1e-3, a log line every 2 steps, no
#: checkpoint before the last, data read in the main process, a shuffle buffer of 32, no progress bar.
TINY_RUN = dict(
    batch_size=8,
    max_steps=8,
    warmup_steps=2,
    learning_rate=1e-3,
    log_every=2,
    save_every=0,
    num_workers=0,
    shuffle_buffer_size=32,
    progress=False,
)


def tiny_train_config(shards: str | Path, output_dir: str | Path, **overrides):
    """A ``TrainConfig`` of :data:`TINY_RUN` on a model of the ``tiny`` preset narrowed to H=32 and 2 heads;
    ``overrides`` replace or add ``TrainConfig`` fields (``architecture="modernbert"``, ``max_steps=4`` ...)."""
    from bertprep.bert_model.pretrain.trainer import TrainConfig

    model = dict(preset="tiny", hidden_size=32, num_attention_heads=2)
    return TrainConfig(**{**TINY_RUN, **model, "shards": str(shards), "output_dir": str(output_dir), **overrides})


def tiny_train_args(shards: str | Path, output_dir: str | Path, *options: str, batch_size: int = 8) -> list[str]:
    """The arguments of ``bertprep train`` (after the program name) on ``shards`` into ``output_dir`` of the model
    of :func:`tiny_train_config` (the ``tiny`` preset narrowed to H=32 and 2 heads), ``batch_size`` rows a batch,
    then ``options``."""
    model = ["--preset", "tiny", "--hidden-size", "32", "--num-attention-heads", "2"]
    return ["train", "--shards", str(shards), "-o", str(output_dir), *model, "--batch-size", str(batch_size), *options]


def init_from_train_config(shards: str | Path, output_dir: str | Path, init_from: str | Path, **overrides):
    """A ``TrainConfig`` of :data:`TINY_RUN` (a shuffle buffer of 16) that starts from the model of ``init_from``
    (a run or a Hugging Face directory); ``overrides`` replace or add ``TrainConfig`` fields."""
    from bertprep.bert_model.pretrain.trainer import TrainConfig

    paths = dict(shards=str(shards), output_dir=str(output_dir), init_from=str(init_from))
    return TrainConfig(**{**TINY_RUN, "shuffle_buffer_size": 16, **paths, **overrides})


def tiny_modernbert_own_rope() -> dict:
    """:func:`tiny_modernbert` with 101 entries, [CLS] and [SEP] ids 1 and 2, 4 heads, and RoPE bases other than
    the defaults and different from each other (global 1000, local 50), so that a swap of the two would show."""
    return tiny_modernbert(
        vocab_size=101, cls_token_id=1, sep_token_id=2, num_attention_heads=4, global_rope_theta=1000.0,
        local_rope_theta=50.0,
    )  # fmt: skip
