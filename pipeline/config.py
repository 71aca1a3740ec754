"""Settings of ``make-shards`` as dataclasses (validated in ``__post_init__``), each declared once.

Field names are the original generator's flag names (google-research/bert ``create_pretraining_data.py``)
with the same defaults; see ``design/reference-algorithm.md`` "Flags and defaults". :class:`ShardsConfig` holds an
:class:`InstanceConfig`, which holds a :class:`MaskingConfig` (the masked-LM rule's settings, which the trainer's
dynamic masking reads back from a manifest too). Standard library only: every stage, and ``bert_model``, imports
it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

PAIRING_SCOPES = ("global", "file")
MASKING_MODES = ("static", "dynamic")
#: ``--sampling``: ``auto`` (the default) is ``exact`` with one bucket (``bucket_size=0``), ``fast`` otherwise
#: (``ShardsConfig.effective_sampling``).
SAMPLING_MODES = ("auto", "exact", "fast")
#: Document deduplication (``--dedup``): ``none``, ``exact`` (equal normalised text; see ``heldout.py``) or
#: ``minhash`` (near-duplicates: estimated Jaccard of word n-grams; see ``near_dedup.py``).
DEDUP_MODES = ("none", "exact", "minhash")
#: ``--decontaminate-mode``: drop a matching document, or cut its matching sentences (``decontamination.py``).
DECONTAMINATE_MODES = ("drop", "cut")
#: Pre-training objectives (``--objective``): what a row holds besides the masked LM (see InstanceConfig.objective).
OBJECTIVES = ("nsp", "sop", "none")
#: ``--masking-scheme`` choices: what one masking decision covers (``masking/schemes.py``).
MASKING_SCHEMES = ("token", "whole-word", "ngram", "span")
#: SpanBERT's span lengths (Joshi et al. 2020, section 3.1): Geo(p = 0.2) words, clipped at 10 (mean 3.8).
SPAN_GEOMETRIC_P = 0.2
MAX_SPAN_LENGTH = 10
#: The ERNIE / Megatron-LM n-gram variant: n words with probability proportional to 1/n, n <= 3.
MAX_NGRAM_SIZE = 3


@dataclass(frozen=True)
class ReadOptions:
    """How input files are read: the readers' settings and their defaults, declared once. ``ShardsConfig``
    carries them as fields of the same names (make-shards); build-vocab and the readers' functions take them as
    keywords with these defaults."""

    input_format: str = "auto"
    """One of ``readers.INPUT_FORMATS``; ``auto``: detected per file from its extension and content."""
    text_field: str = "text"
    """Field holding the document text in jsonl / parquet / hf input."""
    encoding: str = "utf-8"
    """Text encoding of the inputs; undecodable bytes are replaced and counted."""
    max_line_chars: int = 1_000_000
    """Lines longer than this are skipped (and counted) without being read whole. One JSON line holds a whole
    document; the longest English Wikipedia articles have a few hundred thousand characters of text (the
    longest line of the shared WikiExtractor JSON sample: 36 K), so 1 M keeps real documents while a corrupt
    file without newlines cannot exhaust memory (at most 4 MB of a line is buffered)."""


@dataclass(frozen=True)
class MaskingConfig:
    """The masked-LM rule's settings (BERT paper section 3.1 and the masking schemes): make-shards' static
    masking (``InstanceConfig.mlm``) and the trainer's dynamic masking (read back from a manifest) use the
    same one; the rule itself is ``masking/rule.py``."""

    max_predictions_per_seq: int = 20
    """Cap on masked positions per instance (about max_seq_length * masked_lm_prob; 76-80 at 512)."""
    masked_lm_prob: float = 0.15
    """Fraction of tokens to predict (paper section 3.1)."""
    do_whole_word_mask: bool = False
    """Mask whole words (a piece plus its following ``##`` pieces) instead of single pieces."""
    masking_scheme: str = "token"
    """What one masking decision covers, one of :data:`MASKING_SCHEMES`: ``token`` (single pieces, the original's
    default), ``whole-word`` (the same as ``do_whole_word_mask``), ``ngram`` (n consecutive words, P(n)
    proportional to 1/n, n <= ``max_ngram_size``; ERNIE / Megatron-LM) or ``span`` (SpanBERT: span lengths in
    words from a geometric distribution, ``span_geometric_p``, at most ``max_span_length``). Word boundaries:
    whitespace + punctuation (a piece and its ``##`` pieces), or the word segmenter's
    (``ShardsConfig.word_segmenter``). See ``masking/schemes.choose_word_spans``."""
    max_ngram_size: int = MAX_NGRAM_SIZE
    """Longest n-gram, in words, of ``masking_scheme="ngram"``."""
    span_geometric_p: float = SPAN_GEOMETRIC_P
    """p of the geometric span length (in words) of ``masking_scheme="span"`` (SpanBERT: 0.2)."""
    max_span_length: int = MAX_SPAN_LENGTH
    """Longest span, in words, of ``masking_scheme="span"`` (SpanBERT: 10)."""

    @property
    def effective_masking_scheme(self) -> str:
        """``masking_scheme``, with ``do_whole_word_mask`` meaning ``whole-word``."""
        return "whole-word" if self.do_whole_word_mask else self.masking_scheme

    def __post_init__(self) -> None:
        if self.max_predictions_per_seq < 1:
            raise ValueError(f"max_predictions_per_seq must be at least 1, got {self.max_predictions_per_seq}")
        if not 0.0 < self.masked_lm_prob <= 1.0:
            raise ValueError(f"masked_lm_prob must be in (0, 1], got {self.masked_lm_prob}")
        if self.masking_scheme not in MASKING_SCHEMES:
            raise ValueError(f"masking_scheme must be one of {', '.join(MASKING_SCHEMES)}, got {self.masking_scheme!r}")
        if self.do_whole_word_mask and self.masking_scheme not in ("token", "whole-word"):
            raise ValueError(
                f"--do-whole-word-mask is --masking-scheme whole-word; it cannot be combined with "
                f"--masking-scheme {self.masking_scheme} (which masks whole words already): drop one"
            )
        if self.max_ngram_size < 1:
            raise ValueError(f"max_ngram_size must be at least 1, got {self.max_ngram_size}")
        if not 0.0 < self.span_geometric_p <= 1.0:
            raise ValueError(f"span_geometric_p must be in (0, 1], got {self.span_geometric_p}")
        if self.max_span_length < 1:
            raise ValueError(f"max_span_length must be at least 1, got {self.max_span_length}")


@dataclass(frozen=True)
class InstanceConfig:
    """How instances are made (the reference algorithm's settings); the masking ones are :attr:`mlm`'s."""

    max_seq_length: int = 128
    """Tokens per instance including [CLS] and both [SEP] (the paper uses 128 for 90% of steps, then 512)."""
    mlm: MaskingConfig = field(default_factory=MaskingConfig)
    """The masked-LM rule's settings (``max_predictions_per_seq``, ``masked_lm_prob``, the scheme); ``masking``
    (static or dynamic) is :class:`ShardsConfig`'s."""
    short_seq_prob: float = 0.1
    """Probability that a pass over a document uses a shorter random target length."""
    dupe_factor: int = 10
    """Passes over the corpus, each with fresh pairing and masking."""
    random_seed: int = 12345
    """Seed of ``random.Random`` (per bucket: see ``instances.bucket_seed``)."""
    objective: str = "nsp"
    """The sentence-level task besides the masked LM, one of :data:`OBJECTIVES`:

    * ``nsp``: next-sentence prediction, the original (BERT paper section 3.1): B follows A in the document
      or (50%) is a segment of another document; ``next_sentence_label`` 1 = NotNext.
    * ``sop``: sentence-order prediction (ALBERT, Lan et al. 2020, section 4.2): A and B are always
      consecutive segments of one document, swapped with probability 0.5; ``next_sentence_label`` 1 = swapped.
      A chunk of one sentence is merged with the next sentence, or skipped (and counted) at a document's end,
      never paired with another document.
    * ``none``: no sentence task (RoBERTa, Liu et al. 2019, section 4.2, FULL-SENTENCES): the documents'
      sentences back to back, a ``[SEP]`` between documents, cut into rows of exactly ``max_seq_length``
      tokens (``[CLS] ... [SEP]``); no ``next_sentence_label`` column, ``token_type_ids`` all 0;
      ``short_seq_prob`` is not used.
    """

    def __post_init__(self) -> None:
        if self.max_seq_length < 5:
            raise ValueError(
                f"max_seq_length must be at least 5 ([CLS] A [SEP] B [SEP] with A and B non-empty), "
                f"got {self.max_seq_length}"
            )
        if self.max_seq_length > 65535:
            raise ValueError(
                f"max_seq_length must be at most 65535 (positions are stored as uint16), got {self.max_seq_length}"
            )
        if self.mlm.max_predictions_per_seq >= self.max_seq_length:
            raise ValueError(
                f"max_predictions_per_seq ({self.mlm.max_predictions_per_seq}) must be smaller than "
                f"max_seq_length ({self.max_seq_length}); the usual choice is about max_seq_length * masked_lm_prob "
                f"(20 for 128, 76-80 for 512)"
            )
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise ValueError(f"short_seq_prob must be in [0, 1], got {self.short_seq_prob}")
        if self.dupe_factor < 1:
            raise ValueError(f"dupe_factor must be at least 1, got {self.dupe_factor}")
        if not 0 <= self.random_seed < 2**32:
            raise ValueError(f"random_seed must be in [0, 2**32), got {self.random_seed}")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}")

    @classmethod
    def from_flat(cls, **settings) -> InstanceConfig:
        """The config of flat settings, as the command line and the manifest name them (:meth:`to_dict`'s
        keys): the masking ones go to :attr:`mlm`. Raises ``ValueError`` as the two classes do, ``TypeError``
        for a name that is neither's."""
        masking = {k: settings.pop(k) for k in list(settings) if k in _MASKING_FIELDS}
        return cls(mlm=MaskingConfig(**masking), **settings)

    def to_dict(self) -> dict:
        """The settings flat, in the order the manifest's ``config`` has always listed them (the original's
        flags first, then ours)."""
        flat = {**dataclasses.asdict(self.mlm), **dataclasses.asdict(self)}
        del flat["mlm"]
        return {name: flat[name] for name in _MANIFEST_ORDER}


