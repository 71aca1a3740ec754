"""Settings of ``make-shards`` as dataclasses (validated in ``__post_init__``), each declared once.

Field names are the original generator's flag names (google-research/bert ``create_pretraining_data.py``)
with the same defaults (its ``flags.DEFINE_*`` lines). :class:`ShardsConfig` holds an
:class:`InstanceConfig`, which holds a :class:`MaskingConfig` (the masked-LM rule's settings, which the trainer's
dynamic masking reads back from a manifest too; it lives with the rule, in ``masking/config.py``, which
``bert_model`` imports). Standard library only: every stage imports it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from bertprep.core.normalization import resolve_strip_accents
from bertprep.pipeline.masking.config import MaskingConfig

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
#: What make-shards writes (``shards/formats.py``): bertprep's Arrow shards, MosaicML Streaming's MDS, or
#: Megatron-LM's indexed dataset.
OUTPUT_FORMATS = ("arrow", "mds", "megatron")


@dataclass(frozen=True)
class ReadOptions:
    """How input files are read: the readers' settings and their defaults, declared once. ``ShardsConfig``
    carries them as fields of the same names (make-shards); build-vocab and the readers' functions take them as
    keywords with these defaults."""

    input_format: str = "auto"
    """One of ``readers.INPUT_FORMATS``; ``auto``: detected per file from its extension and content."""
    text_field: str = "text"
    """Field holding the document text in jsonl / parquet / hf input; the header's column of it in csv / tsv
    input (--text-column is the same option)."""
    encoding: str = "utf-8"
    """Text encoding of the inputs; undecodable bytes are replaced and counted."""
    max_line_chars: int = 1_000_000
    """Lines longer than this are skipped (and counted) without being read whole. One JSON line holds a whole
    document; the longest English Wikipedia articles have a few hundred thousand characters of text (the
    longest line of the shared WikiExtractor JSON sample: 36 K), so 1 M keeps real documents while a corrupt
    file without newlines cannot exhaust memory (at most 4 MB of a line is buffered)."""


@dataclass(frozen=True)
class InstanceConfig:
    """How instances are made (the reference algorithm's settings); the masking ones are :attr:`mlm`'s."""

    max_seq_length: int = 128
    """Tokens per instance including [CLS] and both [SEP] (paper: 128 for 90% of steps, then 512)."""
    mlm: MaskingConfig = field(default_factory=MaskingConfig)
    """The masked-LM rule's settings (``max_predictions_per_seq``, ``masked_lm_prob``, the scheme); ``masking``
    (static or dynamic) is :class:`ShardsConfig`'s."""
    short_seq_prob: float = 0.1
    """Probability that a pass over a document targets a shorter random length."""
    dupe_factor: int = 10
    """Passes over the corpus, each with fresh pairing and masking (output grows linearly). Ignored (1) with
    masking ``dynamic``."""
    random_seed: int = 12345
    """Seed (of ``random.Random``, one per bucket); the same input, vocab, options and seed give byte-identical
    shards on any runner."""
    objective: str = "nsp"
    """The sentence-level task besides the masked LM.
    ``nsp``: next-sentence prediction, the original (BERT sec. 3.1): B follows A or (50%) comes from another
    document; next_sentence_label 1 = NotNext.
    ``sop``: sentence-order prediction (ALBERT sec. 4.2, Lan et al. 2020): A and B are consecutive segments of
    one document, swapped half the time; next_sentence_label 1 = swapped; a one-sentence chunk takes the next
    sentence, or is skipped (and counted) at a document's end, never paired with another document.
    ``none``: no sentence task (RoBERTa sec. 4.2, Liu et al. 2019, FULL-SENTENCES): documents back to back with
    a [SEP] between two documents, cut into rows of exactly max_seq_length tokens ([CLS] ... [SEP]; the last row
    of each bucket shorter); no next_sentence_label column, token types all 0, short_seq_prob unused;
    ``bertprep train`` then uses the masked-LM loss alone.
    Recorded in the manifest; both sampling modes honour it."""

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
    """Where NotNext segments come from. ``global``: documents are spread over seeded random buckets across the
    whole corpus, as the original draws from the whole corpus; needs a shuffle (GroupByKey), whose memory grows
    with the corpus on the local runner (not on Dataflow). ``file``: a bucket is a run of consecutive documents
    of one input file; no shuffle, flat memory on any runner, but the NotNext pool is local (do not use it with
    one-document-per-file inputs such as books)."""
    bucket_size: int | None = None
    """Documents per bucket, instead of buckets of bucket_tokens word pieces (the default, ``None``). 0 = one
    bucket holding every document: with pairing_scope ``global`` (and sampling ``auto`` or ``exact``) this
    reproduces the original generator's output exactly (same instances, same order), on one core for instance
    creation."""
    bucket_tokens: int = 500_000
    """Word pieces per bucket (the default bucketing). A bucket is the NotNext pool and the unit of work: buckets
    sized by word pieces keep a worker's memory bounded (about 4 bytes per word piece, x dupe_factor in rows),
    weigh books and articles by what they cost, and spread even a small corpus over every core."""
    num_shards: int = 0
    """Number of output shards; 0 = one per ~50,000 instances. Row counts differ by at most one."""
    masking: str = "static"
    """``static``: masks fixed here, dupe_factor copies (the original). ``dynamic``: unmasked pairs written once;
    the trainer masks on the fly with the same rule."""
    sampling: str = "auto"
    """``exact``: the original generator's random stream, draw for draw (with one bucket the output is the
    original's, instance for instance). ``fast``: the same algorithm and distributions (pairs, truncation, 15%
    masking, 80/10/10) with truncation and masking drawn in bulk with numpy: instance creation takes about 4x
    less CPU, statistically the same, not the original's instances. ``auto``: ``exact`` with bucket_size 0 (the
    original's output), ``fast`` otherwise (several buckets are not the original's instances anyway). The mode
    used is recorded in the manifest. Default output differs from earlier versions' (buckets of 20,000
    documents, exact sampling): bucket_size 20000 with sampling ``exact`` gives that output, bucket_size 0 the
    original's as before."""
    overwrite: bool = False
    eval_fraction: float = 0.0
    """Hold out this share of the documents (whole documents, e.g. 0.01) as a second shard set in
    OUTPUT_DIR/eval/ (its own manifest; use it with ``bertprep train --eval-shards OUTPUT_DIR/eval``). Made with
    the same options; its NotNext segments come from eval documents only. A document is held out when a stable
    hash of (eval_seed, input path, document index in the file) falls below the fraction, so no document is in
    both sets on any runner. 0 = no split."""
    eval_seed: int = 0
    """Seed of the held-out split, apart from random_seed: shard sets made with other random seeds hold out the
    same documents (so none of them trains on another's eval documents)."""
    word_segmenter: str | None = None
    """Word boundaries for the word-level masking schemes, for scripts where whitespace and punctuation do not
    mark words: an importable callable str -> list[str] returning the words of a sentence in order (substrings
    of it), e.g. my_words:words; or a built-in: jieba (Chinese, pip install jieba) or kiwi (Korean morphemes,
    pip install kiwipiepy). It only groups the word pieces (the ids do not change) and implies word_ids. Must be
    importable on every worker (on Dataflow: ship it with --setup_file). Default (``None``): whitespace +
    punctuation."""
    word_ids: bool = False
    """Write a word_ids column (the word index of each piece in its row, -1 at [CLS]/[SEP]); on by itself with a
    word_segmenter, so that dynamic masking in ``bertprep train`` (and ``bertprep inspect``) use the segmenter's
    words."""
    dedup: str = "none"
    """``none``. ``exact``: keep one copy of documents whose text is equal after the tokenizer's normalization
    (case and accents as do_lower_case / strip_accents, whitespace collapsed): the first in input order.
    pairing_scope ``global``: the documents are grouped by a hash of that text (a shuffle, no extra read);
    ``file``: one extra read of the inputs (no tokenization) and a shuffle of hashes and ids only. ``minhash``:
    near-duplicates too: a document is dropped when an earlier one (input order) has an estimated Jaccard
    similarity of word n-grams >= dedup_threshold (MinHash, 128 permutations, LSH bands as shuffle keys; one
    extra read of the inputs in either scope). Dropped copies are counted in the manifest and the log."""
    dedup_threshold: float = 0.8
    """dedup ``minhash``: Jaccard similarity of two documents' word n-gram sets from which the later one is
    dropped."""
    dedup_ngram: int = 3
    """dedup ``minhash``: words per shingle (documents shorter than this are one shingle). Edits weigh more on
    longer shingles: at dedup_threshold 0.8, 3-grams keep a copy with about 3% of its words edited a near-copy,
    5-grams about 1%."""
    sources: tuple[Source, ...] = ()
    """A weighted mixture (``mixture.py``): the sources, in reading order; ``inputs`` is then their inputs
    together. Empty: no mixture (every document once)."""
    mixture_alpha: float | None = None
    """Temperature sampling over the sources instead of weights (XLM-R): source i's share of the data becomes
    proportional to n_i^alpha, n_i its input bytes, at the same total size (0.3 in XLM-R; 1 = as read; 0 = equal
    shares)."""
    decontaminate: tuple[str, ...] = ()
    """Evaluation files whose texts must not be trained on: GLUE .tsv, SQuAD .json, SWAG .csv, or plain text
    (one text per line). A document sharing a word n-gram (decontaminate_ngram, after lower-casing and stripping
    punctuation) with them is dropped or cut (decontaminate_mode); counted per file in the manifest. pairing_scope
    ``global``: before dedup ``exact``; ``file``: as the streaming pass reads, after the dedup pass."""
    decontaminate_ngram: int = 13
    """Words per n-gram of decontaminate (GPT-3: 13). An evaluation text shorter than this is matched whole when
    it has at least 8 words; shorter ones are only counted (too common to mark
    a document)."""
    decontaminate_mode: str = "drop"
    """``drop``: drop a document with any matching n-gram. ``cut``: remove only the sentences a match covers."""
    split_bytes: int = 8 << 20
    """Bytes per range when one large input file is read by several workers: an uncompressed file of the bert,
    jsonl or wikiextractor formats is cut at document boundaries (Parquet at row groups, an indexed bz2
    multistream Wikipedia dump at its streams), so one big file is not read by one worker alone. 0: every file
    read whole. pairing_scope ``global`` only (``file`` keeps a file's buckets in its order: one worker per
    file). The shards are the same for any value (not in the manifest)."""
    memory_budget: int = 32
    """MB of tokenized documents (4 bytes per word piece) the local runner keeps in memory for the global
    pairing scope's shuffle, over all its worker processes; the rest waits on disk in the run's staging folder
    (inside the output directory), so memory stays flat at any corpus size (the runner's process holds about
    5-7x what it keeps). 0: every document on disk. The shards are the same for any value (not in the
    manifest); Dask and Dataflow shuffle out of memory themselves and ignore it."""

    output_format: str = "arrow"
    """What the run writes. ``arrow``: bertprep's shards (shard-NNNNN-of-MMMMM.arrow), which ``bertprep train``
    reads and Hugging Face ``datasets.load_dataset(OUTPUT_DIR)`` loads (a dataset card README.md names the
    splits). ``mds``: the same instances as MosaicML Streaming's MDS (``MDSWriter``; one sub-folder per shard and
    a merged index.json) for Composer trainers such as ModernBERT's (pip install 'bertprep[mds]'). ``megatron``:
    the tokenized documents, one sequence per sentence with document boundaries, as Megatron-LM's indexed
    dataset (``text_sentence.bin``/``.idx``, as its preprocess_data.py --split-sentences writes) for its BERT
    dataset, which pairs and masks at training time (pip install 'bertprep[megatron]'; pairing_scope ``global``).
    Every format has manifest.json written last."""
    mds_compression: str | None = None
    """``output_format`` ``mds``: the compression of MDS's shard files (one of the library's, e.g. ``zstd``,
    ``zstd:7``, ``gz``, ``br``, ``snappy``, ``bz2``); ``None``: uncompressed."""
    mds_hashes: tuple[str, ...] = ()
    """``output_format`` ``mds``: the hashes MDS records of each shard file in index.json (the library's, e.g.
    ``sha1``, ``xxh64``), which ``StreamingDataset(validate_hash=...)`` checks."""

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
        self._check_output_format()
        if self.decontaminate_ngram < 1:
            raise ValueError(f"--decontaminate-ngram must be >= 1 (words per n-gram), got {self.decontaminate_ngram}")
        if self.decontaminate_mode not in DECONTAMINATE_MODES:
            raise ValueError(
                f"--decontaminate-mode must be one of {', '.join(DECONTAMINATE_MODES)}, got {self.decontaminate_mode!r}"
            )

    def _check_output_format(self) -> None:
        if self.output_format not in OUTPUT_FORMATS:
            raise ValueError(f"--output-format must be one of {', '.join(OUTPUT_FORMATS)}, got {self.output_format!r}")
        if self.output_format != "mds" and (self.mds_compression or self.mds_hashes):
            raise ValueError("--mds-compression and --mds-hashes go with --output-format mds only")
        if self.output_format == "megatron" and self.pairing_scope != "global":
            raise ValueError(
                "--output-format megatron writes the tokenized documents, which --pairing-scope global gathers; "
                "drop --pairing-scope file"
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
        return resolve_strip_accents(self.strip_accents, self.do_lower_case)

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
        if self.output_format == "arrow":  # the manifest of an Arrow run is unchanged
            del d["output_format"]
        if not self.mds_compression and not self.mds_hashes:
            del d["mds_compression"], d["mds_hashes"]
        else:
            d["mds_hashes"] = list(self.mds_hashes)
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
