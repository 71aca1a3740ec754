"""``bertprep make-shards``: options -> :class:`ShardsConfig` -> :func:`run_make_shards`."""

from __future__ import annotations

import click

from bertprep.cli.options import (
    casing_options,
    dataclass_default,
    inputs_option,
    memory_budget_option,
    output_dir_option,
    overwrite_option,
    quiet_option,
    reader_options,
)
from bertprep.pipeline.config import (
    DECONTAMINATE_MIN_WORDS,
    DECONTAMINATE_MODES,
    DEDUP_MODES,
    MASKING_MODES,
    MASKING_SCHEMES,
    MIN_SPLIT_BYTES,
    OBJECTIVES,
    PAIRING_SCOPES,
    SAMPLING_MODES,
    InstanceConfig,
    MaskingConfig,
    ShardsConfig,
)
from bertprep.pipeline.instances.buckets import MIN_DOCUMENTS_PER_BUCKET

# Defaults and choices shown in --help come from the library's dataclasses and constants, never restated here.
_default = dataclass_default(InstanceConfig, MaskingConfig, ShardsConfig)


def _local_vocab(value: str | None) -> str | None:
    """``--vocab``: a Hugging Face Hub id becomes its cached snapshot directory (``pipeline.hub``)."""
    from bertprep.pipeline.hub import HubError, resolve_model_dir

    try:
        return resolve_model_dir(value) if value else value
    except HubError as err:
        raise click.BadParameter(str(err), param_hint="--vocab") from None


def _check_split_bytes(ctx: click.Context, param: click.Parameter, value: int) -> int:
    """Refuse a --split-bytes below ``MIN_SPLIT_BYTES`` (but 0): a range per byte or per KB never ends."""
    if 0 < value < MIN_SPLIT_BYTES:
        raise click.BadParameter(
            f"{value:,} bytes per range is below the floor of {MIN_SPLIT_BYTES:,} (1 MiB): each range is a task "
            "that opens and seeks the file, so smaller ranges cost more than they spread; give at least 1 MiB, "
            "or 0 to read every file whole",
            ctx,
            param,
        )
    return value