_MASKING_FIELDS = frozenset(f.name for f in dataclasses.fields(MaskingConfig))
#: The order of :meth:`InstanceConfig.to_dict` (every field of InstanceConfig and MaskingConfig).
_MANIFEST_ORDER = (
    "max_seq_length",
    "max_predictions_per_seq",
    "masked_lm_prob",
    "short_seq_prob",
    "dupe_factor",
    "random_seed",
    "do_whole_word_mask",
    "objective",
    "masking_scheme",
    "max_ngram_size",
    "span_geometric_p",
    "max_span_length",
)


@dataclass(frozen=True)
class Source:
    """One source of a weighted mixture (``--source NAME=GLOBS:WEIGHT``, ``--mixture FILE.json``)."""

    name: str
    """Its name in the manifest and in the sampling hash (unique among the sources)."""
    inputs: tuple[str, ...]
    """Its input files, globs or directories (as ``-i``)."""
    weight: float = 1.0
    """Sampling rate, a multiplier of the source's word pieces: 2.0 = every document twice, 0.5 = the first
    half of the word pieces in a stable hash order of the documents (whole documents, the last one cut at a
    sentence), 1.5 = every document once plus such a half (``mixture.py``)."""

    def __post_init__(self) -> None:
        if not self.name or "=" in self.name:
            raise ValueError(f"a source needs a name without '=' (--source NAME=GLOBS:WEIGHT), got {self.name!r}")
        if not self.inputs:
            raise ValueError(f"source {self.name!r} has no inputs (--source {self.name}=GLOBS:WEIGHT)")
        if not self.weight > 0 or self.weight != self.weight or self.weight == float("inf"):
            raise ValueError(
                f"source {self.name!r}: weight must be a finite number > 0 (a document sampling rate: 0.5 keeps "
                f"half the documents, 2 repeats each twice; leave a source out to drop it), got {self.weight}"
            )


