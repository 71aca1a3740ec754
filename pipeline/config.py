"""Settings of ``make-shards`` as dataclasses (validated in ``__post_init__``).

Field names are the original generator's flag names (google-research/bert ``create_pretraining_data.py``)
with the same defaults; see ``design/reference-algorithm.md`` "Flags and defaults".
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

PAIRING_SCOPES = ("global", "file")
MASKING_MODES = ("static", "dynamic")
SAMPLING_MODES = ("exact", "fast")


@dataclass(frozen=True)
class InstanceConfig:
    """How instances are made (the reference algorithm's settings)."""

    max_seq_length: int = 128
    """Tokens per instance including [CLS] and both [SEP] (the paper uses 128 for 90% of steps, then 512)."""
    max_predictions_per_seq: int = 20
    """Cap on masked positions per instance (about max_seq_length * masked_lm_prob; 76-80 at 512)."""
    masked_lm_prob: float = 0.15
    """Fraction of tokens to predict (paper section 3.1)."""
    short_seq_prob: float = 0.1
    """Probability that a pass over a document uses a shorter random target length."""
    dupe_factor: int = 10
    """Passes over the corpus, each with fresh pairing and masking."""
    random_seed: int = 12345
    """Seed of ``random.Random`` (per bucket: see ``instances.bucket_seed``)."""
    do_whole_word_mask: bool = False
    """Mask whole words (a piece plus its following ``##`` pieces) instead of single pieces."""

    def __post_init__(self) -> None:
        if self.max_seq_length < 5:
            raise ValueError(
                f"max_seq_length must be at least 5 ([CLS] A [SEP] B [SEP] with A and B non-empty), "
                f"got {self.max_seq_length}"
            )
        if self.max_seq_length > 65535:
            raise ValueError(f"max_seq_length must be at most 65535 (positions are stored as uint16), got {self.max_seq_length}")
        if self.max_predictions_per_seq < 1:
            raise ValueError(f"max_predictions_per_seq must be at least 1, got {self.max_predictions_per_seq}")
        if self.max_predictions_per_seq >= self.max_seq_length:
            raise ValueError(
                f"max_predictions_per_seq ({self.max_predictions_per_seq}) must be smaller than max_seq_length "
                f"({self.max_seq_length}); the usual choice is about max_seq_length * masked_lm_prob "
                f"(20 for 128, 76-80 for 512)"
            )
        if not 0.0 < self.masked_lm_prob <= 1.0:
            raise ValueError(f"masked_lm_prob must be in (0, 1], got {self.masked_lm_prob}")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise ValueError(f"short_seq_prob must be in [0, 1], got {self.short_seq_prob}")
        if self.dupe_factor < 1:
            raise ValueError(f"dupe_factor must be at least 1, got {self.dupe_factor}")
        if not 0 <= self.random_seed < 2**32:
            raise ValueError(f"random_seed must be in [0, 2**32), got {self.random_seed}")


@dataclass(frozen=True)
class ShardsConfig:
    """Everything ``make-shards`` needs besides Beam's own options."""

    inputs: tuple[str, ...]
    """Input files, globs or directories (local or any Beam filesystem, e.g. ``gs://``)."""
    vocab: str
    """``vocab.txt`` or ``tokenizer.json``."""
    output_dir: str
    do_lower_case: bool = True
    strip_accents: bool | None = None
    """Strip accents (NFD, combining marks dropped) apart from lower-casing; ``None``: the same as
    ``do_lower_case`` (the original). Recorded in the manifest (``config`` and ``vocab``) only where it differs
    from ``do_lower_case``, so the manifest of a run with the original's behaviour is unchanged."""
    instance: InstanceConfig = field(default_factory=InstanceConfig)
    input_format: str = "auto"
    text_field: str = "text"
    segmenter: str | None = None
    encoding: str = "utf-8"
    max_line_chars: int = 1_000_000
    """Lines longer than this are skipped (and counted) without being read whole."""
    pairing_scope: str = "global"
    """``global``: documents go to seeded random buckets across the whole corpus (a GroupByKey);
    ``file``: a bucket is a run of consecutive documents of one input file (no shuffle, flat memory)."""
    bucket_size: int = 20000
    """Documents per bucket (the NotNext pool and the unit of work; memory per worker grows with it).
    0 = one bucket holding every document, which reproduces the original generator exactly."""
    num_shards: int = 0
    """Output shard files; 0 = choose from the instance count (about 50,000 instances per shard)."""
    masking: str = "static"
    sampling: str = "exact"
    """``exact``: CPython's ``random.Random`` consumed as the original does (one-bucket output = the
    original's); ``fast``: same algorithm and distributions, truncation and masking drawn in bulk (numpy),
    several times faster, not instance-for-instance the original's."""
    overwrite: bool = False

    def __post_init__(self) -> None:
        if not self.inputs:
            raise ValueError("no inputs given")
        if self.pairing_scope not in PAIRING_SCOPES:
            raise ValueError(f"pairing_scope must be one of {PAIRING_SCOPES}, got {self.pairing_scope!r}")
        if self.masking not in MASKING_MODES:
            raise ValueError(f"masking must be one of {MASKING_MODES}, got {self.masking!r}")
        if self.sampling not in SAMPLING_MODES:
            raise ValueError(f"sampling must be one of {SAMPLING_MODES}, got {self.sampling!r}")
        if self.bucket_size < 0:
            raise ValueError(f"bucket_size must be >= 0 (0 = one bucket), got {self.bucket_size}")
        if self.num_shards < 0:
            raise ValueError(f"num_shards must be >= 0 (0 = automatic), got {self.num_shards}")
        if self.strip_accents is not None and not isinstance(self.strip_accents, bool):
            raise ValueError(f"strip_accents must be True, False or None, got {self.strip_accents!r}")

    @property
    def effective_strip_accents(self) -> bool:
        """The accent stripping applied: ``strip_accents``, or ``do_lower_case`` when that is ``None``."""
        return self.do_lower_case if self.strip_accents is None else self.strip_accents

    def to_dict(self) -> dict:
        """The settings as the manifest's ``config`` (instance settings flattened in); ``strip_accents`` only
        where it differs from ``do_lower_case`` (absent = the same, as in the original)."""
        d = dataclasses.asdict(self)
        d.update(d.pop("instance"))
        d["inputs"] = list(self.inputs)
        if self.effective_strip_accents == self.do_lower_case:
            del d["strip_accents"]
        else:
            d["strip_accents"] = self.effective_strip_accents
        return d
