"""The settings of ``bertprep extract-features`` (:class:`FeatureConfig`) and ``bertprep fill-mask``
(:class:`FillMaskConfig`), and the choices they accept.

Torch-free, so that the commands' ``--help``, which reads its defaults and choices here, imports no torch;
``features.py`` and ``fill_mask.py`` re-export them.
"""

from __future__ import annotations

from dataclasses import dataclass

from bertprep.bert_model.loop_config import DeviceConfig

POOLINGS = ("none", "first-piece", "mean-word", "cls", "mean-sentence")


DTYPES = ("float32", "float16")


@dataclass
class FeatureConfig(DeviceConfig):
    """Settings of ``bertprep extract-features`` (``device`` is :class:`DeviceConfig`'s)."""

    model: str
    """bertprep checkpoint / run directory, fine-tuned model or Hugging Face BERT directory."""
    input_file: str
    """UTF-8 text, one sequence per line; ``A ||| B`` for a pair (blank lines are skipped)."""
    output_file: str
    """Arrow IPC file to write."""
    layers: tuple[int, ...] | None = None
    """Hidden states to write (0 = embeddings, -1 = last layer). None: the last ``min(4, L)`` encoder layers
    (the original's ``-1,-2,-3,-4`` where the model has 4 or more layers, so the default never fails)."""
    pooling: str = "none"
    """none: a vector per word piece; first-piece / mean-word: a vector per word (its first piece, or the mean of
    its pieces); cls: the [CLS] vector; mean-sentence: the mean over all pieces ([CLS]/[SEP] included)."""
    max_seq_length: int | None = None
    """Pieces per sequence, [CLS]/[SEP] included; longer lines are cut (pairs longest-first). None: 128, or the
    model's ``max_position_embeddings`` when smaller (a default that fails on a small model is no default)."""
    batch_size: int = 32
    """Lines per forward pass and per Arrow record batch (what is held in memory at a time)."""
    dtype: str = "float32"
    """Stored activation type (float16 halves the file)."""
    do_lower_case: bool | None = None
    """Lower-case input; None = as recorded with the model."""
    overwrite: bool = False
    """Replace an existing output file."""
    progress: bool = True

    def __post_init__(self) -> None:
        if self.layers is not None:
            self.layers = tuple(int(x) for x in self.layers)
            if not self.layers:
                raise ValueError("give at least one layer")
        if self.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {self.pooling!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.max_seq_length is not None and self.max_seq_length < 3:
            raise ValueError(f"max_seq_length must be at least 3, got {self.max_seq_length}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {self.batch_size}")


@dataclass
class FillMaskConfig(DeviceConfig):
    """The settings of ``bertprep fill-mask`` (:func:`fill_mask_texts`; the CLI reads its defaults here)."""

    model_dir: str
    """A bertprep checkpoint or run directory, or a Hugging Face directory with an MLM head (:func:`load_mlm_model`)."""
    top_k: int = 5
    """Candidates shown per ``[MASK]``."""
    batch_size: int = 32
    """Sentences per forward pass."""
    do_lower_case: bool | None = None
    """Tokenizer casing; None: as recorded with the model, else guessed from its vocab."""