#: Evaluation texts of ``--decontaminate`` with fewer words are not matched (GPT-3's shortest n-gram, appendix C).
DECONTAMINATE_MIN_WORDS = 8

#: The smallest ``--split-bytes`` the command line takes (besides 0): each range is a Beam element whose reader
#: opens the file and seeks, so tiny ranges cost more than they spread (``--split-bytes 1`` on a 400 KB file
#: planned 400,000 ranges and ran on). Library callers (tests) may go lower; the output is the same.
MIN_SPLIT_BYTES = 1 << 20


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
    input_format: str = ReadOptions.input_format
    text_field: str = ReadOptions.text_field
    segmenter: str | None = None
    """Sentence segmenter for prose formats; ``None``: the readers' default (``segmentation.DEFAULT_SEGMENTER``)."""
    encoding: str = ReadOptions.encoding
    max_line_chars: int = ReadOptions.max_line_chars
    """Lines longer than this are skipped (and counted) without being read whole."""
    pairing_scope: str = "global"
    """``global``: documents go to seeded random buckets across the whole corpus (a GroupByKey);
    ``file``: a bucket is a run of consecutive documents of one input file (no shuffle, flat memory)."""
    bucket_size: int | None = None
    """Documents per bucket (the NotNext pool and the unit of work); ``None`` (the default): buckets sized by
    word pieces, ``bucket_tokens`` each (``buckets.py``); 0 = one bucket holding every document, which
    reproduces the original generator exactly."""
    bucket_tokens: int = 500_000
    """Word pieces per bucket when ``bucket_size`` is ``None``: bounds a bucket's memory (about 4 bytes per
    word piece, x ``dupe_factor`` in rows) and lets a small corpus spread over every worker; the bucket count
    is capped so that a bucket holds at least ``buckets.MIN_DOCUMENTS_PER_BUCKET`` documents on average."""
    num_shards: int = 0
    """Output shard files; 0 = choose from the instance count (about 50,000 instances per shard)."""
    masking: str = "static"
    sampling: str = "auto"
    """``exact``: CPython's ``random.Random`` consumed as the original does (one-bucket output = the
    original's); ``fast``: same algorithm and distributions, truncation and masking drawn in bulk (numpy),
    several times faster, not instance-for-instance the original's; ``auto`` (the default): ``exact`` when
    ``bucket_size`` is 0 (one bucket, where exact sampling gives the original's output), ``fast`` otherwise
    (several buckets are not the original's instances anyway). See :attr:`effective_sampling`."""
    overwrite: bool = False
    eval_fraction: float = 0.0
    """Share of documents held out, whole, into a second shard set ``<output_dir>/eval/`` (made with the same
    options, NotNext drawn from eval documents only); 0 = no split. A document is held out when a stable hash
    of (``eval_seed``, input path, document ordinal) falls below it (``heldout.py``)."""
    eval_seed: int = 0
    """Seed of the held-out split's hash, apart from ``random_seed``: shard sets made with other random seeds
    keep the same eval documents."""
    word_segmenter: str | None = None
    """Word boundaries for word-level masking schemes: ``module:callable`` (``str -> list[str]`` of words) or a
    built-in name (``jieba``, ``kiwi``); ``None``: whitespace + punctuation (``word_segmentation.py``)."""
    word_ids: bool = False
    """Write the ``word_ids`` column (word index of each piece in its row, -1 at [CLS]/[SEP]). Always written
    with a ``word_segmenter`` (the trainer's dynamic masking and ``inspect`` need the segmenter's words)."""
    dedup: str = "none"
    """``none``; ``exact``: documents whose normalised text is equal are kept once, the first in input order
    (``heldout.py``); ``minhash``: a document is dropped when an earlier one (input order) is a near-duplicate,
    estimated Jaccard of word ``dedup_ngram``-grams >= ``dedup_threshold`` (``near_dedup.py``); counted in the
    manifest."""
    dedup_threshold: float = 0.8
    """``dedup="minhash"``: Jaccard similarity (of word n-gram sets) from which two documents are near-copies."""
    dedup_ngram: int = 3
    """``dedup="minhash"``: words per shingle. 3: at the default threshold 0.8 a copy with about 3% of its words
    edited is still a near-copy (5-grams: about 1%; ``benchmarks/dedup.md``)."""
    sources: tuple[Source, ...] = ()
    """A weighted mixture (``mixture.py``): the sources, in reading order; ``inputs`` is then their inputs
    together. Empty: no mixture (every document once)."""
    mixture_alpha: float | None = None
    """Temperature sampling over the sources (XLM-R): source i's share of the documents' bytes becomes
    proportional to ``n_i ** alpha`` (``n_i``: its input bytes); replaces the weights."""
    decontaminate: tuple[str, ...] = ()
    """Evaluation files (GLUE TSV, SQuAD JSON, SWAG CSV, plain text) whose word n-grams are removed from the
    training text (``decontamination.py``)."""
    decontaminate_ngram: int = 13
    """Words per n-gram of decontamination (after lower-casing and stripping punctuation; GPT-3 uses 13)."""
    decontaminate_mode: str = "drop"
    """``drop``: drop a document with any matching n-gram; ``cut``: drop only the sentences a match covers."""
    split_bytes: int = 8 << 20
    """Bytes per range when one input file is read by several workers (``readers.ranges``): a larger file of
    a format that can be cut at document boundaries is read in ranges of about this size, spread over the
    workers; 0 = every file read whole. The ``global`` pairing scope only (``file`` keeps a file's buckets
    in its order: one worker per file). Does not change the output: not in the manifest."""
    memory_budget: int = 32
    """MB of tokenized documents (word-piece ids and sentence lengths, 4 bytes per word piece) that Beam's
    local runner keeps in memory for the ``global`` scope's shuffle, over all its worker processes; the
    documents beyond it wait in the run's staging folder on disk (``beam/spill.py``), so memory stays flat in
    the corpus size. The runner's process holds about 5-7 bytes per byte kept (``benchmarks/scale.md``); 0:
    every document on disk. Other runners (Dask, Dataflow) shuffle out of memory themselves and ignore it. Does
    not change the output: not in the manifest."""

    def __post_init__(self) -> None:
        if not self.inputs:
            raise ValueError("no inputs given")
        if self.pairing_scope not in PAIRING_SCOPES:
            raise ValueError(f"pairing_scope must be one of {PAIRING_SCOPES}, got {self.pairing_scope!r}")
        if self.masking not in MASKING_MODES:
            raise ValueError(f"masking must be one of {MASKING_MODES}, got {self.masking!r}")
        if self.sampling not in SAMPLING_MODES:
            raise ValueError(f"sampling must be one of {SAMPLING_MODES}, got {self.sampling!r}")
        if self.bucket_size is not None and self.bucket_size < 0:
            raise ValueError(f"--bucket-size must be >= 0 (0 = one bucket), got {self.bucket_size}")
        if self.bucket_tokens < 1:
            raise ValueError(f"--bucket-tokens must be >= 1 (word pieces per bucket), got {self.bucket_tokens}")
        if self.num_shards < 0:
            raise ValueError(f"num_shards must be >= 0 (0 = automatic), got {self.num_shards}")
        if self.strip_accents is not None and not isinstance(self.strip_accents, bool):
            raise ValueError(f"strip_accents must be True, False or None, got {self.strip_accents!r}")
        if not 0.0 <= self.eval_fraction < 1.0:
            raise ValueError(
                f"--eval-fraction must be in [0, 1) (the share of documents held out for "
                f"evaluation, e.g. 0.01; 0 = no split), got {self.eval_fraction}"
            )
        if not 0 <= self.eval_seed < 2**32:
            raise ValueError(f"--eval-seed must be in [0, 2**32), got {self.eval_seed}")
        if not isinstance(self.memory_budget, int) or self.memory_budget < 0:
            raise ValueError(
                f"--memory-budget must be an integer >= 0 (MB; 0 = spill every document), got {self.memory_budget!r}"
            )
        if not isinstance(self.split_bytes, int) or self.split_bytes < 0:
            raise ValueError(f"--split-bytes must be an integer >= 0 (0 = files read whole), got {self.split_bytes!r}")
        if self.dedup not in DEDUP_MODES:
            raise ValueError(f"--dedup must be one of {', '.join(DEDUP_MODES)}, got {self.dedup!r}")
        if not 0.0 < self.dedup_threshold <= 1.0:
            raise ValueError(f"--dedup-threshold must be in (0, 1] (a Jaccard similarity), got {self.dedup_threshold}")
        if self.dedup_ngram < 1:
            raise ValueError(f"--dedup-ngram must be >= 1 (words per shingle), got {self.dedup_ngram}")
        self._check_mixture()
        if self.decontaminate_ngram < 1:
            raise ValueError(f"--decontaminate-ngram must be >= 1 (words per n-gram), got {self.decontaminate_ngram}")
        if self.decontaminate_mode not in DECONTAMINATE_MODES:
            raise ValueError(
                f"--decontaminate-mode must be one of {', '.join(DECONTAMINATE_MODES)}, got {self.decontaminate_mode!r}"
            )

    def _check_mixture(self) -> None:
        names = [s.name for s in self.sources]
        doubled = sorted({n for n in names if names.count(n) > 1})
        if doubled:
            raise ValueError(f"source names must be unique; given more than once: {', '.join(doubled)}")
        if self.mixture_alpha is not None:
            if not self.sources:
                raise ValueError("--mixture-alpha needs sources (--source NAME=GLOBS or --mixture FILE.json)")
            if not 0.0 <= self.mixture_alpha <= 1.0:
                raise ValueError(f"--mixture-alpha must be in [0, 1] (XLM-R uses 0.3), got {self.mixture_alpha}")
            if any(s.weight != 1.0 for s in self.sources):
                raise ValueError(
                    "give source weights or --mixture-alpha, not both (alpha sets every source's rate from its size)"
                )
        if self.sources and self.pairing_scope == "file":
            raise ValueError(
                "weighted sources (--source, --mixture) need --pairing-scope global: a source's budget of word "
                "pieces is cut where it runs out in the order of all its documents, which needs every document "
                "tokenized before any is sampled, and copies must spread over buckets, while the file scope makes "
                "instances from runs of one file as it reads them"
            )

    @property
    def effective_sampling(self) -> str:
        """The sampling mode used, ``exact`` or ``fast``: ``sampling``, with ``auto`` resolved to ``exact`` for
        one bucket (``bucket_size == 0``, the original generator's output) and ``fast`` for any other bucketing.
        Decided from the options alone, never from the data, so that the training and held-out sets of a run,
        and runs on a growing corpus, use the same mode. Every masking mode, scheme and objective supports both."""
        if self.sampling != "auto":
            return self.sampling
        return "exact" if self.bucket_size == 0 else "fast"

    @property
    def writes_word_ids(self) -> bool:
        """Whether the shards get a ``word_ids`` column: asked for, or a word segmenter is given."""
        return self.word_ids or self.word_segmenter is not None

    @property
    def effective_strip_accents(self) -> bool:
        """The accent stripping applied: ``strip_accents``, or ``do_lower_case`` when that is ``None``."""
        return self.do_lower_case if self.strip_accents is None else self.strip_accents

    def reader_kwargs(self) -> dict:
        """The keyword options of ``readers.read_documents`` that come from these settings (text field,
        encoding, longest line, sentence segmenter)."""
        kwargs: dict = {"text_field": self.text_field, "encoding": self.encoding, "max_line_chars": self.max_line_chars}
        if self.segmenter:
            kwargs["segmenter"] = self.segmenter
        return kwargs

    def to_dict(self) -> dict:
        """The settings as the manifest's ``config`` (instance settings flattened in); ``strip_accents`` only
        where it differs from ``do_lower_case`` (absent = the same, as in the original); ``sampling`` the mode
        used (:attr:`effective_sampling`), with ``sampling_requested: "auto"`` beside it where auto chose it."""
        d = dataclasses.asdict(self)
        del d["instance"]
        d.update(self.instance.to_dict())
        d["inputs"] = list(self.inputs)
        if self.effective_strip_accents == self.do_lower_case:
            del d["strip_accents"]
        else:
            d["strip_accents"] = self.effective_strip_accents
        if not self.eval_fraction:  # no split: the manifest of a run without one is unchanged
            del d["eval_fraction"], d["eval_seed"]
        if self.dedup == "none":
            del d["dedup"]
        if self.dedup != "minhash":
            del d["dedup_threshold"], d["dedup_ngram"]
        if not self.sources:
            del d["sources"], d["mixture_alpha"]
        else:
            d["sources"] = [{"name": s.name, "inputs": list(s.inputs), "weight": s.weight} for s in self.sources]
        if not self.decontaminate:
            del d["decontaminate"], d["decontaminate_ngram"], d["decontaminate_mode"]
        else:
            d["decontaminate"] = list(self.decontaminate)
        del d["split_bytes"]  # how the reading is spread over workers; the output is the same
        del d["memory_budget"]  # where the shuffle's documents wait; the output is the same
        # the mode used; what was asked for beside it where that was auto (the choice is then the options')
        d["sampling"] = self.effective_sampling
        if self.sampling != self.effective_sampling:
            d["sampling_requested"] = self.sampling
        # word-level masking: recorded where used, so the manifest of a run without it is unchanged
        # (--do-whole-word-mask alone is recorded as before, by do_whole_word_mask)
        scheme = self.instance.mlm.effective_masking_scheme
        if self.instance.mlm.masking_scheme == "token":
            del d["masking_scheme"]
        if scheme != "ngram":
            del d["max_ngram_size"]
        if scheme != "span":
            del d["span_geometric_p"], d["max_span_length"]
        if self.word_segmenter is None:
            del d["word_segmenter"]
        if not self.writes_word_ids:
            del d["word_ids"]
        else:
            d["word_ids"] = True
        return d