@click.command(
    "make-shards",
    context_settings={
        "ignore_unknown_options": True,
        "allow_extra_args": True,
        "help_option_names": ["-h", "--help"],
        "max_content_width": 100,
    },
)
@inputs_option(
    "Input files: comma-separated globs, files or directories (repeatable; local or gs://...). "
    "Files are read in glob order, sorted within each pattern, patterns in the order given. "
    "Default: the bundled demo corpus (three public-domain books)."
)
@click.option(
    "--vocab",
    "--vocab-file",
    "vocab",
    required=True,
    metavar="PATH",
    help="The tokenizer: a WordPiece vocab.txt (one token per line, ours or Google's), a Hugging Face "
    "tokenizer.json of any model type (WordPiece; BPE as RoBERTa and ModernBERT; Unigram as XLM-R), or a local "
    "model or build-vocab directory holding one (its tokenizer_config.json names the special tokens: <s> for "
    "[CLS], </s> for [SEP], <mask> for [MASK]), or a Hugging Face Hub id (answerdotai/ModernBERT-base, "
    "roberta-base: its tokenizer from huggingface_hub's cache; HF_HUB_OFFLINE=1 reads the cache only). A BPE / "
    "Unigram tokenizer normalises text itself: --do-lower-case and --strip-accents do not apply.",
    callback=lambda ctx, param, value: _local_vocab(value),
)
@output_dir_option(metavar="DIR")
@casing_options()
@click.option(
    "--max-seq-length",
    type=int,
    default=_default("max_seq_length"),
    show_default=True,
    help="Tokens per instance including [CLS] and both [SEP] (paper: 128 for 90% of steps, then 512).",
)
@click.option(
    "--max-predictions-per-seq",
    type=int,
    default=_default("max_predictions_per_seq"),
    show_default=True,
    help="Cap on masked positions per instance; must be below --max-seq-length (about "
    "max_seq_length x masked_lm_prob: 20 at 128, 76-80 at 512).",
)
@click.option(
    "--masked-lm-prob",
    type=float,
    default=_default("masked_lm_prob"),
    show_default=True,
    help="Fraction of tokens to predict; each is [MASK] 80%, random 10%, kept 10% of the time.",
)
@click.option(
    "--short-seq-prob",
    type=float,
    default=_default("short_seq_prob"),
    show_default=True,
    help="Probability that a pass over a document targets a shorter random length.",
)
@click.option(
    "--dupe-factor",
    type=int,
    default=_default("dupe_factor"),
    show_default=True,
    help="Passes over the corpus, each with fresh pairing and masking (output grows linearly). "
    "Ignored (1) with --masking dynamic.",
)
@click.option(
    "--random-seed",
    type=int,
    default=_default("random_seed"),
    show_default=True,
    help="Seed; the same input, vocab, options and seed give byte-identical shards on any runner.",
)
@click.option(
    "--do-whole-word-mask/--no-do-whole-word-mask",
    default=_default("do_whole_word_mask"),
    show_default=True,
    help="Mask whole words (a piece and its following ## pieces) instead of single pieces: the "
    "original's flag, the same as --masking-scheme whole-word (with no --word-segmenter the output "
    "is the original's).",
)
@click.option(
    "--masking-scheme",
    type=click.Choice(MASKING_SCHEMES),
    default=_default("masking_scheme"),
    show_default=True,
    help="What one masking decision covers; the budget (15%, --max-predictions-per-seq) and 80/10/10 "
    "stay. token: single pieces (the original). whole-word: whole words, each taken or skipped "
    "(the original's --do-whole-word-mask). ngram: n consecutive words, P(n) proportional to 1/n, "
    "n <= --max-ngram-size (ERNIE / Megatron-LM). span: spans of words with geometric lengths "
    "(--span-geometric-p, at most --max-span-length; SpanBERT sec. 3.1, mean 3.8 words), "
    "80/10/10 decided per span. Words: whitespace + punctuation (a piece and its ## pieces; every "
    "Chinese character is a word), or --word-segmenter's. Static and dynamic masking both honour "
    "it; --sampling fast keeps the per-instance masking for the word-level schemes.",
)
@click.option(
    "--max-ngram-size",
    type=click.IntRange(min=1),
    default=_default("max_ngram_size"),
    show_default=True,
    help="Longest n-gram in words (--masking-scheme ngram).",
)
@click.option(
    "--span-geometric-p",
    type=click.FloatRange(0, 1, min_open=True),
    default=_default("span_geometric_p"),
    show_default=True,
    help="p of the geometric span length in words (--masking-scheme span; SpanBERT 0.2).",
)
@click.option(
    "--max-span-length",
    type=click.IntRange(min=1),
    default=_default("max_span_length"),
    show_default=True,
    help="Longest span in words (--masking-scheme span; SpanBERT 10); longer draws are redrawn "
    "(the geometric truncated and renormalised, as SpanBERT's code).",
)
@click.option(
    "--word-segmenter",
    default=None,
    metavar="MODULE:CALLABLE",
    help="Word boundaries for the word-level masking schemes, for scripts where whitespace and "
    "punctuation do not mark words: an importable callable str -> list[str] returning the words of "
    "a sentence in order (substrings of it), e.g. my_words:words; or a built-in: jieba (Chinese, "
    "pip install jieba) or kiwi (Korean morphemes, pip install kiwipiepy). It only groups the "
    "word pieces (the ids do not change) and implies --word-ids. Must be importable on every "
    "worker (on Dataflow: ship it with --setup_file). Default: whitespace + punctuation.",
)
@click.option(
    "--word-ids/--no-word-ids",
    default=_default("word_ids"),
    show_default=True,
    help="Write a word_ids column (the word index of each piece in its row, -1 at [CLS]/[SEP]); on "
    "by itself with --word-segmenter, so that dynamic masking in `bertprep train` uses the "
    "segmenter's words.",
)
@click.option(
    "--objective",
    type=click.Choice(OBJECTIVES),
    default=_default("objective"),
    show_default=True,
    help="The sentence-level task besides the masked LM. nsp: next-sentence prediction, the original "
    "(BERT sec. 3.1): B follows A or (50%) comes from another document; next_sentence_label 1 = "
    "NotNext. sop: sentence-order prediction (ALBERT sec. 4.2): A and B are consecutive segments "
    "of one document, swapped half the time; next_sentence_label 1 = swapped; a one-sentence "
    "chunk takes the next sentence, or is skipped (and counted) at a document's end. none: no "
    "sentence task (RoBERTa sec. 4.2, FULL-SENTENCES): documents back to back with a [SEP] "
    "between two documents, cut into rows of exactly --max-seq-length tokens (the last row of "
    "each bucket shorter); no next_sentence_label column, token types all 0, --short-seq-prob "
    "unused; `bertprep train` then uses the masked-LM loss alone. Recorded in the manifest; "
    "both --sampling modes honour it.",
)
@reader_options()
@click.option(
    "--pairing-scope",
    type=click.Choice(PAIRING_SCOPES),
    default=_default("pairing_scope"),
    show_default=True,
    help="Where NotNext segments come from. global: documents are spread over seeded "
    "random buckets across the whole corpus, as the original draws from the whole corpus; "
    "needs a shuffle (GroupByKey), whose memory grows with the corpus on the local runner "
    "(not on Dataflow). file: a bucket is a run of consecutive documents of one input file; "
    "no shuffle, flat memory on any runner, but the NotNext pool is local (do not use it with "
    "one-document-per-file inputs such as books).",
)
@click.option(
    "--bucket-tokens",
    type=click.IntRange(min=1),
    default=_default("bucket_tokens"),
    show_default=True,
    help="Word pieces per bucket (the default bucketing). A bucket is the NotNext pool and the unit "
    "of work: buckets sized by word pieces keep a worker's memory bounded, weigh books and "
    "articles by what they cost, and spread even a small corpus over every core. There are "
    f"never so many buckets that they average fewer than {MIN_DOCUMENTS_PER_BUCKET} documents.",
)
@click.option(
    "--bucket-size",
    type=click.IntRange(min=0),
    default=None,
    help="Documents per bucket instead of --bucket-tokens. 0 = one bucket holding every document: "
    "with --pairing-scope global (and --sampling auto or exact) this reproduces the original "
    "generator's output exactly (same instances, same order), on one core for instance "
    "creation.  [default: by "
    "--bucket-tokens]",
)
@click.option(
    "--num-shards",
    type=int,
    default=_default("num_shards"),
    show_default=True,
    help="Number of output shards; 0 = one per ~50,000 instances. Row counts differ by at most one.",
)
@click.option(
    "--masking",
    type=click.Choice(MASKING_MODES),
    default=_default("masking"),
    show_default=True,
    help="static: masks fixed here, dupe_factor copies (the original). dynamic: unmasked pairs "
    "written once; the trainer masks on the fly with the same rule.",
)
@click.option(
    "--sampling",
    type=click.Choice(SAMPLING_MODES),
    default=_default("sampling"),
    show_default=True,
    help="exact: the original generator's random stream, draw for draw (with one bucket the output is "
    "the original's, instance for instance). fast: the same algorithm and distributions "
    "(pairs, truncation, 15% masking, 80/10/10) with truncation and masking drawn in bulk "
    "with numpy: instance creation takes about 4x less CPU, statistically the same, not the "
    "original's instances. auto: exact with --bucket-size 0 (the original's output), fast "
    "otherwise (several buckets are not the original's instances anyway). The mode used is "
    "recorded in the manifest. Default output differs from earlier versions' (buckets of "
    "20,000 documents, exact sampling): --bucket-size 20000 --sampling exact gives that output, "
    "--bucket-size 0 the original's as before.",
)
@click.option(
    "--eval-fraction",
    type=click.FloatRange(0, 1, max_open=True),
    default=_default("eval_fraction"),
    show_default=True,
    help="Hold out this share of the documents (whole documents, e.g. 0.01) as a second shard set in "
    "OUTPUT_DIR/eval/ (its own manifest; use it with `bertprep train --eval-shards OUTPUT_DIR/eval`). "
    "Made with the same options; its NotNext segments come from eval documents only. A document "
    "is held out when a stable hash of (--eval-seed, input path, document index in the file) "
    "falls below the fraction, so no document is in both sets on any runner. 0 = no split.",
)
@click.option(
    "--eval-seed",
    type=click.IntRange(0, 2**32 - 1),
    default=_default("eval_seed"),
    show_default=True,
    help="Seed of the held-out split, apart from --random-seed: shard sets made with other random "
    "seeds hold out the same documents (so none of them trains on another's eval documents).",
)
@memory_budget_option
@click.option(
    "--split-bytes",
    type=click.IntRange(min=0),
    default=_default("split_bytes"),
    show_default=True,
    callback=_check_split_bytes,
    help="Bytes per range when one large input file is read by several workers: an uncompressed file of the "
    "bert, jsonl or wikiextractor formats is cut at document boundaries (Parquet at row groups, an indexed bz2 "
    "multistream Wikipedia dump at its streams), so one big file is not read by one worker alone. At least "
    f"{MIN_SPLIT_BYTES:,} (1 MiB); 0: every file read whole. --pairing-scope global only. The shards are the "
    "same for any value.",
)
@click.option(
    "--dedup",
    type=click.Choice(DEDUP_MODES),
    default=_default("dedup"),
    show_default=True,
    help="exact: keep one copy of documents whose text is equal after the tokenizer's normalization "
    "(case and accents as --do-lower-case/--strip-accents, whitespace collapsed): the first in "
    "input order. --pairing-scope global: the documents are grouped by a hash of that text (a "
    "shuffle, no extra read); file: one extra read of the inputs (no tokenization) and a "
    "shuffle of hashes and ids only. minhash: near-duplicates too: a document is dropped when an "
    "earlier one (input order) has an estimated Jaccard similarity of word n-grams >= "
    "--dedup-threshold (MinHash, 128 permutations, LSH bands as shuffle keys; one extra read of the "
    "inputs in either scope). Dropped copies are counted in the manifest and the log.",
)
@click.option(
    "--dedup-threshold",
    type=click.FloatRange(0, 1, min_open=True),
    default=_default("dedup_threshold"),
    show_default=True,
    help="--dedup minhash: Jaccard similarity of two documents' word n-gram sets from which the later one is dropped.",
)
@click.option(
    "--dedup-ngram",
    type=click.IntRange(min=1),
    default=_default("dedup_ngram"),
    show_default=True,
    help="--dedup minhash: words per shingle (documents shorter than this are one shingle). Edits weigh "
    "more on longer shingles: at --dedup-threshold 0.8, 3-grams keep a copy with about 3% of its words "
    "edited a near-copy, 5-grams about 1%.",
)
@click.option(
    "--source",
    "sources",
    multiple=True,
    metavar="NAME=GLOBS[:WEIGHT]",
    help="A source of a weighted mixture, instead of -i (repeatable): its name, its comma-separated "
    "globs, and a sampling rate (default 1) that multiplies the source's word pieces: 2 writes every "
    "document twice; 0.5 keeps half of the word pieces, whole documents in the order of a stable "
    "hash of (--random-seed, source, document) and the last one cut at a sentence; 1.5 every "
    "document once plus such a half. The same on any runner. Copies are distinct documents (own "
    "buckets, own masks) on the held-out side of their original; --dedup runs before sampling. The "
    "manifest records each source's size, rate and realised shares of word pieces and instances "
    "(bertprep inspect prints them). --pairing-scope global only.",
)
@click.option(
    "--mixture",
    default=None,
    metavar="FILE.json",
    help='Sources from a JSON file: {"sources": [{"name": ..., "inputs": [globs] or "globs", '
    '"weight": rate}], "temperature_alpha": optional}; instead of --source.',
)
@click.option(
    "--mixture-alpha",
    type=click.FloatRange(0, 1),
    default=None,
    help="Temperature sampling over the sources instead of weights (XLM-R): source i's share of the "
    "data becomes proportional to n_i^alpha, n_i its input bytes, at the same total size "
    "(0.3 in XLM-R; 1 = as read; 0 = equal shares).",
)
@click.option(
    "--decontaminate",
    multiple=True,
    metavar="FILES",
    help="Evaluation files whose texts must not be trained on (repeatable, comma-separated): GLUE "
    ".tsv, SQuAD .json, SWAG .csv, or plain text (one text per line). A document sharing a word "
    "n-gram (--decontaminate-ngram, after lower-casing and stripping punctuation) with them is "
    "dropped or cut (--decontaminate-mode); counted per file in the manifest. --pairing-scope "
    "global: before --dedup exact; file: as the streaming pass reads, after the dedup pass.",
)
@click.option(
    "--decontaminate-ngram",
    type=click.IntRange(min=1),
    default=_default("decontaminate_ngram"),
    show_default=True,
    help="Words per n-gram of --decontaminate (GPT-3: 13). An evaluation text shorter than this is matched "
    f"whole when it has at least {DECONTAMINATE_MIN_WORDS} words; shorter ones are only counted (too common to "
    "mark a document).",
)
@click.option(
    "--decontaminate-mode",
    type=click.Choice(DECONTAMINATE_MODES),
    default=_default("decontaminate_mode"),
    show_default=True,
    help="drop: drop a document with any matching n-gram. cut: remove only the sentences a match covers.",
)
@overwrite_option()
@quiet_option()
@click.argument("beam_args", nargs=-1, type=click.UNPROCESSED)
def make_shards(beam_args, quiet, **options):
    """Turn documents into masked BERT pre-training instances, written as Arrow shards.

    Runs the original generator's algorithm (google-research/bert create_pretraining_data.py: document-level
    sentence pairs, 50% NotNext, 15% masking with 80/10/10) as an Apache Beam pipeline. Any option not
    listed here goes to Beam, e.g.

    \b
      bertprep make-shards -i 'corpus/*.txt' --vocab vocab.txt -o shards/
      bertprep make-shards -i gs://b/corpus/ --vocab gs://b/vocab.txt -o gs://b/shards \\
          --runner=DataflowRunner --project=P --region=us-central1 \\
          --temp_location=gs://b/tmp --setup_file=./setup.py

    Without --runner it runs locally on every core. Output: shard-NNNNN-of-MMMMM.arrow files, vocab.txt
    and manifest.json (written last: a directory without it is incomplete). See `bertprep inspect`.
    """
    from apache_beam.options.pipeline_options import PipelineOptions

    from bertprep.cli.shards_options import check_beam_args, shards_config
    from bertprep.pipeline.beam.session import INTERRUPTED_STATUS, Interrupted, session
    from bertprep.pipeline.remote import use_filesystem_options

    ctx = click.get_current_context()
    explicit = frozenset(
        name for name in options if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT
    )
    try:
        with session(beam_args, quiet=quiet) as run_session:
            check_beam_args(ctx, beam_args)  # after the session's logging set-up: Beam's parser logs via root
            use_filesystem_options(PipelineOptions(list(beam_args)))  # s3:// needs them before the vocab is read
            config, vocab, warnings = shards_config(options, explicit)
            for warning in warnings:
                click.echo(warning if warning.startswith("No -i/--input") else f"Warning: {warning}", err=True)
            try:
                manifest = run_session.run(config, beam_args, vocab=vocab)
            except Exception as err:
                from bertprep.pipeline.beam.output import is_user_error

                if is_user_error(err):
                    raise click.ClickException(str(err)) from err
                raise
            finally:
                if run_session.kept_log:
                    click.echo(f"(the worker processes' output is in {run_session.kept_log})", err=True)
    except Interrupted as err:  # SIGINT / SIGTERM: one line, exit status 130
        click.echo(str(err), err=True)
        raise SystemExit(INTERRUPTED_STATUS) from None
    if "dry_run" in manifest:
        click.echo(manifest["dry_run"])
    elif manifest:
        from bertprep.pipeline.shards.inspection import format_summary

        click.echo(format_summary(manifest, config.output_dir))
    else:
        click.echo(f"Shards written to {config.output_dir} (manifest.json)")
